"""Voice notes heard: checked, downloaded, transcribed and priced, then the
person's words (`Hearing`).

A message's `Audio` (a Telegram voice note or audio file, a Discord voice
message or audio attachment) is refused, unseen, when the length or the size
the platform announces passes `voice.transcription.max_seconds` or
`max_bytes`, and when the person's budgets (the turn's, bot/model/usage.py)
are spent today. Only then is it downloaded, within `timeout_s`, never
further than `max_bytes` (the adapter's `fetch(limit)` stops there); its
container and its real length are read from its bytes (bot/voice/sound.py),
and it is refused past `max_seconds` still. The transcription endpoint
(bot/voice/transcribe.py) turns it into text, and the ledger records its
seconds at `usd_per_minute` (`voice_usage`).

The transcript becomes the person's words, marked as spoken for the model,
"[voice note, 12 s] ..." (`prompts.VOICE_HEARD`); the history and the memory
traces keep that text, never the audio, which lives in memory for this call
only and is written nowhere. A note not heard is said in one line, and its
message keeps the placeholder "[voice note, 12 s: not transcribed]" (nothing
of it is stored but that line). Budgets count tokens, so a note counts
against them as its transcript's tokens, in the turn that reads it; the
check before the download spends nothing on a person whose budget is used up.
The rate limit counts a voice note as one message a started minute.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import structlog

from bot import prompts
from bot.chat.media import megabytes
from bot.config.schema import TranscriptionConfig
from bot.errors import BudgetExceeded, TranscriptionFailed
from bot.model.usage import CallContext, Ledger
from bot.types import Audio, Inbound, Route
from bot.voice.sound import read_sound
from bot.voice.transcribe import Transcriber

log = structlog.get_logger(__name__)

# Tokens a second of speech adds to a turn, about (150 words a minute), for the budget
# check before a download.
TOKENS_PER_SECOND = 4


def kind_of(audio: Audio) -> str:
    """How a note is named to the person and the model: `voice note`, or
    `audio file "name.mp3"`."""
    if audio.kind == "voice":
        return "voice note"
    return f'audio file "{audio.name}"' if audio.name else "audio file"


def _shown(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds:.0f}"


def placeholder(audio: Sequence[Audio]) -> str:
    """The line a note not listened to stands as (a group's context): "[voice note, 12 s]"."""
    return " ".join(
        prompts.VOICE_PLACEHOLDER.format(kind=kind_of(a), seconds=_shown(a.seconds)) for a in audio
    )


def weight(inbound: Inbound) -> int:
    """Messages a heard voice note counts as against the rate limit: one a started minute."""
    minutes = sum(math.ceil((a.seconds or 0) / 60) for a in inbound.audio)
    return max(1, minutes)


@dataclass(frozen=True)
class Heard:
    """A message's notes heard: `words`, the transcripts marked for the model
    ("" when none was heard); `row`, the placeholders of the notes not heard;
    `refused`, why each was not (for the one line); `audio`, the notes with
    the length read from their bytes where it was."""

    words: str
    row: str
    refused: tuple[str, ...]
    audio: tuple[Audio, ...]

    def line(self) -> str | None:
        """The one line to the person, or None when every note was heard."""
        if not self.refused:
            return None
        reasons = "; ".join(self.refused)
        return prompts.VOICE_REFUSED.format(reasons=reasons)


class _NotHeard(Exception):
    """One note refused; the message is the reason for the person."""


class Hearing:
    """Hears voice notes for the router (`voice.transcription`); `transcriber`
    None: transcription is not configured."""

    def __init__(
        self,
        config: TranscriptionConfig,
        transcriber: Transcriber | None,
        ledger: Ledger | None = None,
    ) -> None:
        self._config = config
        self._transcriber = transcriber
        self._ledger = ledger

    @property
    def configured(self) -> bool:
        return self._transcriber is not None

    @property
    def in_groups(self) -> bool:
        """Whether an unaddressed group voice note is transcribed (else a placeholder)."""
        return self.configured and self._config.in_groups == "transcribe"

    async def hear(self, inbound: Inbound, route: Route) -> Heard:
        """Each note of `inbound`, heard (see the module docstring) and
        charged to `route`. Never raises but a cancel."""
        words, rows, refused, audio = [], [], [], []
        for note in inbound.audio:
            try:
                transcript, note = await self._hear_one(note, route)
            except _NotHeard as exc:
                refused.append(str(exc))
                seconds = _shown(note.seconds)
                rows.append(prompts.VOICE_NOT_HEARD.format(kind=kind_of(note), seconds=seconds))
                log.info("voice.refused", reason=str(exc), session=route.session)
            else:
                seconds = _shown(note.seconds)
                words.append(prompts.VOICE_HEARD.format(kind=kind_of(note), seconds=seconds,
                                                        transcript=transcript))  # fmt: skip
            audio.append(note)
        return Heard(" ".join(words), " ".join(rows), tuple(refused), tuple(audio))

    async def _hear_one(self, note: Audio, route: Route) -> tuple[str, Audio]:
        """The transcript of one note and the note with its real length.
        Raises _NotHeard."""
        config, transcriber, kind = self._config, self._transcriber, kind_of(note)
        if transcriber is None:
            reason = "no transcription is set up"
            raise _NotHeard(prompts.VOICE_FAILED.format(kind=kind, reason=reason))
        self._check_length(kind, note.seconds)
        self._check_size(kind, note.size)
        ctx = CallContext(route.soul, route.scope, route.session, route.user, "turn")
        if self._ledger is not None:
            expected = note.seconds if note.seconds is not None else config.max_seconds
            try:
                await self._ledger.check(ctx, math.ceil(expected * TOKENS_PER_SECOND))
            except BudgetExceeded as exc:
                raise _NotHeard(prompts.VOICE_BUDGET.format(kind=kind)) from exc
        try:
            async with asyncio.timeout(config.timeout_s):
                data = await note.fetch(config.max_bytes)
        except TimeoutError as exc:
            reason = f"its download took over {config.timeout_s:g} s"
            raise _NotHeard(prompts.VOICE_FAILED.format(kind=kind, reason=reason)) from exc
        except Exception as exc:  # the platform's failure
            log.warning("voice.download_failed", error=f"{type(exc).__name__}: {exc}")
            reason = f"its download failed ({type(exc).__name__})"
            raise _NotHeard(prompts.VOICE_FAILED.format(kind=kind, reason=reason)) from exc
        self._check_size(kind, len(data))
        try:
            sound = await asyncio.to_thread(read_sound, data)
        except ValueError as exc:
            raise _NotHeard(prompts.VOICE_UNREADABLE.format(kind=kind, reason=exc)) from exc
        self._check_length(kind, sound.seconds)
        try:
            transcript = await transcriber.transcribe(data, sound.extension)
        except TranscriptionFailed as exc:
            log.warning("voice.transcription_failed", error=str(exc), status=exc.status)
            raise _NotHeard(prompts.VOICE_FAILED.format(kind=kind, reason=exc.reason)) from exc
        if self._ledger is not None:
            cost = sound.seconds / 60 * config.usd_per_minute
            await self._ledger.record_voice(ctx, "heard", transcriber.model, sound.seconds, cost)
        if not transcript:
            raise _NotHeard(prompts.VOICE_SILENT.format(kind=kind))
        return transcript, replace(note, seconds=sound.seconds)

    def _check_length(self, kind: str, seconds: float | None) -> None:
        limit = self._config.max_seconds
        if seconds is not None and seconds > limit:
            raise _NotHeard(prompts.VOICE_TOO_LONG.format(kind=kind, seconds=_shown(seconds),
                                                          limit=limit))  # fmt: skip

    def _check_size(self, kind: str, size: int | None) -> None:
        limit = self._config.max_bytes
        if size is not None and size > limit:
            shown = f"over {megabytes(limit)}" if size == limit + 1 else megabytes(size)
            raise _NotHeard(prompts.VOICE_TOO_LARGE.format(kind=kind, size=shown,
                                                           limit=megabytes(limit)))  # fmt: skip
