"""What a Discord message carries besides its text, in our terms (the Discord
adapter's inbound side; adapters/discord_adapter.py says what it does).

`images` picks the image attachments (by media type, else by file name) as
`Media` to download later (the core holds them to `media.max_images` and to
the size the model takes); `audio` picks a voice message's recording and the
audio attachments as `Audio`, downloaded when the core hears them, from their
CDN URL, no further than its byte cap; `sticker_tags` writes stickers into
the text; `quote` is the message a reply quotes, when Discord resolved it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import discord

from adapters.download import read_capped
from bot.types import IMAGE_TYPES, Audio, Media, Quote

_BY_EXTENSION = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                 ".gif": "image/gif", ".webp": "image/webp"}  # fmt: skip


def image_type(attachment: discord.Attachment) -> str | None:
    """The attachment's image media type, or None for anything that is no image
    (or an image of another kind); by its file name when Discord gives none."""
    if attachment.content_type:
        mime = attachment.content_type.split(";", 1)[0].strip().lower()
        return mime if mime in IMAGE_TYPES else None
    name = attachment.filename.lower()
    dot = name.rfind(".")
    return _BY_EXTENSION.get(name[dot:]) if dot >= 0 else None


def images(attachments: Sequence[discord.Attachment]) -> tuple[Media, ...]:
    """The image attachments as `Media`, in order, with their declared sizes."""
    return tuple(
        Media(
            kind="image",
            mime=mime,
            size=attachment.size,
            fetch=attachment.read,
            name=attachment.filename,
        )
        for attachment in attachments
        if (mime := image_type(attachment)) is not None
    )


def is_audio(attachment: discord.Attachment) -> bool:
    """Whether the attachment is a voice message's recording or an audio file."""
    mime = (attachment.content_type or "").split(";", 1)[0].strip().lower()
    return attachment.is_voice_message() or mime.startswith("audio/")


def audio(message: discord.Message) -> tuple[Audio, ...]:
    """A voice message's recording (`voice`) and the audio attachments
    (`audio`) as `Audio`, with their announced length and size."""
    voice = message.flags.voice
    return tuple(
        Audio(
            kind="voice" if voice or attachment.is_voice_message() else "audio",
            mime=(attachment.content_type or "audio/ogg").split(";", 1)[0].strip().lower(),
            seconds=attachment.duration,
            size=attachment.size,
            fetch=_capped(attachment.url),
            name="" if voice else attachment.filename,
        )
        for attachment in message.attachments
        if is_audio(attachment)
    )


def _capped(url: str) -> Callable[[int], Awaitable[bytes]]:
    async def fetch(limit: int) -> bytes:
        return await read_capped(url, limit)

    return fetch


def sticker_tags(message: discord.Message) -> list[str]:
    """`[sticker: <name>]` for each sticker the message carries."""
    return [f"[sticker: {sticker.name}]" for sticker in message.stickers]


def stand_in(message: discord.Message) -> str:
    """A message's text, or what stands for it when it has none: `[image]`,
    `[file]`, its stickers' tags (each that applies, in that order)."""
    if message.content:
        return message.content
    if message.flags.voice:
        return "[voice message]"
    kinds = [image_type(a) is not None for a in message.attachments]
    tags = ["[image]"] * any(kinds) + ["[file]"] * (not all(kinds))
    return " ".join([*tags, *sticker_tags(message)])


def quote(message: discord.Message, me: discord.abc.User) -> Quote | None:
    """The message `message` replies to, when Discord resolved it (None for a
    deleted or unfetched one: the core looks the id up in what the bot sent).
    Its text is whole; the core cuts it."""
    resolved = message.reference.resolved if message.reference else None
    if not isinstance(resolved, discord.Message):
        return None
    return Quote(user_name=resolved.author.display_name, text=stand_in(resolved),
                 from_bot=resolved.author.id == me.id)  # fmt: skip
