"""The speech fakes answer as the services do: real audio in the format asked,
as long as the text; the services' error shapes for what they refuse."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from tests.fakes.speech_audio import SPEECH_RATE, probe
from tests.fakes.speech_fake import FakeElevenLabs, FakeOpenAISpeech

HI = {"model": "tts-1", "input": "hi", "voice": "nova"}
SETTINGS = ["body", "voice_settings"]
TEXT = "Ahoy there, the tide is turning."  # 32 characters: 0.64 s at the fakes' pace


async def _post(url: str, headers: dict[str, str], body: Any) -> tuple[int, bytes, str]:
    async with aiohttp.ClientSession() as http, http.post(url, headers=headers, json=body) as r:
        return r.status, await r.read(), r.content_type


@pytest.mark.parametrize(
    ("response_format", "container"),
    [("mp3", "mp3"), ("opus", "ogg"), ("aac", "aac"), ("flac", "flac"), ("wav", "wav")],
)
async def test_openai_answers_audio_in_the_format_asked(
    response_format: str, container: str
) -> None:
    async with FakeOpenAISpeech() as fake:
        body = {
            "model": "tts-1",
            "input": TEXT,
            "voice": "nova",
            "response_format": response_format,
        }
        auth = {"Authorization": "Bearer sk-test-speech"}
        status, audio, _ = await _post(f"{fake.base_url}/audio/speech", auth, body)
    assert status == 200
    found = probe(audio)
    assert found.container == container and found.channels == 1
    assert found.duration_s == pytest.approx(0.64, abs=0.07)
    [request] = fake.requests
    assert request.json == body and fake.spoken() == [TEXT]


async def test_openai_pcm_is_raw_24_khz_mono_and_mp3_is_the_default() -> None:
    async with FakeOpenAISpeech() as fake:
        auth = {"Authorization": "Bearer sk-test-speech"}
        url = f"{fake.base_url}/audio/speech"
        pcm = {"model": "tts-1", "input": TEXT, "voice": "nova", "response_format": "pcm"}
        _, raw, kind = await _post(url, auth, pcm)
        _, mp3, _ = await _post(url, auth, {"model": "tts-1", "input": TEXT, "voice": "nova"})
    assert kind == "audio/pcm" and len(raw) == round(0.64 * SPEECH_RATE) * 2
    assert probe(mp3).container == "mp3"


@pytest.mark.parametrize(
    ("headers", "body", "status", "code", "param"),
    [
        ({}, HI, 401, "invalid_api_key", None),
        ({"Authorization": "Bearer wrong-key-1234"}, HI, 401, "invalid_api_key", None),
        (None, {"model": "tts-1", "voice": "nova"}, 400, "missing_required_parameter", "input"),
        (None, {"model": "tts-9", "input": "hi", "voice": "nova"}, 404, "model_not_found", None),
        (None, {"model": "tts-1", "input": "hi", "voice": "rachel"}, 400, "invalid_value", "voice"),
        (None, {"model": "tts-1", "input": "hi", "voice": "nova", "response_format": "ogg"},
         400, "invalid_value", "response_format"),
        (None, {"model": "tts-1", "input": "hi", "voice": "nova", "speed": 9}, 400,
         "invalid_value", "speed"),
        (None, {"model": "tts-1", "input": "x" * 4097, "voice": "nova"}, 400,
         "string_above_max_length", "input"),
    ],
)  # fmt: skip
async def test_openai_refuses_in_its_error_shape(
    headers: dict[str, str] | None, body: Any, status: int, code: str, param: str | None
) -> None:
    async with FakeOpenAISpeech() as fake:
        given = {"Authorization": "Bearer sk-test-speech"} if headers is None else headers
        got, raw, _ = await _post(f"{fake.base_url}/audio/speech", given, body)
    assert got == status
    error = json.loads(raw)["error"]
    assert error["code"] == code and error["param"] == param
    assert error["type"] == "invalid_request_error" and error["message"]
    assert fake.requests[0].status == status and fake.spoken() == []


async def test_openai_without_a_key_takes_any_and_a_scripted_failure_comes_once() -> None:
    async with FakeOpenAISpeech(api_key=None, voices=None) as fake:
        url, body = (
            f"{fake.base_url}/audio/speech",
            {"model": "tts-1", "input": "hi", "voice": "af_bella"},
        )
        fake.fail_next(500)
        failed, raw, _ = await _post(url, {}, body)
        ok, _, _ = await _post(url, {}, body)
    assert failed == 500 and b'"server_error"' in raw and ok == 200


@pytest.mark.parametrize(
    ("output_format", "container"), [("mp3_44100_128", "mp3"), ("opus_48000_64", "ogg")]
)
async def test_elevenlabs_answers_audio_in_the_output_format(
    output_format: str, container: str
) -> None:
    async with FakeElevenLabs() as fake:
        url = f"{fake.base_url}/v1/text-to-speech/rachel-warm?output_format={output_format}"
        status, audio, _ = await _post(url, {"xi-api-key": "xi-test-key"}, {"text": TEXT})
    assert status == 200 and probe(audio).container == container
    assert probe(audio).duration_s == pytest.approx(0.64, abs=0.07)


async def test_elevenlabs_pcm_is_raw_at_the_rate_named_and_settings_are_recorded() -> None:
    body = {
        "text": TEXT,
        "model_id": "eleven_multilingual_v2",
        "voice_settings": {"stability": 0.3, "similarity_boost": 0.8, "style": 0.5,
                           "use_speaker_boost": True},
    }  # fmt: skip
    async with FakeElevenLabs() as fake:
        url = f"{fake.base_url}/v1/text-to-speech/rachel-warm?output_format=pcm_16000"
        status, raw, _ = await _post(url, {"xi-api-key": "xi-test-key"}, body)
    assert status == 200 and len(raw) == round(0.64 * 16000) * 2
    [request] = fake.requests
    assert request.json == body and request.query == {"output_format": "pcm_16000"}
    assert request.path == "/v1/text-to-speech/rachel-warm"


@pytest.mark.parametrize(
    ("voice", "headers", "body", "query", "status", "code"),
    [
        ("rachel-warm", {}, {"text": "hi"}, "", 401, "needs_authorization"),
        ("rachel-warm", {"xi-api-key": "nope"}, {"text": "hi"}, "", 401, "invalid_api_key"),
        ("nobody", None, {"text": "hi"}, "", 404, "voice_not_found"),
        ("rachel-warm", None, {"text": "x" * 10_001}, "", 400, "max_character_limit_exceeded"),
        ("rachel-warm", None, {"text": "hi", "model_id": "x"}, "", 400, "model_not_found"),
    ],
)  # fmt: skip
async def test_elevenlabs_refuses_with_its_detail(
    voice: str, headers: dict[str, str] | None, body: Any, query: str, status: int, code: str
) -> None:
    async with FakeElevenLabs() as fake:
        given = {"xi-api-key": "xi-test-key"} if headers is None else headers
        got, raw, _ = await _post(f"{fake.base_url}/v1/text-to-speech/{voice}{query}", given, body)
    detail = json.loads(raw)["detail"]
    assert got == status and detail["status"] == code and detail["message"]


@pytest.mark.parametrize(
    ("body", "query", "loc"),
    [
        ({}, "", ["body", "text"]),
        ({"text": "hi", "voice_settings": {"stability": 2}}, "", [*SETTINGS, "stability"]),
        ({"text": "hi", "voice_settings": {"warmth": 1}}, "", [*SETTINGS, "warmth"]),
        ({"text": "hi"}, "?output_format=wav_44100", ["query", "output_format"]),
    ],
)  # fmt: skip
async def test_elevenlabs_422_is_fastapis_list(body: Any, query: str, loc: list[str]) -> None:
    async with FakeElevenLabs() as fake:
        url = f"{fake.base_url}/v1/text-to-speech/rachel-warm{query}"
        status, raw, _ = await _post(url, {"xi-api-key": "xi-test-key"}, body)
    [detail] = json.loads(raw)["detail"]
    assert status == 422 and detail["loc"] == loc and detail["msg"]


async def test_elevenlabs_scripted_failures_use_its_codes() -> None:
    async with FakeElevenLabs() as fake:
        url = f"{fake.base_url}/v1/text-to-speech/rachel-warm"
        fake.fail_next(429)
        status, raw, _ = await _post(url, {"xi-api-key": "xi-test-key"}, {"text": "hi"})
        await fake.wait_requests(1)
    assert status == 429 and b"too_many_concurrent_requests" in raw
