"""The Discord fake's voice messages: flags 1 << 13, one OGG/Opus file whose
attachment entry says its duration and waveform; Discord's codes otherwise."""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp
import pytest

from bot.voice.encode import decode, voice_note
from tests.fakes.discord_fake import FakeDiscord
from tests.fakes.speech_audio import tone, tone_pcm

CHANNEL, GUILD = 510, 500
OGG = voice_note(decode(tone_pcm(0.8, 24000), 24000)).data
WAVE = base64.b64encode(bytes([10, 200, 90])).decode()


def _entry(**over: Any) -> dict[str, Any]:
    return {
        "id": 0,
        "filename": "voice-message.ogg",
        "duration_secs": 0.8,
        "waveform": WAVE,
        **over,
    }


async def _post(fake: FakeDiscord, payload: dict[str, Any], files: list[bytes]) -> tuple[int, Any]:
    form = aiohttp.FormData()
    form.add_field("payload_json", json.dumps(payload))
    for n, data in enumerate(files):
        form.add_field(f"files[{n}]", data, filename="voice-message.ogg", content_type="audio/ogg")
    headers = {"Authorization": f"Bot {fake.token}"}
    url = f"{fake.api_base_url}/channels/{CHANNEL}/messages"
    async with aiohttp.ClientSession() as http, http.post(url, data=form, headers=headers) as r:
        return r.status, await r.json()


async def test_a_voice_message_keeps_its_duration_waveform_and_bytes() -> None:
    async with FakeDiscord() as fake:
        fake.add_guild(GUILD, channels=[CHANNEL])
        status, msg = await _post(fake, {"flags": 8192, "attachments": [_entry()]}, [OGG])
    assert status == 200 and msg["flags"] == 8192
    [attachment] = msg["attachments"]
    assert attachment["duration_secs"] == 0.8 and attachment["waveform"] == WAVE
    [voice] = fake.voice_messages
    assert voice.file.data == OGG and voice.waveform == bytes([10, 200, 90])


@pytest.mark.parametrize(
    ("payload", "files", "status", "code"),
    [
        ({"flags": 8192, "content": "hi", "attachments": [_entry()]}, [OGG], 400, 50159),
        ({"flags": 8192, "attachments": [_entry(), _entry(id=1)]}, [OGG, OGG], 400, 50160),
        ({"flags": 8192, "attachments": [_entry()]}, [tone(0.5, "mp3")], 400, 50160),
        ({"flags": 8192, "attachments": [_entry(waveform=None)]}, [OGG], 400, 50161),
        ({"flags": 8192, "attachments": [_entry(duration_secs=0)]}, [OGG], 400, 50161),
        ({"flags": 8192, "attachments": [_entry(waveform="!!")]}, [OGG], 400, 50161),
    ],
)  # fmt: skip
async def test_what_discord_refuses(
    payload: dict[str, Any], files: list[bytes], status: int, code: int
) -> None:
    async with FakeDiscord() as fake:
        fake.add_guild(GUILD, channels=[CHANNEL])
        got, body = await _post(fake, payload, files)
    assert (got, body["code"]) == (status, code) and fake.voice_messages == []


async def test_a_channel_that_refuses_voice_messages_still_takes_a_file() -> None:
    async with FakeDiscord() as fake:
        fake.add_guild(GUILD, channels=[CHANNEL])
        fake.voice_refused.add(CHANNEL)
        refused, body = await _post(fake, {"flags": 8192, "attachments": [_entry()]}, [OGG])
        plain, _ = await _post(fake, {"attachments": [{"id": 0, "filename": "voice.ogg"}]}, [OGG])
    assert (refused, body["code"]) == (403, 50173) and plain == 200
