"""Voice notes read (bot/voice/sound.py) and transcribed (bot/voice/transcribe.py)
against the transcription fake."""

from __future__ import annotations

import io
import wave
from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from bot.config.schema import TranscriptionConfig
from bot.errors import TranscriptionFailed
from bot.voice.sound import read_sound
from bot.voice.transcribe import Transcriber
from tests.fakes.audio import tone_ogg_opus
from tests.fakes.transcription_fake import FakeTranscription
from tests.kit import capture_logs

KEY = "test-transcription-key"


def wav(seconds: float) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(8000)
        file.writeframes(b"\x00\x10" * int(8000 * seconds))
    return out.getvalue()


def test_a_voice_notes_length_and_container_are_read_from_its_bytes() -> None:
    ogg = read_sound(tone_ogg_opus(3.0))
    assert ogg.extension == "ogg" and ogg.seconds == pytest.approx(3.0, abs=0.05)
    plain = read_sound(wav(1.25))
    assert plain.extension == "wav" and plain.seconds == pytest.approx(1.25, abs=0.01)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"#EXTM3U\n#EXT-X-VERSION:3\nfile:///etc/passwd\n", "not audio of a known kind"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "not audio of a known kind"),
        (b"OggS" + b"\x00" * 60, "OGG"),
        (b"", "not audio of a known kind"),
    ],
    ids=["playlist", "png", "broken-ogg", "empty"],
)
def test_what_is_no_audio_is_refused_and_never_probed(data: bytes, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        read_sound(data)


@pytest.fixture
async def fake() -> AsyncIterator[FakeTranscription]:
    async with FakeTranscription() as server:
        yield server


def config(fake: FakeTranscription, key: str = KEY) -> TranscriptionConfig:
    return TranscriptionConfig(base_url=fake.url, api_key=SecretStr(key), model="whisper-1")


async def test_a_note_is_sent_as_openai_takes_it_and_its_text_comes_back(
    fake: FakeTranscription,
) -> None:
    fake.say(440.0, "  Ahoy, Captain.  ")
    async with Transcriber(config(fake)) as transcriber:
        assert await transcriber.transcribe(tone_ogg_opus(1.0), "ogg") == "Ahoy, Captain."
    [heard] = fake.requests
    assert (heard.model, heard.response_format, heard.filename) == (
        "whisper-1",
        "json",
        "voice.ogg",
    )
    assert heard.content_type == "audio/ogg" and heard.authorization == f"Bearer {KEY}"


async def test_no_key_sends_no_authorization() -> None:
    async with FakeTranscription(key=None) as fake, Transcriber(config(fake, "")) as transcriber:
        await transcriber.transcribe(tone_ogg_opus(0.5), "ogg")
        assert fake.requests[0].authorization is None


@pytest.mark.parametrize(
    ("status", "says"),
    [(429, "answered 429"), (500, "answered 500"), (503, "answered 503")],
)
async def test_an_error_status_is_a_failure_with_the_services_words_for_the_log(
    fake: FakeTranscription, status: int, says: str
) -> None:
    fake.fail_next(status, "Rate limit reached for whisper-1")
    async with Transcriber(config(fake)) as transcriber:
        with pytest.raises(TranscriptionFailed) as caught:
            await transcriber.transcribe(tone_ogg_opus(0.5), "ogg")
    assert caught.value.reason == f"the transcription service {says}"
    assert caught.value.status == status and "Rate limit reached" in str(caught.value)


async def test_a_wrong_key_is_a_401_failure_and_the_key_is_in_no_message(
    fake: FakeTranscription,
) -> None:
    secret = "sk-wrong-key-0123456789"
    async with Transcriber(config(fake, secret)) as transcriber:
        with capture_logs() as logs, pytest.raises(TranscriptionFailed) as caught:
            await transcriber.transcribe(tone_ogg_opus(0.5), "ogg")
    assert caught.value.status == 401 and secret not in str(caught.value)
    assert secret not in repr(logs)


async def test_an_unreachable_service_is_a_failure() -> None:
    async with FakeTranscription() as fake:
        gone = config(fake)
    async with Transcriber(gone) as transcriber:
        with pytest.raises(TranscriptionFailed, match="could not be reached"):
            await transcriber.transcribe(tone_ogg_opus(0.5), "ogg")
