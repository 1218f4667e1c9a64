"""What a Telegram message carries besides its text, in our terms: the images
to download (`Media`; the core refuses one too large), the voice notes and
audio files to download and transcribe (`Audio`; the core checks their
announced length and size first), the text of a caption or a sticker, and the
message it replies to (`Quote`).

Pure functions of PTB's `Message`, no I/O but the `fetch` coroutines they
build; adapters/telegram_adapter.py hands them a `Bot` and the size limit.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from telegram import Audio as TelegramAudio
from telegram import Bot, Message, MessageEntity, PhotoSize, Voice

from adapters.download import read_capped
from bot.types import IMAGE_BYTES, IMAGE_TYPES, Audio, Media, Quote

# Media a message may carry that is not read (the router answers with its one line).
UNREAD = ("video", "video_note", "animation", "document")
# What a quote says of a message that carries one of these.
_FILES = ("voice", "audio", *UNREAD)


@dataclass(frozen=True)
class Carried:
    """What a message carries besides its text: images to download, and
    whether media came that is not read at all."""

    images: tuple[Media, ...] = ()
    unread: bool = False
    audio: tuple[Audio, ...] = ()

    @property
    def anything(self) -> bool:
        return bool(self.images or self.unread or self.audio)


def body(message: Message) -> tuple[str | None, dict[MessageEntity, str]]:
    """The message's text, or its caption, with the entities of that text
    (mentions only); (None, {}) when it has neither."""
    kinds: list[str | None] = [MessageEntity.MENTION, MessageEntity.TEXT_MENTION]
    if message.text is not None:
        return message.text, message.parse_entities(kinds)
    if message.caption is not None:
        return message.caption, message.parse_caption_entities(kinds)
    return None, {}


def strip_mentions(
    text: str, entities: dict[MessageEntity, str], username: str, bot_id: int
) -> tuple[str, bool]:
    """`text` without the bot's @mentions among `entities` (a text's or a
    caption's, from `body`), and whether there was one (a text mention of the
    bot counts too, and stays: it is a name)."""
    found = False
    spans = []
    for entity, value in entities.items():
        ours = (entity.type == MessageEntity.MENTION and value[1:].lower() == username) or (
            entity.user is not None and entity.user.id == bot_id
        )
        if ours:
            found = True
            if entity.type == MessageEntity.MENTION:
                spans.append(value)
    for value in spans:
        text = re.sub(rf"{re.escape(value)}\b ?", "", text, count=1)
    return text.strip(), found


def sticker_text(message: Message) -> str | None:
    """A sticker's emoji (or "[sticker]"), which stands for its text."""
    if message.sticker is None:
        return None
    return message.sticker.emoji or "[sticker]"


def carried(message: Message, bot: Bot) -> Carried:
    """The images `message` carries (a photo in the largest size that fits
    IMAGE_BYTES, else its smallest, which the core refuses by its size; an
    image sent as a file), its voice note or audio file, and whether it carries
    media that is not read (a video, an animation, a file that is no image)."""
    if message.voice is not None:
        return Carried(audio=(_audio("voice", message.voice, bot),))
    if message.audio is not None:
        return Carried(audio=(_audio("audio", message.audio, bot),))
    if message.photo:
        chosen = _largest_fitting(message.photo, IMAGE_BYTES) or min(
            message.photo, key=lambda p: p.file_size or 0
        )
        media = Media("photo", "image/jpeg", chosen.file_size, _fetcher(bot, chosen.file_id))
        return Carried(images=(media,))
    document = message.document
    if message.animation is None and document is not None:  # a GIF animation has both
        mime = (document.mime_type or "").lower()
        if mime in IMAGE_TYPES:
            fetch = _fetcher(bot, document.file_id)
            media = Media("image", mime, document.file_size, fetch, document.file_name or "")
            return Carried(images=(media,))
    return Carried(unread=any(getattr(message, kind, None) for kind in UNREAD))


def _audio(kind: Literal["voice", "audio"], file: Voice | TelegramAudio, bot: Bot) -> Audio:
    """A voice note or audio file as `Audio`, its announced length and size
    read from its fields (`to_dict`: PTB's `duration` property warns)."""
    fields = file.to_dict()
    default = "audio/ogg" if kind == "voice" else "audio/mpeg"
    name = fields.get("file_name") or ""
    return Audio(kind, (file.mime_type or default).lower(), fields.get("duration"),
                 file.file_size, _capped_fetcher(bot, file.file_id), name)  # fmt: skip


def _capped_fetcher(bot: Bot, file_id: str) -> Callable[[int], Awaitable[bytes]]:
    """getFile, then the file from its URL, stopped past the limit."""

    async def fetch(limit: int) -> bytes:
        file = await bot.get_file(file_id)
        path = file.file_path or ""
        if path.startswith(("http://", "https://")):
            return await read_capped(path, limit)
        return bytes(await file.download_as_bytearray())[: limit + 1]  # a local Bot API server

    return fetch


def _largest_fitting(sizes: tuple[PhotoSize, ...], max_bytes: int) -> PhotoSize | None:
    """The largest size of a photo whose announced size is at most `max_bytes`
    (one with no announced size fits: the core checks what it downloads)."""
    fitting = [p for p in sizes if p.file_size is None or p.file_size <= max_bytes]
    if not fitting:
        return None
    return max(fitting, key=lambda p: (p.width * p.height, p.file_size or 0))


def _fetcher(bot: Bot, file_id: str) -> Callable[[], Awaitable[bytes]]:
    async def fetch() -> bytes:
        file = await bot.get_file(file_id)
        return bytes(await file.download_as_bytearray())

    return fetch


def parent_of(message: Message) -> Message | None:
    """The message `message` replies to; None for none, and for the forum
    topic's first message, which every message of a topic "replies" to."""
    parent = message.reply_to_message
    if parent is None:
        return None
    if message.is_topic_message and parent.message_id == message.message_thread_id:
        return None
    return parent


def quote_of(message: Message, parent: Message, bot_id: int) -> Quote:
    """The `Quote` of `parent`, which `message` replies to: the part Telegram
    sent as quoted, else the parent's text or caption, else what it carries
    ("[photo]", "[sticker 😀]", "[file]"; "[message]" for anything else)."""
    sender = parent.from_user
    if sender is not None:
        name = sender.full_name or sender.username or str(sender.id)
    elif parent.sender_chat is not None:  # a channel or an anonymous admin
        name = parent.sender_chat.title or parent.sender_chat.username or str(parent.sender_chat.id)
    else:
        name = ""
    if message.quote is not None and message.quote.text:
        text = message.quote.text
    elif parent.text or parent.caption:
        text = parent.text or parent.caption or ""
    elif parent.photo:
        text = "[photo]"
    elif parent.sticker is not None:
        text = f"[sticker {parent.sticker.emoji}]" if parent.sticker.emoji else "[sticker]"
    elif parent.voice is not None:
        text = "[voice note]"
    elif any(getattr(parent, kind, None) for kind in _FILES):
        text = "[file]"
    else:
        text = "[message]"
    return Quote(user_name=name, text=text, from_bot=sender is not None and sender.id == bot_id)
