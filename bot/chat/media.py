"""Images a message carries: screened when it comes, downloaded for its turn,
then a line of text.

The adapters announce images (`Media`: kind, type, announced size, file name,
a download) and refuse nothing themselves. When a message comes, `screen`
keeps at most `media.max_images` of them and refuses, unseen, one whose
announced size passes `IMAGE_BYTES` (bot/types.py: the API takes 5 MB of
base64 data, about 3.75 MB of image). Nothing is downloaded yet: the session
holds the images of the messages waiting for a turn, the newest
`media.max_images` of them (`keep_newest`; the older ones are left out), and
`download` fetches them when their turn starts, each within
`media.download_timeout_s`, refusing one whose actual size passes the limit
or whose bytes are no JPEG, PNG, GIF or WebP (the type is read from the bytes,
not taken from the platform: the API refuses a mismatch). Each image is read
and encoded once, off the event loop (`Image`). What is refused is said in
one line (`refusal`). An image lives in memory for its turn only (`media.keep`
saves a copy under `data_dir/media/`); the history and the memory traces keep
a placeholder (`placeholder`), "[photo: caption]", and once the model has
answered, the one-line note it began its answer with ("[seen: ...]",
`split_seen`), which is not sent.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from bot import prompts
from bot.config.schema import MediaConfig
from bot.model.images import bytes_reader, image_type
from bot.storage.files import PRIVATE_FILE, PRIVATE_FOLDER, make_folders, replace_file
from bot.types import IMAGE_BYTES, IMAGE_TYPES, Media

log = structlog.get_logger(__name__)

_SUFFIX = {"image/jpeg": ".jpg", "image/png": ".png", "image/gif": ".gif", "image/webp": ".webp"}
# The note a model begins an answer to images with: "[seen: ...]" on the first line.
_SEEN = re.compile(r"\s*\[seen:\s*(?P<seen>[^\]\n]*)\]\s*")
_SEEN_OPENING = "[seen:"


@dataclass(frozen=True)
class Image:
    """A downloaded image, for one turn: its data in base64 (encoded once, by
    `read_image`), its media type as its bytes say, and its kind."""

    source: str = field(repr=False)
    mime: str
    kind: str = "image"

    def block(self) -> dict[str, Any]:
        """The image as a content block of the Messages API (no encoding: the
        data was encoded once)."""
        return {"type": "image", "source": {"type": "base64", "media_type": self.mime,
                                            "data": self.source}}  # fmt: skip


async def read_image(data: bytes, media: Media) -> Image:
    """`data`, downloaded for `media`, as an Image: its type read from its
    magic bytes, its base64 encoded, in a worker thread (the API counts it by
    the size its header declares: bot/model/images.py). Raises ValueError,
    saying so, for bytes of no image type the model reads, whatever the
    platform announced."""

    def read() -> Image:
        mime = image_type(bytes_reader(data))
        if mime is None:
            raise ValueError(_not_an_image(media))
        return Image(base64.b64encode(data).decode("ascii"), mime, media.kind)

    return await asyncio.to_thread(read)


def _not_an_image(media: Media) -> str:
    if media.name:
        return prompts.FILE_NOT_AN_IMAGE.format(name=media.name, mime=media.mime)
    return prompts.IMAGE_NOT_AN_IMAGE.format(kind=media.kind, mime=media.mime)


def megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.2f} MB".replace(".00 ", " ")


async def _fetch(media: Media, timeout_s: float) -> Image:
    """The image, downloaded and read. Raises ValueError (too large, not an
    image), TimeoutError, or what the download raised."""
    async with asyncio.timeout(timeout_s):
        data = await media.fetch()
    _check_size(media.kind, len(data))  # as it came
    return await read_image(bytes(data), media)


def _check_size(kind: str, size: int) -> None:
    """Raises ValueError, saying so, for an image over IMAGE_BYTES."""
    if size > IMAGE_BYTES:
        raise ValueError(prompts.IMAGE_TOO_LARGE.format(
            kind=kind, size=megabytes(size), limit=megabytes(IMAGE_BYTES)))  # fmt: skip


def screen(media: Sequence[Media], config: MediaConfig) -> tuple[tuple[Media, ...], list[str]]:
    """The images of a message that may go to the model (`media.max_images`
    at most, the first; none of a type it does not read or announced too
    large), and a reason for each one refused, downloading none (each logged
    as `media.refused`)."""
    kept: list[Media] = []
    refused: list[str] = []
    limit = config.max_images
    if len(media) > limit:
        refused.append(prompts.IMAGE_TOO_MANY.format(limit=limit, count=len(media)))
    for item in media[:limit]:
        try:
            if item.mime not in IMAGE_TYPES:
                raise ValueError(_not_an_image(item))
            if item.size is not None:
                _check_size(item.kind, item.size)
        except ValueError as exc:
            refused.append(str(exc))
        else:
            kept.append(item)
    _log_refused(refused)
    return tuple(kept), refused


def keep_newest(waiting: dict[int, Pictured], limit: int) -> int:
    """Leave the images of the messages `waiting` for a turn (by entry, oldest
    first) at the newest `limit`, the older ones left out (their messages keep
    their placeholder); returns how many were left out."""
    over = sum(len(p.media) for p in waiting.values()) - limit
    left_out = 0
    for entry, picture in waiting.items():
        if left_out >= over:
            break
        cut = min(len(picture.media), over - left_out)
        waiting[entry] = replace(picture, media=picture.media[cut:])
        left_out += cut
    return max(0, left_out)


async def download(media: Sequence[Media], config: MediaConfig) -> tuple[list[Image], list[str]]:
    """The images of `media` (screened), downloaded together and read, in
    order, and a reason for each one refused (each logged as `media.refused`)."""
    got = await asyncio.gather(*(_fetch(m, config.download_timeout_s) for m in media),
                               return_exceptions=True)  # fmt: skip
    images: list[Image] = []
    refused: list[str] = []
    for item, result in zip(media, got, strict=True):
        if isinstance(result, Image):
            images.append(result)
        elif isinstance(result, ValueError):
            refused.append(str(result))
        elif isinstance(result, TimeoutError):
            took = f"it took over {config.download_timeout_s:g} s"
            refused.append(prompts.IMAGE_FAILED.format(kind=item.kind, reason=took))
        elif isinstance(result, Exception):  # the platform's failure: the turn goes on
            log.warning("media.download_failed", kind=item.kind,
                        error=f"{type(result).__name__}: {result}")  # fmt: skip
            refused.append(prompts.IMAGE_FAILED.format(kind=item.kind,
                                                       reason=type(result).__name__))  # fmt: skip
        else:  # a cancel: the turn is going away
            raise result
    _log_refused(refused)
    return images, refused


def _log_refused(reasons: Sequence[str]) -> None:
    for reason in reasons:
        log.info("media.refused", reason=reason)


def refusal(reasons: Sequence[str]) -> str:
    """The one line that tells the person what did not reach the model."""
    return prompts.IMAGES_REFUSED.format(reasons="; ".join(reasons))


def placeholder(kinds: Sequence[str], seen_any: bool, caption: str, seen: str | None = None) -> str:
    """What the history and the traces keep of a message with images of
    `kinds` ("photo", "image"): "[photo: caption]", with the model's note once
    it answered ("[photo: caption; it showed: ...]"), or, when none reached the
    model (not `seen_any`), that they were not seen."""
    kind = kinds[0] if len(kinds) == 1 else f"{len(kinds)} images"
    caption = f": {caption}" if caption else ""
    if not seen_any:
        return prompts.IMAGE_NOT_SEEN.format(kind=kind, caption=caption)
    if seen:
        return prompts.IMAGE_SEEN.format(kind=kind, caption=caption, seen=seen)
    return prompts.IMAGE_PLACEHOLDER.format(kind=kind, caption=caption)


def split_seen(text: str) -> tuple[str | None, str]:
    """(the model's "[seen: ...]" note, the answer without it); the note is
    None when the answer does not begin with one."""
    found = _SEEN.match(text)
    if found is None:
        return None, text
    return found["seen"].strip() or None, text[found.end() :]


def holding_seen(text: str) -> bool:
    """Whether a streamed answer may still be writing its "[seen: ...]" line
    (so nothing of it is shown yet)."""
    head = text.lstrip()
    if len(head) < len(_SEEN_OPENING):
        return _SEEN_OPENING.startswith(head)
    return head.startswith(_SEEN_OPENING) and "]" not in head


def kept_folder(base: Path, session: str) -> Path:
    """The folder of a session's kept images under `base` (`data_dir/media`)."""
    return base / session.replace(":", "_")


async def unkeep(base: Path, session: str, entries: Sequence[int]) -> int:
    """Delete the images kept of the history rows `entries` (`/undo`); returns
    how many went."""
    target = kept_folder(base, session)

    def delete() -> int:
        gone = 0
        for entry in entries:
            for path in target.glob(f"{entry}-*"):
                path.unlink(missing_ok=True)
                gone += 1
        return gone

    return await asyncio.to_thread(delete)


async def keep(base: Path, session: str, entry: int, images: Sequence[Image]) -> None:
    """Save `images` in the session's `kept_folder` (`media.keep`), private files
    stamped with the clock's time: retention (`retention.media_days`) reads it."""
    target = kept_folder(base, session)
    now = time.time()

    def write() -> None:
        make_folders(target, PRIVATE_FOLDER)
        for n, image in enumerate(images, 1):
            path = target / f"{entry}-{n}{_SUFFIX[image.mime]}"
            replace_file(path, base64.b64decode(image.source), PRIVATE_FILE)
            os.utime(path, (now, now))

    await asyncio.to_thread(write)


@dataclass(frozen=True)
class Pictured:
    """A message with images, as its session holds it until its turn: the
    images still to download (`media`), then those downloaded (`images`),
    the kinds of all it carried (refused ones too), its caption, its sender
    (for the trace), and the text before the placeholder in its history row
    (the sender's name, a quote)."""

    media: tuple[Media, ...]
    kinds: tuple[str, ...]
    caption: str
    sender: str = ""
    prefix: str = ""
    images: tuple[Image, ...] = ()

    def placeholder(self, seen: str | None = None) -> str:
        return placeholder(self.kinds, bool(self.media or self.images), self.caption, seen)

    def row(self, seen: str | None = None) -> str:
        """The history row's text, with the model's note when there is one."""
        return self.prefix + self.placeholder(seen)
