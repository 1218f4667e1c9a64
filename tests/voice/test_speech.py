"""Speech against the fakes of ElevenLabs and an OpenAI-compatible service: the
soul's voice and settings (and its mood's) are what the service is asked for,
code is never sent, long answers go in parts, every failure is one SpeechError
line, and each part is counted in the ledger."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

import pytest

from bot.config.load import parse_config
from bot.config.schema import SpeechConfig
from bot.errors import SpeechError
from bot.model.usage import CallContext
from bot.soul.voice import SoulVoice
from bot.voice.speech import Speech
from tests.fakes.speech_audio import is_ogg_opus, probe
from tests.fakes.speech_fake import FakeElevenLabs, FakeOpenAISpeech

CTX = CallContext("marlow", "user:telegram:9", "telegram:9", "telegram:9", "turn")
RACHEL = SoulVoice.model_validate({
    "provider": "elevenlabs", "voiceId": "rachel-warm", "stability": 0.4, "similarity_boost": 0.8,
    "moods": {"stormy": {"stability": 0.1, "style": 0.9}},
})  # fmt: skip
NOVA = SoulVoice.model_validate({"provider": "openai", "voice": "nova", "speed": 1.25})


class Rows:
    """The ledger's record_voice, kept."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    async def record_voice(
        self, ctx: CallContext, kind: Literal["heard", "spoken"], model: str, amount: float,
        cost_usd: float,
    ) -> None:  # fmt: skip
        self.rows.append((ctx, kind, model, amount, cost_usd))


def config(eleven: FakeElevenLabs | None = None, openai: FakeOpenAISpeech | None = None,
           extra: str = "") -> SpeechConfig:  # fmt: skip
    text = "voice: {speech: {" + extra
    if eleven is not None:
        text += f"elevenlabs: {{base_url: '{eleven.base_url}', api_key: {eleven.api_key}}}, "
    if openai is not None:
        text += f"openai: {{base_url: '{openai.base_url}', api_key: {openai.api_key}}}, "
    return parse_config(text + "}}", "t.yaml", {}).voice.speech


@pytest.fixture
async def eleven() -> AsyncIterator[FakeElevenLabs]:
    async with FakeElevenLabs() as fake:
        yield fake


@pytest.fixture
async def openai() -> AsyncIterator[FakeOpenAISpeech]:
    async with FakeOpenAISpeech() as fake:
        yield fake


async def test_elevenlabs_gets_the_voice_id_settings_and_no_code(eleven: FakeElevenLabs) -> None:
    rows = Rows()
    speech = Speech(config(eleven), rows)
    text = "Aye, here it is:\n\n```py\nprint('secret')\n```\n\nMind the **reef**."
    note = await speech.speak(text, RACHEL, None, CTX)
    await speech.close()
    [request] = eleven.requests
    assert request.path == "/v1/text-to-speech/rachel-warm"
    assert request.query == {"output_format": "pcm_24000"}
    assert request.headers["xi-api-key"] == "xi-test-key"
    assert request.json == {
        "text": "Aye, here it is: (code in the text) Mind the reef.",
        "model_id": "eleven_multilingual_v2",
        "voice_settings": {"stability": 0.4, "similarity_boost": 0.8},
    }
    assert is_ogg_opus(note.data)
    spoken = len(request.json["text"])
    assert probe(note.data).duration_s == pytest.approx(spoken * 0.02, abs=0.03)
    assert rows.rows == [(CTX, "spoken", "eleven_multilingual_v2", spoken, spoken * 180.0 / 1e6)]


async def test_a_mood_changes_the_settings_it_names(eleven: FakeElevenLabs) -> None:
    speech = Speech(config(eleven))
    await speech.speak("Storm coming.", RACHEL, "stormy", CTX)
    await speech.speak("Calm seas.", RACHEL, "calm", CTX)  # no override for it: the block's own
    await speech.close()
    stormy, calm = (r.json["voice_settings"] for r in eleven.requests)
    assert stormy == {"stability": 0.1, "similarity_boost": 0.8, "style": 0.9}
    assert calm == {"stability": 0.4, "similarity_boost": 0.8}


async def test_openai_gets_the_voice_name_and_speed_as_wav(openai: FakeOpenAISpeech) -> None:
    rows = Rows()
    speech = Speech(config(openai=openai), rows)
    note = await speech.speak("Fair winds to you.", NOVA, None, CTX)
    await speech.close()
    [request] = openai.requests
    assert request.path == "/v1/audio/speech"
    assert request.headers["Authorization"] == "Bearer sk-test-speech"
    assert request.json == {"model": "tts-1", "input": "Fair winds to you.", "voice": "nova",
                            "response_format": "wav", "speed": 1.25}  # fmt: skip
    assert is_ogg_opus(note.data) and note.duration_s == pytest.approx(0.36, abs=0.03)
    assert rows.rows == [(CTX, "spoken", "tts-1", 18, 18 * 15.0 / 1e6)]


