"""Images a message carries: downloaded for its turn, then a line of text.

The adapters announce images (`Media`: kind, type, announced size, a download);
`download` fetches those of a message the bot answers, at most
`media.max_images`, each within `media.download_timeout_s`, refusing one whose
announced or actual size passes `IMAGE_BYTES` (bot/types.py: the API takes 5 MB
of base64 data, about 3.75 MB of image): the adapters refuse nothing
themselves. What is refused is said in one line
(`refusal`). An image lives in memory for its turn only (`media.keep` saves a
copy under `data_dir/media/`); the history and the memory traces keep a
placeholder (`placeholder`), "[photo: caption]", and once the model has
answered, the one-line note it began its answer with ("[seen: ...]",
`split_seen`), which is not sent.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from bot import prompts
from bot.config.schema import MediaConfig
from bot.storage.files import PRIVATE_FILE, PRIVATE_FOLDER, make_folders, replace_file
from bot.types import IMAGE_BYTES, IMAGE_TYPES, Media

log = structlog.get_logger(__name__)

_SUFFIX = {"image/jpeg": ".jpg", "image/png": ".png", "image/gif": ".gif", "image/webp": ".webp"}
# The note a model begins an answer to images with: "[seen: ...]" on the first line.
_SEEN = re.compile(r"\s*\[seen:\s*(?P<seen>[^\]\n]*)\]\s*")
_SEEN_OPENING = "[seen:"


@dataclass(frozen=True)
class Image:
    """A downloaded image, for one turn: its bytes, media type and kind."""

    data: bytes = field(repr=False)
    mime: str
    kind: str = "image"

    def block(self) -> dict[str, Any]:
        """The image as a content block of the Messages API."""
        data = base64.b64encode(self.data).decode("ascii")
        return {"type": "image", "source": {"type": "base64", "media_type": self.mime,
                                            "data": data}}  # fmt: skip


def megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.2f} MB".replace(".00 ", " ")


async def _fetch(media: Media, timeout_s: float) -> bytes:
    """The image's bytes. Raises ValueError (too large, not an image),
    TimeoutError, or what the download raised."""
    if media.mime not in IMAGE_TYPES:
        raise ValueError(f"{media.mime} is not an image type I read")
    if media.size is not None:
        _check_size(media.kind, media.size)  # as announced: before any download
    async with asyncio.timeout(timeout_s):
        data = await media.fetch()
    _check_size(media.kind, len(data))  # as it came
    return bytes(data)


def _check_size(kind: str, size: int) -> None:
    """Raises ValueError, saying so, for an image over IMAGE_BYTES."""
    if size > IMAGE_BYTES:
        raise ValueError(prompts.IMAGE_TOO_LARGE.format(
            kind=kind, size=megabytes(size), limit=megabytes(IMAGE_BYTES)))  # fmt: skip


async def download(media: Sequence[Media], config: MediaConfig) -> tuple[list[Image], list[str]]:
    """The images of a message, downloaded in order, and a reason for each one
    refused (`media.max_images` at most; each logged as `media.refused`)."""
    images: list[Image] = []
    refused: list[str] = []
    limit = config.max_images
    if len(media) > limit:
        refused.append(prompts.IMAGE_TOO_MANY.format(limit=limit, count=len(media)))
    for item in media[:limit]:
        try:
            data = await _fetch(item, config.download_timeout_s)
        except ValueError as exc:
            refused.append(str(exc))
        except TimeoutError:
            took = f"it took over {config.download_timeout_s:g} s"
            refused.append(prompts.IMAGE_FAILED.format(kind=item.kind, reason=took))
        except Exception as exc:  # the platform's failure: the message is answered anyway
            log.warning("media.download_failed", kind=item.kind,
                        error=f"{type(exc).__name__}: {exc}")  # fmt: skip
            refused.append(prompts.IMAGE_FAILED.format(kind=item.kind, reason=type(exc).__name__))
        else:
            images.append(Image(data, item.mime, item.kind))
    for reason in refused:
        log.info("media.refused", reason=reason)
    return images, refused


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


async def keep(base: Path, session: str, entry: int, images: Sequence[Image]) -> None:
    """Save `images` in the session's `kept_folder` (`media.keep`), private files."""
    target = kept_folder(base, session)

    def write() -> None:
        make_folders(target, PRIVATE_FOLDER)
        for n, image in enumerate(images, 1):
            replace_file(target / f"{entry}-{n}{_SUFFIX[image.mime]}", image.data, PRIVATE_FILE)

    await asyncio.to_thread(write)


@dataclass(frozen=True)
class Pictured:
    """A message with images, as its session holds it until its turn: the
    images downloaded, the kinds of all it carried (refused ones too), its
    caption, its sender (for the trace), and the text before the placeholder
    in its history row (the sender's name, a quote)."""

    images: tuple[Image, ...]
    kinds: tuple[str, ...]
    caption: str
    sender: str = ""
    prefix: str = ""

    def placeholder(self, seen: str | None = None) -> str:
        return placeholder(self.kinds, bool(self.images), self.caption, seen)

    def row(self, seen: str | None = None) -> str:
        """The history row's text, with the model's note when there is one."""
        return self.prefix + self.placeholder(seen)
