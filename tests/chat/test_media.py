"""Images of a message (bot/chat/media.py): read once, off the loop; screened
without a download; the newest kept while they wait; the rate limit counts them."""

from __future__ import annotations

import base64

import pytest

from bot.chat.limits import RateLimit
from bot.chat.media import Pictured, keep_newest, read_image, screen
from bot.config.schema import MediaConfig
from bot.model.client import estimate_request_tokens
from bot.types import Media
from tests.fakes.images import jpeg, png


async def _never() -> bytes:
    raise AssertionError("screening downloads nothing")


def media(name: str = "", mime: str = "image/png", size: int | None = 10) -> Media:
    return Media("image", mime, size, _never, name)


async def test_an_image_is_encoded_once_and_its_block_reuses_it() -> None:
    data = png(640, 480, 50_000)
    image = await read_image(data, media("a.webp", "image/webp"))
    assert image.mime == "image/png"  # what its bytes are, not what it was announced as
    first, second = image.block(), image.block()
    assert first["source"]["data"] is second["source"]["data"] is image.source
    assert base64.b64decode(image.source) == data


async def test_bytes_of_no_image_are_refused_by_their_file_name() -> None:
    with pytest.raises(ValueError, match=r'^"run.sh" is not an image I can read \(it came as'):
        await read_image(b"#!/bin/sh\n", media("run.sh"))
    with pytest.raises(ValueError, match=r"^the image could not be read as an image \(it came"):
        await read_image(b"#!/bin/sh\n", media())


def test_the_estimate_does_not_grow_with_an_images_bytes() -> None:
    def request(data: bytes) -> dict[str, object]:
        block = {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                             "data": base64.b64encode(data).decode()}}  # fmt: skip
        content = [block] * 4 + [{"type": "text", "text": "look"}]
        return {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": content}]}

    small, large = request(jpeg(4032, 3024, 40_000)), request(jpeg(4032, 3024, 3_700_000))
    assert estimate_request_tokens(small) == estimate_request_tokens(large)
    assert 4 * 1600 < estimate_request_tokens(large) < 4 * 1600 + 100


def test_screening_downloads_nothing_and_says_what_it_refused() -> None:
    many = [media(size=n) for n in range(6)] + [media(size=5 * 2**20)]
    kept, refused = screen(many, MediaConfig(max_images=7))
    assert [m.size for m in kept] == [0, 1, 2, 3, 4, 5]
    assert refused == ["the image is too large for me to look at (5 MB; I take up to 3.75 MB)"]
    kept, refused = screen(many, MediaConfig(max_images=2))
    assert len(kept) == 2 and refused[0] == "I look at up to 2 images a message (this one had 7)"


def test_the_newest_images_waiting_are_kept() -> None:
    def pictured(n: int) -> Pictured:
        return Pictured(tuple(media(size=n) for _ in range(n)), ("image",) * n, "")

    waiting = {1: pictured(2), 2: pictured(1), 3: pictured(3)}
    assert keep_newest(waiting, 4) == 2
    assert [len(p.media) for p in waiting.values()] == [0, 1, 3]
    assert waiting[1].placeholder() == "[2 images; not seen: refused]"
    assert keep_newest(waiting, 4) == 0


def test_each_image_counts_as_a_message_against_the_rate_limit() -> None:
    rate = RateLimit(5, clock=lambda: 100.0)
    assert rate.admit("telegram:9", 4) == (0.0, False)
    wait, tell = rate.admit("telegram:9", 2)
    assert wait == 60.0 and tell
