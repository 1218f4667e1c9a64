"""A spoken reply on Discord: a voice message, or an audio file where the bot
may not send one.

discord.py 2.7 reads voice messages (`Attachment.is_voice_message`,
`MessageFlags.voice`) but cannot send one: `discord.File` has no
`duration_secs` or `waveform` and `Messageable.send` takes no flags (its pull
request for that is open upstream). So the message is made on its HTTP client's
own route, `client.http.send_message` with `handle_message_parameters` (a
multipart upload, discord.py's rate limits and its 5xx retries kept): the flag
IS_VOICE_MESSAGE (1 << 13), no content, one OGG/Opus file (`voice-message.ogg`,
sent as `audio/ogg`) whose attachment entry carries `duration_secs` and
`waveform` (base64, at most 256 points). A channel that refuses it (403: 50173
"You cannot send voice messages in this channel", or 50013 for a missing
permission) gets the same audio as a plain file attachment, `voice.ogg`, which
Discord shows with a player; `discord.voice_as_file` says so once a channel.
"""

from __future__ import annotations

import base64
import io
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import discord
import structlog
from discord.http import handle_message_parameters

from bot.types import VoiceNote

log = structlog.get_logger(__name__)

VOICE_FILENAME = "voice-message.ogg"
FILE_FILENAME = "voice.ogg"
_REFUSED = frozenset({50173, 50013})  # voice messages refused here; a missing permission
Retried = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]


class _VoiceFile(discord.File):
    """A `discord.File` whose attachment entry says it is a voice message."""

    def __init__(self, note: VoiceNote) -> None:
        super().__init__(io.BytesIO(note.data), filename=VOICE_FILENAME)
        self._duration = note.duration_s
        self._waveform = base64.b64encode(note.waveform or b"\0").decode()

    def to_dict(self, index: int) -> dict[str, Any]:
        return {**super().to_dict(index), "duration_secs": self._duration,
                "waveform": self._waveform}  # fmt: skip


async def send_voice(
    client: discord.Client,
    channel: discord.PartialMessageable,
    note: VoiceNote,
    reference: discord.MessageReference | None,
    retried: Retried,
    told: set[int],
) -> str:
    """Send `note` in `channel` (replying to `reference`), each try through
    `retried`; returns the message's id. `told`: the channels already logged
    as refusing voice messages. Raises what the send raised."""
    nonce = secrets.randbits(63)  # the same for each try

    async def post() -> str:
        refer: Any = reference.to_message_reference_dict() if reference else discord.utils.MISSING
        with handle_message_parameters(
            file=_VoiceFile(note), flags=discord.MessageFlags(voice=True), nonce=nonce,
            message_reference=refer,
        ) as params:  # fmt: skip
            for part in params.multipart or []:
                if str(part["name"]).startswith("files["):
                    part["content_type"] = "audio/ogg"
            data = await client.http.send_message(channel.id, params=params)
        return str(data["id"])

    try:
        sent: str = await retried(post)
        return sent
    except discord.HTTPException as exc:
        if exc.code not in _REFUSED:
            raise
        if channel.id not in told:
            told.add(channel.id)
            log.info("discord.voice_as_file", channel_id=str(channel.id), code=exc.code)
    as_file = secrets.randbits(63)
    message = await retried(lambda: channel.send(
        file=discord.File(io.BytesIO(note.data), filename=FILE_FILENAME), nonce=as_file,
        reference=reference if reference is not None else discord.utils.MISSING,
    ))  # fmt: skip
    return str(message.id)
