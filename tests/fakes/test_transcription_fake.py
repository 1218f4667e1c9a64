"""The transcription fake: OpenAI's request and error shapes, and real decoding."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakes.audio import tone_of, tone_ogg_opus
from tests.fakes.transcription_fake import FakeTranscription

KEY = "test-transcription-key"


@pytest.fixture
async def fake() -> AsyncIterator[FakeTranscription]:
    async with FakeTranscription() as server:
        yield server


async def post(
    fake: FakeTranscription,
    data: bytes | None,
    *,
    key: str | None = KEY,
    model: str | None = "whisper-1",
    response_format: str | None = None,
) -> tuple[int, Any]:
    form = aiohttp.FormData(default_to_multipart=True)
    if data is not None:
        form.add_field("file", data, filename="voice.ogg", content_type="audio/ogg")
    if model is not None:
        form.add_field("model", model)
    if response_format is not None:
        form.add_field("response_format", response_format)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{fake.url}/audio/transcriptions", data=form, headers=headers) as answer,
    ):
        if answer.content_type == "application/json":
            return answer.status, await answer.json()
        return answer.status, await answer.text()


def test_a_tone_is_real_ogg_opus_of_its_length_and_pitch() -> None:
    data = tone_ogg_opus(1.5, 523.0)
    assert data[:4] == b"OggS" and b"OpusHead" in data[:200]
    seconds, hz = tone_of(data)
    assert seconds == pytest.approx(1.5, abs=0.03) and hz == pytest.approx(523.0, rel=0.02)


async def test_the_transcript_set_for_a_tone_in_each_format(fake: FakeTranscription) -> None:
    fake.say(440.0, "Meet me at the harbour.")
    note = tone_ogg_opus(2.0, 440.0)
    assert await post(fake, note) == (200, {"text": "Meet me at the harbour."})
    status, verbose = await post(fake, note, response_format="verbose_json")
    assert status == 200 and verbose["text"] == "Meet me at the harbour."
    assert verbose["duration"] == pytest.approx(2.0, abs=0.03) and verbose["segments"]
    assert await post(fake, note, response_format="text") == (200, "Meet me at the harbour.\n")
    assert await post(fake, tone_ogg_opus(0.5, 880.0)) == (200, {"text": "a tone of 880 Hz"})
    first = fake.requests[0]
    assert (first.model, first.response_format, first.filename) == (
        "whisper-1",
        "json",
        "voice.ogg",
    )
    assert first.content_type == "audio/ogg" and first.authorization == f"Bearer {KEY}"
    assert first.seconds == pytest.approx(2.0, abs=0.03) and len(fake.requests) == 4


@pytest.mark.parametrize(
    ("kwargs", "status", "kind", "code", "says"),
    [
        ({"key": None}, 401, "invalid_request_error", "invalid_api_key", "Incorrect API key"),
        ({"key": "wrong"}, 401, "invalid_request_error", "invalid_api_key", "Incorrect API key"),
        ({"data": None}, 400, "invalid_request_error", None, "provide a file"),
        ({"model": None}, 400, "invalid_request_error", None, "provide a model"),
        ({"response_format": "srt2"}, 400, "invalid_request_error", None, "response_format"),
        ({"data": b"not audio at all"}, 400, "invalid_request_error", None, "Invalid file format"),
    ],
)
async def test_a_bad_request_gets_openais_error_shape(
    fake: FakeTranscription, kwargs: dict[str, Any], status: int, kind: str, code: str | None,
    says: str,
) -> None:  # fmt: skip
    args = {"data": tone_ogg_opus(0.3), **kwargs}
    got_status, body = await post(fake, **args)
    assert got_status == status
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == kind and body["error"]["code"] == code
    assert says in body["error"]["message"]
    assert fake.requests == []


async def test_a_body_over_the_cap_is_413(fake: FakeTranscription) -> None:
    fake.max_bytes = 1000
    status, body = await post(fake, tone_ogg_opus(1.0))
    assert status == 413 and "Maximum content size" in body["error"]["message"]


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [(429, "requests", "rate_limit_exceeded"), (500, "server_error", None)],
)
async def test_a_queued_failure_is_the_next_answer(
    fake: FakeTranscription, status: int, kind: str, code: str | None
) -> None:
    fake.fail_next(status)
    got, body = await post(fake, tone_ogg_opus(0.3))
    assert got == status and body["error"]["type"] == kind and body["error"]["code"] == code
    assert (await post(fake, tone_ogg_opus(0.3)))[0] == 200
    assert len(fake.requests) == 2  # both were heard


async def test_no_key_is_needed_when_the_fake_has_none() -> None:
    async with FakeTranscription(key=None) as fake:
        assert (await post(fake, tone_ogg_opus(0.3), key=None))[0] == 200
