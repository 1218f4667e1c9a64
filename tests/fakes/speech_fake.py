"""Fakes of two speech services on 127.0.0.1, with their request and error
shapes; each answers with real audio (tests/fakes/speech_audio.py: a tone that
lasts 0.02 s a character of the text) and records every request.

`FakeOpenAISpeech`: OpenAI's `POST /v1/audio/speech` (and any server that copies
it: a local Kokoro or Piper behind an OpenAI-compatible API). Point a client at
``fake.base_url`` (``http://127.0.0.1:<port>/v1``). ``Authorization: Bearer
<api_key>`` (with ``api_key=None`` any key or none is taken, as a local server
does); the JSON body's ``model`` and ``input`` (1-4096 characters) are required,
``voice`` must be one of ``voices`` (OpenAI's by default; ``None``: any),
``response_format`` one of mp3 (the default), opus, aac, flac, wav, pcm (raw
16-bit mono at 24 kHz), ``speed`` 0.25-4.0. Errors are OpenAI's: ``{"error":
{"message", "type", "param", "code"}}``: 401 ``invalid_api_key``, 400
``invalid_request_error`` naming the ``param``, 404 ``model_not_found`` for a
model not in ``models``.

`FakeElevenLabs`: ElevenLabs' ``POST /v1/text-to-speech/{voice_id}``, base URL
``fake.base_url`` (``http://127.0.0.1:<port>``). ``xi-api-key`` header (missing:
401 ``needs_authorization``; wrong: 401 ``invalid_api_key``); ``voice_id`` one of
``voices`` (else 404 ``voice_not_found``); query ``output_format``
(``mp3_44100_128`` by default; ``pcm_<rate>`` is raw 16-bit mono PCM at that
rate, ``mp3_<rate>_<kbps>`` MP3, ``opus_48000_<kbps>`` OGG/Opus; another is 422);
the JSON body's ``text`` (required, at most ``max_chars``: 400
``max_character_limit_exceeded``), ``model_id`` (one of ``models``, else 400
``model_not_found``) and ``voice_settings`` ``{stability, similarity_boost, style}``
each in [0, 1], ``use_speaker_boost`` a boolean, ``speed`` 0.7-1.2. Errors are
``{"detail": {"status", "message"}}``; a body that does not fit the schema is
FastAPI's 422 ``{"detail": [{"type", "loc", "msg", "input"}]}``, as ElevenLabs
answers it.

Both: ``fail_next(status, body=None)`` answers the next request with that
status (a default body in the service's own shape), ``requests`` holds each
request (`SpeechRequest`), ``wait_requests(n)`` waits for them.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.server import LoopbackServer
from tests.fakes.speech_audio import seconds_for, tone, tone_pcm

JSON = dict[str, Any]
OPENAI_VOICES = frozenset(
    {"alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer"}
    | {"verse"}
)
OPENAI_FORMATS = {
    "mp3": "audio/mpeg",
    "opus": "audio/opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
OPENAI_MAX_INPUT = 4096
ELEVENLABS_MAX_CHARS = 10_000  # eleven_multilingual_v2's limit a request


@dataclass(frozen=True)
class SpeechRequest:
    """One request as it came: its path, query, headers and JSON body (None
    when it was no JSON), and the status answered."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    json: Any
    status: int = 200
    text: str = field(default="", repr=False)
    """What was to be spoken (`input` or `text`)."""


class _SpeechFake(LoopbackServer):
    """What both fakes share: the server, the record, scripted failures."""

    def __init__(self) -> None:
        self.requests: list[SpeechRequest] = []
        self._failures: list[tuple[int, JSON | None]] = []
        self._changed = asyncio.Event()

    def _routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        self._routes(app)
        await self._listen(app, port)

    @property
    def port(self) -> int:
        return self._port

    def fail_next(self, status: int, body: JSON | None = None) -> None:
        """Answer the next request with `status` and `body` (None: the service's
        usual body for that status)."""
        self._failures.append((status, body))

    async def wait_requests(self, count: int, timeout: float = 10.0) -> list[SpeechRequest]:  # noqa: ASYNC109
        """The first `count` requests, once they came. Raises TimeoutError."""
        async with asyncio.timeout(timeout):
            while len(self.requests) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.requests[:count]

    def spoken(self) -> list[str]:
        """The texts of the requests answered with audio, in order."""
        return [r.text for r in self.requests if r.status == 200]

    async def _read(self, request: web.Request) -> tuple[Any, str]:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        text = ""
        if isinstance(body, dict):
            said = body.get("input", body.get("text"))
            text = said if isinstance(said, str) else ""
        return body, text

    def _record(self, request: web.Request, body: Any, text: str, status: int) -> None:
        query, headers = dict(request.query), dict(request.headers)
        self.requests.append(SpeechRequest(request.path, query, headers, body, status, text))
        self._changed.set()

    def _scripted(self) -> tuple[int, JSON | None] | None:
        return self._failures.pop(0) if self._failures else None


