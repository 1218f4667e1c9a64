"""The bot's photos in the Bot API fake (tests/fakes/telegram_fake.py): sendPhoto.

sendPhoto takes an uploaded file (multipart, as PTB sends an ``InputFile``) or
the ``file_id`` of one it took before, with ``caption``, replies and topics as
sendMessage. The fake reads the image's size from its header (PNG's IHDR,
JPEG's frame header), as Telegram must decode it to show it: a file that is
neither is refused (400 ``IMAGE_PROCESS_FAILED``), and so, as Telegram does,
are no photo (400 ``there is no photo in the request``), an empty file (400
``file must be non-empty``), a file over ``MAX_PHOTO_BYTES`` (10 MB, 400
``PHOTO_SAVE_FILE_INVALID``), sides adding up to more than 10,000 pixels or
one more than 20 times the other (400 ``PHOTO_INVALID_DIMENSIONS``), and a
caption over 1024 UTF-16 code units. The answer is a message with ``photo``:
the sizes Telegram makes of it (PhotoSize: file_id, file_unique_id, width,
height), the long side scaled to 90, 320, 800 and 1280 pixels where the photo
is larger, and the photo itself up to 1280 (the largest, last, has the
file_size and the file_id to send it again by); each one taken is in
``photos`` with the bytes as sent.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tests.fakes.images import image_size
from tests.fakes.telegram_http import ApiError
from tests.fakes.telegram_messages import BotMessages
from tests.fakes.telegram_records import JSON, Upload

MAX_PHOTO_BYTES = 10 * 1024 * 1024
MAX_SIDES = 10_000
MAX_RATIO = 20
SIDES = (90, 320, 800, 1280)


@dataclass(frozen=True)
class SentPhoto:
    """A photo the bot sent: where, as which message, the file as uploaded,
    its size in pixels (from its header), the caption."""

    chat_id: int
    message_id: int
    file: Upload
    width: int
    height: int
    caption: str | None
    file_id: str


class BotPhotos(BotMessages):
    """sendPhoto; see the module docstring."""

    @functools.cached_property
    def photos(self) -> list[SentPhoto]:
        """The photos taken, in order."""
        return []

    async def _send_photo(self, params: JSON) -> JSON:
        chat = self._chat(params)
        upload = self._upload(params, "photo", {p.file_id: p.file for p in self.photos})
        if len(upload.data) > MAX_PHOTO_BYTES:
            raise ApiError(400, "Bad Request: PHOTO_SAVE_FILE_INVALID")
        size = image_size(upload.data)
        if size is None:
            raise ApiError(400, "Bad Request: IMAGE_PROCESS_FAILED")
        width, height = size
        if (not width or not height or width + height > MAX_SIDES
                or max(width, height) > MAX_RATIO * min(width, height)):  # fmt: skip
            raise ApiError(400, "Bad Request: PHOTO_INVALID_DIMENSIONS")
        caption = self._caption(params)
        file_id = f"PHOTO{len(self.photos) + 1:06d}"
        fields: JSON = {"photo": _sizes(file_id, width, height, len(upload.data))}
        if caption:
            fields["caption"] = caption
        message = self._new_message(chat, params, fields)
        self.photos.append(
            SentPhoto(chat["id"], message["message_id"], upload, width, height, caption, file_id)
        )
        return message


def _sizes(file_id: str, width: int, height: int, file_size: int) -> list[JSON]:
    """The PhotoSize list of a photo, smallest first (see the module docstring)."""
    long_side = max(width, height)
    sides = [side for side in SIDES[:-1] if side < long_side] + [min(long_side, SIDES[-1])]
    sizes: list[JSON] = []
    for n, side in enumerate(sides):
        scale = side / long_side
        sizes.append({
            "file_id": f"{file_id}-{n}",
            "file_unique_id": f"U{file_id}-{n}",
            "width": max(1, round(width * scale)),
            "height": max(1, round(height * scale)),
        })  # fmt: skip
    sizes[-1].update(file_id=file_id, file_unique_id=f"U{file_id}", file_size=file_size)
    return sizes
