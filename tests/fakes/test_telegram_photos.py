"""The Bot API fake's sendPhoto, through PTB: it reads the image's size, answers
the sizes Telegram makes, keeps the bytes, and refuses as Telegram does."""

from __future__ import annotations

import pytest
from telegram import Bot, InputFile
from telegram.error import BadRequest

from tests.fakes.images import image_size, image_type, jpeg, png
from tests.fakes.telegram_fake import FakeTelegram
from tests.fakes.telegram_photos import MAX_PHOTO_BYTES


def test_image_type_and_size_read_png_and_jpeg_headers() -> None:
    assert (image_type(png(1, 1)), image_type(jpeg(1, 1)), image_type(b"GIF89a")) == (
        "image/png", "image/jpeg", None
    )  # fmt: skip
    assert image_size(png(800, 500)) == (800, 500)
    assert image_size(jpeg(1024, 768)) == (1024, 768)  # past a 20 kB Exif segment
    assert image_size(b"GIF89a....") is None
    assert image_size(png(800, 500)[:20]) is None


async def test_send_photo_answers_its_sizes_and_keeps_the_bytes(
    fake: FakeTelegram, bot: Bot
) -> None:
    data = png(800, 500, 4_000)
    msg = await bot.send_photo(42, InputFile(data, filename="usage.png"), caption="chart")
    assert [(s.width, s.height) for s in msg.photo] == [(90, 56), (320, 200), (800, 500)]
    assert msg.photo[-1].file_size == len(data) and msg.caption == "chart"
    [photo] = fake.photos
    assert (photo.chat_id, photo.message_id) == (42, msg.message_id)
    assert (photo.width, photo.height, photo.file.data) == (800, 500, data)
    assert photo.file.file_name == "usage.png"
    again = await bot.send_photo(42, msg.photo[-1].file_id)
    assert len(fake.photos) == 2 and fake.photos[1].file.data == data
    assert again.photo[-1].file_id != msg.photo[-1].file_id
    assert fake.sent == []  # a photo is no sendMessage


async def test_a_large_photo_is_answered_at_1280_pixels_at_most(
    fake: FakeTelegram, bot: Bot
) -> None:
    msg = await bot.send_photo(42, InputFile(jpeg(4000, 2000), filename="big.jpg"))
    assert [(s.width, s.height) for s in msg.photo][-2:] == [(800, 400), (1280, 640)]
    assert (fake.photos[0].width, fake.photos[0].height) == (4000, 2000)


async def test_send_photo_refuses_as_telegram_does(fake: FakeTelegram, bot: Bot) -> None:
    def upload(data: bytes) -> InputFile:
        return InputFile(data, filename="x.png")

    refused = [
        (b"not an image at all", "image_process_failed"),
        (b"", "file must be non-empty"),
        (png(9_000, 2_000), "photo_invalid_dimensions"),  # sides over 10,000 together
        (png(2_100, 100), "photo_invalid_dimensions"),  # one side 21 times the other
        (png(100, 100, MAX_PHOTO_BYTES + 1), "photo_save_file_invalid"),
    ]
    for data, error in refused:
        with pytest.raises(BadRequest, match=f"(?i)^{error}$"):
            await bot.send_photo(42, upload(data))
    with pytest.raises(BadRequest, match=r"(?i)wrong file identifier"):
        await bot.send_photo(42, "NOPE")
    assert fake.photos == []
    assert [c.status for c in fake.calls_of("sendPhoto")] == [400] * 6