class FakeOpenAISpeech(_SpeechFake):
    """OpenAI's /v1/audio/speech; see the module docstring."""

    def __init__(
        self,
        api_key: str | None = "sk-test-speech",
        models: frozenset[str] = frozenset({"tts-1", "tts-1-hd", "gpt-4o-mini-tts"}),
        voices: frozenset[str] | None = OPENAI_VOICES,
    ) -> None:
        super().__init__()
        self.api_key = api_key
        self.models = models
        self.voices = voices

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/audio/speech", self._speech)

    @staticmethod
    def error(status: int, message: str, kind: str, code: str | None = None,
              param: str | None = None) -> web.Response:  # fmt: skip
        """OpenAI's error answer."""
        body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
        return web.json_response(body, status=status)

    def _bad(self, message: str, code: str, param: str) -> web.Response:
        """OpenAI's 400 for a request it cannot take."""
        return self.error(400, message, "invalid_request_error", code, param)

    async def _speech(self, request: web.Request) -> web.Response:
        body, text = await self._read(request)
        response = self._answer(request, body)
        self._record(request, body, text, response.status)
        return response

    def _answer(self, request: web.Request, body: Any) -> web.Response:
        scripted = self._scripted()
        if scripted is not None:
            status, given = scripted
            if given is not None:
                return web.json_response(given, status=status)
            kind = "server_error" if status >= 500 else "invalid_request_error"
            return self.error(status, f"The fake was told to fail with {status}.", kind)
        auth = request.headers.get("Authorization", "")
        if self.api_key is not None and auth != f"Bearer {self.api_key}":
            given = auth.removeprefix("Bearer ").strip()
            message = (
                "You didn't provide an API key." if not given
                else f"Incorrect API key provided: {given[:3]}***{given[-4:]}."
            )  # fmt: skip
            return self.error(401, message, "invalid_request_error", "invalid_api_key")
        if not isinstance(body, dict):
            return self.error(400, "We could not parse the JSON body of your request.",
                              "invalid_request_error")  # fmt: skip
        for name in ("model", "input", "voice"):
            if not isinstance(body.get(name), str) or not body[name]:
                message = f"Missing required parameter: '{name}'."
                return self._bad(message, "missing_required_parameter", name)
        if len(body["input"]) > OPENAI_MAX_INPUT:
            message = f"'input' is too long: at most {OPENAI_MAX_INPUT} characters."
            return self._bad(message, "string_above_max_length", "input")
        if body["model"] not in self.models:
            message = f"The model `{body['model']}` does not exist or you do not have access to it."
            return self.error(404, message, "invalid_request_error", "model_not_found")
        if self.voices is not None and body["voice"] not in self.voices:
            supported = ", ".join(sorted(self.voices))
            message = f"Invalid value: '{body['voice']}'. Supported values are: {supported}."
            return self._bad(message, "invalid_value", "voice")
        response_format = body.get("response_format", "mp3")
        if response_format not in OPENAI_FORMATS:
            return self._bad(
                f"Invalid value: '{response_format}'.", "invalid_value", "response_format"
            )
        speed = body.get("speed", 1.0)
        if isinstance(speed, bool) or not isinstance(speed, int | float) or not 0.25 <= speed <= 4:
            return self._bad("'speed' must be between 0.25 and 4.0.", "invalid_value", "speed")
        audio = tone(seconds_for(body["input"]), response_format)
        return web.Response(body=audio, content_type=OPENAI_FORMATS[response_format])


_OUTPUT = re.compile(r"(pcm)_(\d+)|(mp3)_(\d+)_(\d+)|(opus)_48000_(\d+)")
_SETTINGS = {"stability", "similarity_boost", "style", "use_speaker_boost", "speed"}


