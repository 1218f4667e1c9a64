"""Voice out end to end (issue 28, item 2): the real runtime, python-telegram-bot
and discord.py against their fakes, the model fake and the speech fakes. The
answer to a voice note comes back as a voice note in the soul's voice (the
text beside it, or alone with `mode: only`), never with its code read aloud;
a failed speech call still delivers the text; each part spoken is a ledger row.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from adapters.telegram_adapter import TelegramAdapter
from bot.app.runtime import Runtime
from bot.chat.commands import MENU
from bot.storage.sql import Conn
from bot.types import Inbound
from tests.adapters.test_discord import CHANNEL, GUILD, adapter_for
from tests.adapters.test_telegram import FAST
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.discord_fake import FakeDiscord
from tests.fakes.speech_audio import is_ogg_opus, probe
from tests.fakes.speech_fake import FakeElevenLabs, FakeOpenAISpeech
from tests.fakes.telegram_fake import FakeTelegram
from tests.kit import capture_logs, make_config, serving

PERSON = 9
VOICE = "voice: {provider: elevenlabs, voiceId: rachel-warm, stability: 0.4, style: 0.3}"
ANSWER = (
    "Aye, the tide turns at noon.\n\n```sh\ncat /etc/tides\n```\n\nSee https://tides.example/x."
)
SAID = "Aye, the tide turns at noon. (code in the text) See (link in the text)."


def soul(tmp_path: Path, voice: str = VOICE) -> None:
    folder = tmp_path / "workspaces" / "lark"
    folder.mkdir(parents=True)
    (folder / "SOUL.md").write_text(f"---\nname: Lark\nagentId: lark\n{voice}\n---\nYou are Lark.")


def speech_config(eleven: FakeElevenLabs, openai: FakeOpenAISpeech | None = None) -> str:
    text = f"  elevenlabs: {{base_url: '{eleven.base_url}', api_key: {eleven.api_key}}}\n"
    if openai is not None:
        text += f"  openai: {{base_url: '{openai.base_url}', api_key: {openai.api_key}}}\n"
    return text


@asynccontextmanager
async def telegram_voiced(
    tmp_path: Path, replies: str = "when-spoken-to", mode: str = "beside", voice: str = VOICE
) -> AsyncIterator[tuple[FakeTelegram, FakeAnthropic, FakeElevenLabs, Runtime]]:
    soul(tmp_path, voice)
    async with FakeTelegram() as tg, FakeAnthropic() as model, FakeElevenLabs() as eleven:
        config = make_config(tmp_path, model.url, (
            "adapters: {telegram: {dm_policy: open}}\n"
            f"bindings: [{{platform: telegram, soul: lark, voice_replies: {replies}}}]\n"
            f"voice:\n speech:\n  mode: {mode}\n" + speech_config(eleven)
        ))  # fmt: skip
        adapter = TelegramAdapter(tg.token, tg.base_url, MENU, poll_timeout_s=1, backoff=FAST)
        async with serving(config, [adapter]) as runtime:
            yield tg, model, eleven, runtime


async def spoken_to(runtime: Runtime, text: str) -> None:
    """A voice note's transcript from PERSON, as the Telegram adapter hands it on."""
    await runtime.router.handle(Inbound(
        platform="telegram", chat_id=str(PERSON), user_id=str(PERSON), user_name="Ann",
        text=text, is_dm=True, spoken=True,
    ))  # fmt: skip


def audio_files(folder: Path) -> list[Path]:
    """The files under `folder` that hold OGG pages."""
    return [p for p in folder.rglob("*") if p.is_file() and b"OggS" in p.read_bytes()]


async def voice_rows(runtime: Runtime) -> list[tuple[Any, ...]]:
    def read(conn: Conn) -> list[tuple[Any, ...]]:
        rows = conn.execute("SELECT kind, model, amount, cost_usd, soul FROM voice_usage")
        return [tuple(row) for row in rows.fetchall()]

    return await runtime.db.run(read)


