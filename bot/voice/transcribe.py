"""Voice notes turned into text by an OpenAI-compatible `/v1/audio/transcriptions`
endpoint (OpenAI, Groq, a local whisper server): `Transcriber`.

One multipart POST a note (`file`, `model`, `response_format=json`), with
`Authorization: Bearer <key>` when a key is set; the answer's `text` is the
transcript. Every failure is a `TranscriptionFailed`: the service unreachable,
slower than `timeout_s`, an error status (its `{"error": {"message"}}` goes to
the log, not to the person) or an answer with no transcript. The audio goes
from memory to the request and nowhere else.
"""

from __future__ import annotations

import json
from types import TracebackType
from typing import Any

import aiohttp
import structlog

from bot.config.schema import TranscriptionConfig
from bot.errors import TranscriptionFailed

log = structlog.get_logger(__name__)

_MIME = {"ogg": "audio/ogg", "mp3": "audio/mpeg", "wav": "audio/wav", "flac": "audio/flac",
         "m4a": "audio/mp4", "webm": "audio/webm"}  # fmt: skip


class Transcriber:
    """The client of one transcription endpoint (`voice.transcription`); an
    async context manager that holds its connection pool."""

    def __init__(self, config: TranscriptionConfig) -> None:
        if config.base_url is None:
            raise ValueError("voice.transcription.base_url is not set")
        self._url = config.base_url.rstrip("/") + "/audio/transcriptions"
        self._model = config.model
        self._key = config.api_key.get_secret_value()
        self._timeout = aiohttp.ClientTimeout(total=config.timeout_s)
        self._session: aiohttp.ClientSession | None = None

    @property
    def model(self) -> str:
        return self._model

    async def __aenter__(self) -> Transcriber:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def transcribe(self, data: bytes, extension: str) -> str:
        """The transcript of the audio `data`, a file of container `extension`
        (`ogg`: the endpoint reads the format from the file name), stripped
        ("" when nothing was said). Raises TranscriptionFailed."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        form = aiohttp.FormData()
        form.add_field("file", data, filename=f"voice.{extension}",
                       content_type=_MIME.get(extension, "application/octet-stream"))  # fmt: skip
        form.add_field("model", self._model)
        form.add_field("response_format", "json")
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        try:
            async with self._session.post(self._url, data=form, headers=headers) as response:
                status = response.status
                body = await response.text()
        except TimeoutError as exc:
            raise TranscriptionFailed("the transcription service took too long") from exc
        except aiohttp.ClientError as exc:
            raise TranscriptionFailed("the transcription service could not be reached",
                                      type(exc).__name__) from exc  # fmt: skip
        if status != 200:
            raise TranscriptionFailed(f"the transcription service answered {status}",
                                      _error_message(body), status)  # fmt: skip
        return _transcript(body)


def _error_message(body: str) -> str:
    """The message of an OpenAI error answer (`{"error": {"message": ...}}`),
    else the body's start."""
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        return body[:200]
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:500]
    return body[:200]


def _transcript(body: str) -> str:
    """The `text` of a JSON answer. Raises TranscriptionFailed for another."""
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("text"), str):
        raise TranscriptionFailed("the transcription service sent no transcript", body[:200])
    return str(parsed["text"]).strip()