class FakeElevenLabs(_SpeechFake):
    """ElevenLabs' text-to-speech; see the module docstring."""

    def __init__(
        self,
        api_key: str = "xi-test-key",
        voices: frozenset[str] = frozenset({"rachel-warm", "21m00Tcm4TlvDq8ikWAM"}),
        models: frozenset[str] = frozenset(
            {"eleven_multilingual_v2", "eleven_flash_v2_5", "eleven_turbo_v2_5", "eleven_v3"}
        ),
        max_chars: int = ELEVENLABS_MAX_CHARS,
    ) -> None:
        super().__init__()
        self.api_key = api_key
        self.voices = voices
        self.models = models
        self.max_chars = max_chars

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/text-to-speech/{voice_id}", self._speech)

    @staticmethod
    def error(status: int, code: str, message: str) -> web.Response:
        """ElevenLabs' error answer."""
        return web.json_response({"detail": {"status": code, "message": message}}, status=status)

    @staticmethod
    def invalid(loc: list[str | int], message: str, given: Any) -> web.Response:
        """FastAPI's 422 for a body that does not fit the schema."""
        detail = [{"type": "value_error", "loc": loc, "msg": message, "input": given}]
        return web.json_response({"detail": detail}, status=422)

    async def _speech(self, request: web.Request) -> web.Response:
        body, text = await self._read(request)
        response = self._answer(request, body)
        self._record(request, body, text, response.status)
        return response

    def _answer(self, request: web.Request, body: Any) -> web.Response:
        scripted = self._scripted()
        if scripted is not None:
            status, given = scripted
            if given is not None:
                return web.json_response(given, status=status)
            codes = {
                401: "invalid_api_key",
                404: "voice_not_found",
                429: "too_many_concurrent_requests",
            }
            return self.error(status, codes.get(status, "internal_error"),
                              f"The fake was told to fail with {status}.")  # fmt: skip
        key = request.headers.get("xi-api-key")
        if not key:
            return self.error(401, "needs_authorization", "Neither authorization header nor "
                              "xi-api-key received, please provide one.")  # fmt: skip
        if key != self.api_key:
            return self.error(401, "invalid_api_key", "Invalid API key")
        voice_id = request.match_info["voice_id"]
        if voice_id not in self.voices:
            return self.error(404, "voice_not_found",
                              f"A voice with the voice_id {voice_id} was not found.")  # fmt: skip
        output = request.query.get("output_format", "mp3_44100_128")
        found = _OUTPUT.fullmatch(output)
        if found is None:
            return self.invalid(["query", "output_format"], "Invalid output format", output)
        if not isinstance(body, dict):
            return self.invalid(["body"], "Field required", None)
        text = body.get("text")
        if not isinstance(text, str) or not text.strip():
            return self.invalid(["body", "text"], "Field required", text)
        if len(text) > self.max_chars:
            message = f"Text is too long: at most {self.max_chars} characters."
            return self.error(400, "max_character_limit_exceeded", message)
        model = body.get("model_id", "eleven_multilingual_v2")
        if model not in self.models:
            return self.error(400, "model_not_found", f"A model with model ID {model} not found.")
        problem = self._check_settings(body.get("voice_settings"))
        if problem is not None:
            return problem
        return self._audio(text, found)

    def _check_settings(self, settings: Any) -> web.Response | None:
        if settings is None:
            return None
        if not isinstance(settings, dict):
            return self.invalid(["body", "voice_settings"], "Input should be an object", settings)
        for name, value in settings.items():
            loc: list[str | int] = ["body", "voice_settings", name]
            if name not in _SETTINGS:
                return self.invalid(loc, "Extra inputs are not permitted", value)
            if name == "use_speaker_boost":
                if not isinstance(value, bool):
                    return self.invalid(loc, "Input should be a valid boolean", value)
                continue
            low, high = (0.7, 1.2) if name == "speed" else (0.0, 1.0)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not low <= value <= high
            ):
                return self.invalid(loc, f"Input should be between {low} and {high}", value)
        return None

    @staticmethod
    def _audio(text: str, found: re.Match[str]) -> web.Response:
        seconds = seconds_for(text)
        if found[1]:
            audio = tone_pcm(seconds, int(found[2]))
            return web.Response(body=audio, content_type="application/octet-stream")
        if found[3]:
            return web.Response(body=tone(seconds, "mp3"), content_type="audio/mpeg")
        return web.Response(body=tone(seconds, "opus"), content_type="audio/ogg")