async def test_an_answer_to_a_voice_note_comes_back_as_one_with_the_text_beside(
    tmp_path: Path,
) -> None:
    async with telegram_voiced(tmp_path) as (tg, model, eleven, runtime):
        model.script_text(ANSWER)
        await spoken_to(runtime, "when does the tide turn?")
        await tg.wait_for(lambda f: len(f.voices) == 1, what="the voice note")
        rows = await voice_rows(runtime)
    [text] = tg.sent
    assert text["text"].startswith("Aye, the tide turns at noon.")
    [voice] = tg.voices
    assert is_ogg_opus(voice.file.data) and voice.chat_id == PERSON
    assert probe(voice.file.data).duration_s == pytest.approx(len(SAID) * 0.02, abs=0.05)
    sends = [c.method for c in tg.calls if c.method in ("sendMessage", "sendVoice")]
    assert sends == ["sendMessage", "sendVoice"]  # the text first
    [request] = eleven.requests
    assert request.path == "/v1/text-to-speech/rachel-warm"
    assert request.json["voice_settings"] == {"stability": 0.4, "style": 0.3}
    assert request.json["text"] == SAID  # no code, no address
    assert rows == [
        ("spoken", "eleven_multilingual_v2", len(SAID), len(SAID) * 180.0 / 1e6, "lark")
    ]
    assert audio_files(tmp_path) == []  # no audio under data_dir, the workspaces or the logs


async def test_a_typed_message_is_answered_in_text_only_when_spoken_to(tmp_path: Path) -> None:
    async with telegram_voiced(tmp_path) as (tg, _, eleven, _runtime):
        tg.push_message(PERSON, "hello in writing", user_id=PERSON)
        await tg.wait_sent(1)
        await tg.wait_for(lambda f: f.calls_of("sendMessage"), what="the answer")
    assert tg.voices == [] and eleven.requests == []


async def test_always_speaks_a_typed_message_too(tmp_path: Path) -> None:
    async with telegram_voiced(tmp_path, replies="always") as (tg, model, eleven, _runtime):
        model.script_text("Written back.")
        tg.push_message(PERSON, "hello in writing", user_id=PERSON)
        await tg.wait_for(lambda f: len(f.voices) == 1, what="the voice note")
    assert [r.text for r in eleven.requests] == ["Written back."]
    assert tg.sent[0]["text"] == "Written back."


async def test_mode_only_sends_the_voice_note_alone(tmp_path: Path) -> None:
    async with telegram_voiced(tmp_path, mode="only") as (tg, model, _, runtime):
        model.script_text("Fair winds.")
        await spoken_to(runtime, "bye")
        await tg.wait_for(lambda f: len(f.voices) == 1, what="the voice note")
        await runtime.sessions.wait(10)
    assert tg.sent == [] and tg.drafts == []  # no text, not even a draft


@pytest.mark.parametrize(("mode", "status"), [("beside", 500), ("only", 401)])
async def test_a_failed_speech_call_still_delivers_the_text(
    tmp_path: Path, mode: str, status: int
) -> None:
    with capture_logs() as logs:
        async with telegram_voiced(tmp_path, mode=mode) as (tg, model, eleven, runtime):
            model.script_text("Fair winds.")
            eleven.fail_next(status)
            await spoken_to(runtime, "bye")
            [text] = await tg.wait_sent(1)
            await runtime.sessions.wait(10)
            rows = await voice_rows(runtime)
    assert text["text"] == "Fair winds." and tg.voices == [] and rows == []
    [failed] = [line for line in logs if line["event"] == "voice.speech_failed"]
    assert failed["error"].startswith(f"elevenlabs speech refused: HTTP {status}")
    assert failed["log_level"] == "warning"


async def test_a_person_who_refuses_voice_notes_gets_the_text_in_mode_only(
    tmp_path: Path,
) -> None:
    async with telegram_voiced(tmp_path, mode="only") as (tg, model, _, runtime):
        tg.voice_forbidden.add(PERSON)
        model.script_text("Fair winds.")
        await spoken_to(runtime, "bye")
        [text] = await tg.wait_sent(1)
    assert text["text"] == "Fair winds." and tg.voices == []


