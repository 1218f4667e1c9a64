"""Reading an image's type and size from its first bytes, and what the API
counts for it (bot/model/images.py). The files under images/ are CPython's
imghdr test images (16 x 16), written by real encoders."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import pytest

from bot.model.images import (
    MAX_TOKENS,
    api_tokens,
    base64_reader,
    block_tokens,
    bytes_reader,
    dimensions,
    image_type,
)
from tests.fakes.images import jpeg, png

FILES = Path(__file__).parent / "images"


@pytest.mark.parametrize(
    ("name", "mime"),
    [
        ("python.jpg", "image/jpeg"),
        ("python.png", "image/png"),
        ("python.gif", "image/gif"),
        ("python.webp", "image/webp"),
    ],
)
def test_real_files_are_read_from_bytes_and_from_base64(name: str, mime: str) -> None:
    data = (FILES / name).read_bytes()
    for read in (bytes_reader(data), base64_reader(base64.b64encode(data).decode())):
        assert image_type(read) == mime
        assert dimensions(read, mime) == (16, 16)


def webp(chunk: bytes, payload: bytes) -> bytes:
    body = b"WEBP" + chunk + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


def test_each_webp_kind_declares_its_size() -> None:
    lossy = webp(b"VP8 ", b"\x00\x00\x00\x9d\x01\x2a" + struct.pack("<HH", 4032, 3024))
    bits = (4032 - 1) | ((3024 - 1) << 14)
    lossless = webp(b"VP8L", b"\x2f" + struct.pack("<I", bits))
    extended = webp(b"VP8X", b"\x00" * 4 + (4031).to_bytes(3, "little")
                    + (3023).to_bytes(3, "little"))  # fmt: skip
    for data in (lossy, lossless, extended):
        read = bytes_reader(data)
        assert image_type(read) == "image/webp"
        assert dimensions(read, "image/webp") == (4032, 3024)


def test_a_jpeg_is_walked_past_its_exif_and_fill_bytes() -> None:
    photo = jpeg(4032, 3024, 2_000_000, exif_bytes=60_000)
    assert dimensions(bytes_reader(photo), "image/jpeg") == (4032, 3024)
    filled = photo[:2] + b"\xff\xff" + photo[2:]
    assert dimensions(bytes_reader(filled), "image/jpeg") == (4032, 3024)
    encoded = base64.b64encode(photo).decode()
    assert dimensions(base64_reader(encoded), "image/jpeg") == (4032, 3024)


@pytest.mark.parametrize(
    "data",
    [
        b"#!/bin/sh\nrm -rf ~\n",
        b"",
        b"\xff\xd8",
        b"GIF8",
        b"RIFF\x00\x00\x00\x00WAVE",
        b"%PDF-1.4",
        b"\x89PNG",
    ],
)
def test_what_is_no_image_has_no_type(data: bytes) -> None:
    assert image_type(bytes_reader(data)) is None


def test_a_broken_header_has_no_size() -> None:
    assert dimensions(bytes_reader(b"\xff\xd8\xff\xe0\x00"), "image/jpeg") is None
    assert dimensions(bytes_reader(b"\xff\xd8" + b"\x00" * 50), "image/jpeg") is None
    assert dimensions(bytes_reader(png(0, 10)), "image/png") is None
    assert dimensions(bytes_reader(b"\x89PNG\r\n\x1a\n"), "image/png") is None
    assert dimensions(bytes_reader(b"GIF89a\x01"), "image/gif") is None
    assert dimensions(bytes_reader(webp(b"VP8 ", b"\x00" * 10)), "image/webp") is None
    assert dimensions(bytes_reader(b"anything"), "image/bmp") is None
    assert dimensions(base64_reader("not base64!"), "image/png") is None


def test_the_api_counts_pixels_after_its_resize() -> None:
    assert api_tokens((200, 200)) == 54  # 40,000 / 750
    assert api_tokens((1000, 1000)) == 1334
    assert api_tokens((1092, 1092)) == 1590  # the largest square the API leaves as it is
    assert api_tokens((4032, 3024)) == MAX_TOKENS  # 1568 x 1176 after the resize: capped
    assert api_tokens((8000, 100)) == 42  # 1568 x 20
    assert api_tokens((1, 1)) == 1
    assert api_tokens(None) == MAX_TOKENS


def test_an_image_block_costs_what_its_size_says_whatever_its_bytes() -> None:
    def block(data: bytes) -> dict[str, object]:
        encoded = base64.b64encode(data).decode()
        return {"type": "image", "source": {"type": "base64", "media_type": "x", "data": encoded}}

    assert block_tokens(block(png(200, 200))) == 54
    assert block_tokens(block(jpeg(200, 200, 3_000_000))) == 54
    assert block_tokens(block(b"#!/bin/sh")) == MAX_TOKENS
    assert block_tokens({"type": "image", "source": {"type": "url", "url": "x"}}) == MAX_TOKENS
