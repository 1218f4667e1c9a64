"""Answers spoken: the speech services a soul's `voice:` block names
(bot/soul/voice.py), asked over HTTP (aiohttp), their audio made a voice note
(bot/voice/encode.py).

- ElevenLabs: `POST <base_url>/v1/text-to-speech/<voiceId>?output_format=pcm_24000`
  with `xi-api-key`, `{text, model_id, voice_settings}`: raw 16-bit mono PCM at
  24 kHz, nothing to guess.
- OpenAI-compatible: `POST <base_url>/audio/speech` with `Authorization: Bearer`,
  `{model, input, voice, response_format: "wav", speed}`. WAV, not `pcm`: a WAV
  file says its own rate, and every server that copies the API makes it
  (OpenAI's `pcm` is 24 kHz; a local server's may not be).

What is said is `aloud(text)` (bot/voice/aloud.py: no code block, no link's
address), in parts of at most `voice.speech.max_chars` characters (one request
each, one after another, joined into one voice note). Each part spoken is a
ledger row (`record_voice(..., "spoken", ...)`: its characters, priced by the
provider's `usd_per_million_chars`). Any failure (unreachable, a refusal, audio
that cannot be read, nothing to say) raises SpeechError with one line that
names the provider and its answer, never a key. Audio lives in memory only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol

import aiohttp
import structlog

from bot.config.schema import ElevenLabsConfig, OpenAISpeechConfig, SpeechConfig
from bot.errors import SpeechError
from bot.model.usage import CallContext
from bot.soul.voice import SoulVoice, VoiceSettings
from bot.types import VoiceNote
from bot.voice.aloud import aloud, parts
from bot.voice.encode import decode, voice_note

log = structlog.get_logger(__name__)

ELEVENLABS_RATE = 24_000  # `pcm_24000`: on every ElevenLabs plan
ERROR_CHARS = 200  # of a service's error message, in our one line


class VoiceLedger(Protocol):
    """Where speech is counted (bot/model/usage.py's Ledger)."""

    async def record_voice(
        self, ctx: CallContext, kind: Literal["heard", "spoken"], model: str, amount: float,
        cost_usd: float,
    ) -> None: ...  # fmt: skip


# One speech request: (session, text, settings) -> 16-bit mono PCM at 48 kHz.
Speak = Callable[[aiohttp.ClientSession, str, VoiceSettings], Awaitable[bytes]]


class Speech:
    """The speech services of `voice.speech`, one HTTP session for them."""

    def __init__(self, config: SpeechConfig, ledger: VoiceLedger | None = None) -> None:
        self._config = config
        self._ledger = ledger
        self._http: aiohttp.ClientSession | None = None

    def available(self, voice: SoulVoice) -> bool:
        """Whether the provider `voice` names is set up (`voice.speech`)."""
        if voice.provider == "elevenlabs":
            return bool(self._config.elevenlabs.api_key.get_secret_value())
        return bool(self._config.openai.base_url)

    async def speak(
        self, text: str, voice: SoulVoice, mood: str | None, ctx: CallContext
    ) -> VoiceNote:
        """`text` said in `voice` (its settings for `mood`), as a voice note.
        Raises SpeechError."""
        script = aloud(text)
        if not script:
            raise SpeechError("nothing in the answer to say aloud")
        settings = voice.settings(mood)
        if voice.provider == "elevenlabs":
            config: ElevenLabsConfig | OpenAISpeechConfig = self._config.elevenlabs
            speak: Speak = self._elevenlabs
        else:
            config, speak = self._config.openai, self._openai
        http = self._session()
        pcm = bytearray()
        for part in parts(script, self._config.max_chars):
            pcm += await speak(http, part, settings)
            await self._count(ctx, config.model, len(part), config.usd_per_million_chars)
        return await asyncio.to_thread(voice_note, bytes(pcm))

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            timeout = aiohttp.ClientTimeout(total=self._config.timeout_s)
            self._http = aiohttp.ClientSession(timeout=timeout)
        return self._http

    async def _count(self, ctx: CallContext, model: str, chars: int, per_million: float) -> None:
        if self._ledger is None:
            return
        try:
            await self._ledger.record_voice(ctx, "spoken", model, chars, chars * per_million / 1e6)
        except Exception as exc:  # the voice note is made; a lost row is not worth losing it
            log.warning("voice.ledger_failed", error_class=type(exc).__name__, error=str(exc))

    async def _elevenlabs(
        self, http: aiohttp.ClientSession, text: str, settings: VoiceSettings
    ) -> bytes:
        config = self._config.elevenlabs
        url = f"{config.base_url.rstrip('/')}/v1/text-to-speech/{settings.voice_id}"
        body: dict[str, Any] = {"text": text, "model_id": config.model}
        if chosen := settings.elevenlabs_settings():
            body["voice_settings"] = chosen
        headers = {"xi-api-key": config.api_key.get_secret_value()}
        params = {"output_format": f"pcm_{ELEVENLABS_RATE}"}
        audio = await _post(http, "elevenlabs", url, headers, body, params)
        return await asyncio.to_thread(decode, audio, ELEVENLABS_RATE)

    async def _openai(
        self, http: aiohttp.ClientSession, text: str, settings: VoiceSettings
    ) -> bytes:
        config = self._config.openai
        url = f"{config.base_url.rstrip('/')}/audio/speech"
        body: dict[str, Any] = {"model": config.model, "input": text, "voice": settings.voice,
                                "response_format": "wav"}  # fmt: skip
        if settings.speed is not None:
            body["speed"] = settings.speed
        key = config.api_key.get_secret_value()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        audio = await _post(http, "openai", url, headers, body, {})
        return await asyncio.to_thread(decode, audio)


async def _post(
    http: aiohttp.ClientSession,
    provider: str,
    url: str,
    headers: dict[str, str],
    body: dict[str, Any],
    params: dict[str, str],
) -> bytes:
    """The audio a speech request answers. Raises SpeechError."""
    try:
        async with http.post(url, json=body, headers=headers, params=params) as response:
            data = await response.read()
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise SpeechError(f"{provider} speech unreachable: {type(exc).__name__}: {exc}") from exc
    if status != 200:
        raise SpeechError(f"{provider} speech refused: HTTP {status}: {_error_message(data)}")
    if not data:
        raise SpeechError(f"{provider} speech answered no audio")
    return data


def _error_message(data: bytes) -> str:
    """The message of a speech service's error answer: OpenAI's `error.message`,
    ElevenLabs' `detail.message` (its 422: the first `detail[].msg` and where),
    else the start of the body."""
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    message: Any = None
    if isinstance(body, dict):
        error, detail = body.get("error"), body.get("detail")
        if isinstance(error, dict):
            message = error.get("message")
        elif isinstance(detail, dict):
            message = f"{detail.get('status')}: {detail.get('message')}"
        elif isinstance(detail, list) and detail and isinstance(detail[0], dict):
            where = ".".join(str(part) for part in detail[0].get("loc") or [])
            message = f"{where}: {detail[0].get('msg')}"
    if not isinstance(message, str):
        message = data.decode("utf-8", "replace")
    return " ".join(message.split())[:ERROR_CHARS] or "(no message)"
