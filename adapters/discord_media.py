"""What a Discord message carries besides its text, in our terms (the Discord
adapter's inbound side; adapters/discord_adapter.py says what it does).

`images` picks the image attachments (by media type, else by file name) as
`Media` to download later, up to a count and a size, and words what it leaves
out; `sticker_tags` writes stickers into the text; `quote` is the message a
reply quotes, when Discord resolved it.
"""

from __future__ import annotations

from collections.abc import Sequence

import discord

from adapters import texts
from bot.types import Media, Quote

MAX_IMAGES = 4
# The API takes an image of up to 5 MB of base64 data: 3/4 of that in bytes.
MAX_IMAGE_BYTES = 5 * 1024 * 1024 * 3 // 4
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
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


def images(
    attachments: Sequence[discord.Attachment], max_images: int, max_bytes: int
) -> tuple[tuple[Media, ...], tuple[str, ...]]:
    """The image attachments as `Media` (at most `max_images`, none over
    `max_bytes` by its declared size) and one line for each refusal: each image
    too large, then one for those over the count."""
    taken: list[Media] = []
    refused: list[str] = []
    left_out = 0
    for attachment in attachments:
        mime = image_type(attachment)
        if mime is None:
            continue
        if attachment.size > max_bytes:
            size, limit = _megabytes(attachment.size, max_bytes)
            refused.append(texts.IMAGE_TOO_LARGE.format(name=attachment.filename, size=size,
                                                         limit=limit))  # fmt: skip
        elif len(taken) >= max_images:
            left_out += 1
        else:
            taken.append(Media(kind="image", mime=mime, size=attachment.size,
                               fetch=attachment.read))  # fmt: skip
    if left_out:
        refused.append(texts.images_left_out(max_images, left_out))
    return tuple(taken), tuple(refused)


def _megabytes(size: int, limit: int) -> tuple[str, str]:
    """`size` and `limit` in MB (MiB), with a decimal, or as many as show them apart."""
    for digits in (1, 2, 3):
        shown = f"{size / 2**20:.{digits}f}", f"{limit / 2**20:.{digits}f}"
        if float(shown[0]) > float(shown[1]):
            break
    return shown


def sticker_tags(message: discord.Message) -> list[str]:
    """`[sticker: <name>]` for each sticker the message carries."""
    return [f"[sticker: {sticker.name}]" for sticker in message.stickers]


def stand_in(message: discord.Message) -> str:
    """A message's text, or what stands for it when it has none: `[image]`,
    `[file]`, its stickers' tags (each that applies, in that order)."""
    if message.content:
        return message.content
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