async def test_a_long_answer_is_spoken_in_parts_joined_in_one_note(
    openai: FakeOpenAISpeech,
) -> None:
    rows = Rows()
    speech = Speech(config(openai=openai, extra="max_chars: 100, "), rows)
    text = " ".join(f"Sentence number {n} is here." for n in range(12))  # 334 characters
    note = await speech.speak(text, NOVA, None, CTX)
    await speech.close()
    sent = openai.spoken()
    assert len(sent) == 4 and all(len(part) <= 100 for part in sent)
    assert " ".join(sent) == text
    assert note.duration_s == pytest.approx(sum(len(p) for p in sent) * 0.02, abs=0.1)
    assert [row[3] for row in rows.rows] == [len(p) for p in sent]


async def test_a_local_server_without_a_key_gets_no_authorization() -> None:
    async with FakeOpenAISpeech(api_key=None, voices=None) as local:
        text = f"voice: {{speech: {{openai: {{base_url: '{local.base_url}'}}}}}}"
        speech = Speech(parse_config(text, "t", {}).voice.speech)
        local_voice = SoulVoice.model_validate({"provider": "openai", "voice": "af_bella"})
        await speech.speak("Hello.", local_voice, None, CTX)
        await speech.close()
    assert "Authorization" not in local.requests[0].headers


@pytest.mark.parametrize(
    ("status", "code"),
    [(401, "invalid_api_key"), (500, "internal_error"), (404, "voice_not_found")],
)
async def test_elevenlabs_failures_are_one_line(
    eleven: FakeElevenLabs, status: int, code: str
) -> None:
    rows = Rows()
    speech = Speech(config(eleven), rows)
    eleven.fail_next(status)
    with pytest.raises(SpeechError) as info:
        await speech.speak("Hello.", RACHEL, None, CTX)
    await speech.close()
    told = f"The fake was told to fail with {status}."
    assert str(info.value) == f"elevenlabs speech refused: HTTP {status}: {code}: {told}"
    assert rows.rows == []


async def test_a_422_names_the_field_and_a_bad_key_is_never_echoed(
    eleven: FakeElevenLabs, openai: FakeOpenAISpeech
) -> None:
    speech = Speech(config(eleven))
    loud = SoulVoice.model_validate({"provider": "elevenlabs", "voiceId": "rachel-warm"})
    eleven.fail_next(422, {"detail": [{"type": "x", "loc": ["body", "text"], "msg": "too odd"}]})
    with pytest.raises(SpeechError, match=r"HTTP 422: body\.text: too odd$"):
        await speech.speak("Hello.", loud, None, CTX)
    await speech.close()
    url = openai.base_url
    wrong = f"voice: {{speech: {{openai: {{base_url: '{url}', api_key: sk-WRONG-secret-999}}}}}}"
    speech = Speech(parse_config(wrong, "t", {}).voice.speech)
    with pytest.raises(
        SpeechError, match="openai speech refused: HTTP 401: Incorrect API key"
    ) as info:
        await speech.speak("Hello.", NOVA, None, CTX)
    await speech.close()
    assert "sk-WRONG-secret-999" not in str(info.value)


async def test_unreachable_and_nothing_to_say_are_speech_errors() -> None:
    closed = parse_config("voice: {speech: {openai: {base_url: 'http://127.0.0.1:9/v1'}}}", "t", {})
    speech = Speech(closed.voice.speech)
    with pytest.raises(SpeechError, match="openai speech unreachable: ClientConnectorError"):
        await speech.speak("Hello.", NOVA, None, CTX)
    with pytest.raises(SpeechError, match="nothing in the answer to say aloud"):
        await speech.speak("```\ncode only\n```", NOVA, None, CTX)
    await speech.close()


def test_a_provider_is_available_once_it_is_set_up() -> None:
    bare = Speech(SpeechConfig())
    assert not bare.available(RACHEL) and not bare.available(NOVA)
    text = "voice: {speech: {elevenlabs: {api_key: k}, openai: {base_url: 'http://h/v1'}}}"
    both = parse_config(text, "t", {}).voice.speech
    assert Speech(both).available(RACHEL) and Speech(both).available(NOVA)