async def test_an_openai_voice_and_no_voice_block(tmp_path: Path) -> None:
    voice = "voice: {provider: openai, voice: nova}"
    async with FakeOpenAISpeech() as openai:
        soul(tmp_path, voice)
        async with FakeTelegram() as tg, FakeAnthropic() as model, FakeElevenLabs() as eleven:
            config = make_config(tmp_path, model.url, (
                "adapters: {telegram: {dm_policy: open}}\n"
                "voice:\n speech:\n  replies: always\n" + speech_config(eleven, openai)
            ))  # fmt: skip
            adapter = TelegramAdapter(tg.token, tg.base_url, MENU, poll_timeout_s=1, backoff=FAST)
            async with serving(config, [adapter]):
                tg.push_message(PERSON, "hello", user_id=PERSON)
                await tg.wait_for(lambda f: len(f.voices) == 1, what="the voice note")
    [request] = openai.requests
    assert request.json["voice"] == "nova" and request.json["response_format"] == "wav"
    assert eleven.requests == []


@asynccontextmanager
async def discord_voiced(
    tmp_path: Path,
) -> AsyncIterator[tuple[FakeDiscord, FakeAnthropic, FakeElevenLabs]]:
    soul(tmp_path)
    async with FakeDiscord() as dc, FakeAnthropic() as model, FakeElevenLabs() as eleven:
        dc.add_guild(GUILD, channels=[CHANNEL], members=[(12, "bob")])
        config = make_config(tmp_path, model.url, (
            "adapters: {discord: {dm_policy: open}}\n"
            "bindings: [{platform: discord, soul: lark, voice_replies: always}]\n"
            "voice:\n speech:\n" + speech_config(eleven)
        ))  # fmt: skip
        async with serving(config, [adapter_for(dc)]):
            yield dc, model, eleven


async def test_discord_answers_with_a_voice_message_after_the_text(tmp_path: Path) -> None:
    async with discord_voiced(tmp_path) as (dc, model, _):
        model.script_text("Aye, noon.")
        asked = dc.push_message(900, "when?", author_id=12)
        await dc.wait_for(lambda f: len(f.voice_messages) == 1, what="the voice message")
    text, voice = dc.sent
    assert text.content == "Aye, noon." and text.reply_to == asked
    assert voice.content == "" and voice.body["flags"] == 1 << 13
    [entry] = voice.body["attachments"]
    [message] = dc.voice_messages
    assert is_ogg_opus(message.file.data) and message.file.content_type == "audio/ogg"
    assert entry["duration_secs"] == pytest.approx(len("Aye, noon.") * 0.02, abs=0.03)
    assert 0 < len(message.waveform) <= 256 and max(message.waveform) > 100


async def test_a_channel_that_refuses_voice_messages_gets_an_audio_file(tmp_path: Path) -> None:
    async with discord_voiced(tmp_path) as (dc, _, _eleven):
        dc.voice_refused.add(CHANNEL)
        dc.push_message(CHANNEL, "speak", author_id=12, guild_id=GUILD, mention_bot=True)
        await dc.wait_for(lambda f: len(f.sent) == 2, what="the text and the file")
    text, audio = dc.sent
    assert text.content.startswith("echo:") and dc.voice_messages == []
    [upload] = audio.files
    assert upload.filename == "voice.ogg" and is_ogg_opus(upload.data)
    assert "flags" not in audio.body or not audio.body["flags"] & (1 << 13)
    assert json.dumps(audio.body)  # an ordinary message with the file


async def test_the_conversations_mood_chooses_its_voice(tmp_path: Path) -> None:
    """The seed's "voice routing": the soul's mood (here its defaultMood, as no
    set_mood moved the conversation) picks the voice settings of `voice.moods`."""
    voice = (
        "defaultMood: stormy\nallowedMoods: [calm, stormy]\n"
        "voice: {provider: elevenlabs, voiceId: rachel-warm, stability: 0.4,"
        " moods: {stormy: {voiceId: gale, stability: 0.1, style: 0.9}}}"
    )
    async with telegram_voiced(tmp_path, voice=voice) as (tg, model, eleven, runtime):
        eleven.voices = eleven.voices | {"gale"}
        model.script_text("Batten down.")
        await spoken_to(runtime, "how is the sea?")
        await tg.wait_for(lambda f: len(f.voices) == 1, what="the voice note")
    [request] = eleven.requests
    assert request.path == "/v1/text-to-speech/gale"
    assert request.json["voice_settings"] == {"stability": 0.1, "style": 0.9}
