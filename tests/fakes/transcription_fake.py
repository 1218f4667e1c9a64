"""A fake of OpenAI's `POST /v1/audio/transcriptions` on 127.0.0.1 (the shape
Groq and local whisper servers serve too).

* The request: multipart/form-data with `file` (the audio, its file name and
  type), `model` and an optional `response_format` (`json`, the default,
  `verbose_json` or `text`); `Authorization: Bearer <key>` when the fake has a
  key (`FakeTranscription(key=...)`; None: none needed).
* It hears what it gets: the file is decoded whole by PyAV (`tone_of`), its
  length and its tone's frequency measured. The transcript is the one the test
  set for that tone (`say(hz, text)`, within 3 %), else `"a tone of N Hz"` (N to the nearest 10).
* Answers: `json` `{"text"}`; `verbose_json` `{"task", "language", "duration",
  "text", "segments"}`; `text` the bare transcript.
* Errors, each `{"error": {"message", "type", "param", "code"}}` as OpenAI
  sends them: 401 a missing or wrong key (`invalid_api_key`); 413 a body over
  `max_bytes` (25 MB, OpenAI's cap); 400 a missing file or model, an unknown
  response_format, a file that is no audio it can decode; and what the test
  queued with `fail_next(status)` (429 `rate_limit_exceeded`, 500
  `server_error`, or any status), taken by the next request that gets that far.
* `requests`: every request that reached the decode (`Heard`), in order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import BodyPartReader, web

from tests.fakes.audio import tone_of
from tests.fakes.server import LoopbackServer

MAX_BYTES = 25 * 1024 * 1024
FORMATS = ("json", "verbose_json", "text")
_KINDS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}


@dataclass(frozen=True)
class Heard:
    """One request the fake decoded: its form fields, the file's name, type
    and size, and what the fake heard in it."""

    model: str
    response_format: str
    filename: str
    content_type: str
    size: int
    seconds: float
    hz: float
    authorization: str | None


def error(status: int, message: str, param: str | None = None) -> web.Response:
    """An OpenAI error answer."""
    kind, code = _KINDS.get(status, ("server_error", None))
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status)


class FakeTranscription(LoopbackServer):
    """The fake server; see the module docstring."""

    def __init__(self, key: str | None = "test-transcription-key") -> None:
        self.key = key
        self.max_bytes = MAX_BYTES
        self.requests: list[Heard] = []
        self.attempts = 0  # requests of any outcome
        self._said: dict[float, str] = {}
        self._failures: deque[tuple[int, str]] = deque()

    async def start(self, port: int = 0) -> None:
        app = web.Application(client_max_size=self.max_bytes * 2)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        await self._listen(app, port)

    @property
    def url(self) -> str:
        """The base URL, up to /v1 (`voice.transcription.base_url`)."""
        return f"http://127.0.0.1:{self._port}/v1"

    def say(self, hz: float, text: str) -> None:
        """The transcript of a tone of `hz`."""
        self._said[hz] = text

    def fail_next(self, status: int, message: str = "") -> None:
        """The next request that passes the checks gets this error instead."""
        self._failures.append((status, message or f"The server had an error ({status})."))

    def transcript(self, hz: float) -> str:
        for said, text in self._said.items():
            if abs(said - hz) <= said * 0.03:
                return text
        return f"a tone of {round(hz, -1):.0f} Hz"

    async def _transcribe(self, request: web.Request) -> web.StreamResponse:
        self.attempts += 1
        auth = request.headers.get("Authorization")
        if self.key is not None and auth != f"Bearer {self.key}":
            shown = (auth or "").removeprefix("Bearer ")[-4:]
            return error(401, f"Incorrect API key provided: ***{shown}.")
        if (request.content_length or 0) > self.max_bytes:
            return error(413, f"Maximum content size limit ({self.max_bytes}) exceeded.")
        if not request.content_type.startswith("multipart/"):
            return error(400, "Expected a multipart/form-data body.")
        fields: dict[str, Any] = {}
        upload: tuple[str, str, bytes] | None = None
        async for part in await request.multipart():
            if not isinstance(part, BodyPartReader):
                continue
            data = await part.read()
            if part.name == "file":
                upload = (part.filename or "", part.headers.get("Content-Type", ""), bytes(data))
            elif part.name:
                fields[part.name] = data.decode()
        if upload is None:
            return error(400, "you must provide a file", "file")
        if not fields.get("model"):
            return error(400, "you must provide a model parameter", "model")
        fmt = fields.get("response_format", "json")
        if fmt not in FORMATS:
            return error(400, f"response_format must be one of {', '.join(FORMATS)}",
                         "response_format")  # fmt: skip
        name, ctype, data = upload
        try:
            seconds, hz = await asyncio.to_thread(tone_of, data)
        except Exception:
            return error(400, "Invalid file format. Supported formats: ['flac', 'm4a', 'mp3', "
                         "'mp4', 'mpeg', 'mpga', 'oga', 'ogg', 'wav', 'webm']", "file")  # fmt: skip
        self.requests.append(Heard(fields["model"], fmt, name, ctype, len(data), seconds, hz, auth))
        if self._failures:
            status, message = self._failures.popleft()
            return error(status, message)
        text = self.transcript(hz)
        if fmt == "text":
            return web.Response(text=text + "\n", content_type="text/plain")
        if fmt == "verbose_json":
            segment = {"id": 0, "start": 0.0, "end": seconds, "text": text}
            verbose = {"task": "transcribe", "language": "english", "duration": seconds}
            return web.json_response({**verbose, "text": text, "segments": [segment]})
        return web.json_response({"text": text})
