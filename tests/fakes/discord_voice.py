"""Voice messages in the Discord fake (tests/fakes/discord_fake.py): ``POST
/channels/{id}/messages`` with ``flags`` IS_VOICE_MESSAGE (1 << 13).

Checked as Discord documents them: no content (400/50159 ``Voice messages do not
support additional content``), exactly one file (400/50160 ``Voice messages must
have a single audio attachment``), and its entry in ``payload_json``'s
``attachments`` with a number ``duration_secs`` and a base64 ``waveform`` of at
most 256 bytes (400/50161 ``Voice messages must have supporting metadata``). The
fake decodes the upload whole (tests/fakes/speech_audio.py) and refuses what is
not OGG/Opus with 50160 as well. A channel in ``voice_refused`` answers 403/50173
``You cannot send voice messages in this channel`` (a server that denies the Send
Voice Messages permission). The message made carries the flag, and its
attachment ``duration_secs`` and ``waveform``; each one is in ``voice_messages``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.discord_records import JSON, Upload
from tests.fakes.discord_rest import Rest, api_error
from tests.fakes.speech_audio import is_ogg_opus

VOICE_FLAG = 1 << 13


@dataclass(frozen=True)
class VoiceMessage:
    """A voice message the bot sent: where, which message, what it said of the
    audio, and the upload."""

    channel_id: int
    message_id: int
    duration_secs: float
    waveform: bytes = field(repr=False)
    file: Upload = field(repr=False)


def _is_voice(body: Any) -> bool:
    return isinstance(body, dict) and bool(int(body.get("flags") or 0) & VOICE_FLAG)


def _metadata(body: JSON) -> tuple[float, bytes] | None:
    """The single attachment's duration and waveform, or None when they are not right."""
    entries = body.get("attachments") or []
    entry = entries[0] if len(entries) == 1 and isinstance(entries[0], dict) else {}
    duration, waveform = entry.get("duration_secs"), entry.get("waveform")
    if isinstance(duration, bool) or not isinstance(duration, int | float) or duration <= 0:
        return None
    try:
        points = (
            base64.b64decode(waveform or "", validate=True) if isinstance(waveform, str) else b""
        )
    except binascii.Error:
        return None
    return (float(duration), points) if 0 < len(points) <= 256 else None


class VoiceMessages(Rest):
    """The voice message checks around message creation; see the module docstring."""

    @functools.cached_property
    def voice_refused(self) -> set[int]:
        """Channels where the bot may not send voice messages."""
        return set()

    @functools.cached_property
    def voice_messages(self) -> list[VoiceMessage]:
        """The voice messages made, in order."""
        return []

    async def _create_message(
        self, request: web.Request, m: re.Match[str], body: Any, files: tuple[Upload, ...]
    ) -> web.Response:
        if _is_voice(body) and int(m.group(1)) in self.voice_refused:
            return api_error(403, "You cannot send voice messages in this channel", 50173)
        return await super()._create_message(request, m, body, files)

    def _check_content(self, body: Any, files: tuple[Upload, ...]) -> web.Response | None:
        problem = super()._check_content(body, files)
        if problem is not None or not _is_voice(body):
            return problem
        if body.get("content") or body.get("embeds") or body.get("sticker_ids"):
            return api_error(400, "Voice messages do not support additional content", 50159)
        if len(files) != 1 or not is_ogg_opus(files[0].data):
            return api_error(400, "Voice messages must have a single audio attachment", 50160)
        if _metadata(body) is None:
            return api_error(400, "Voice messages must have supporting metadata", 50161)
        return None

    def _bot_message(self, channel_id: int, body: JSON, files: tuple[Upload, ...]) -> JSON:
        msg = super()._bot_message(channel_id, body, files)
        found = _metadata(body) if _is_voice(body) else None
        if found is not None:
            duration, waveform = found
            attachment = msg["attachments"][0]
            attachment["duration_secs"] = duration
            attachment["waveform"] = base64.b64encode(waveform).decode()
            attachment["content_type"] = "audio/ogg"
            self.voice_messages.append(
                VoiceMessage(channel_id, int(msg["id"]), duration, waveform, files[0])
            )
        return msg
