"""What an image is and what the API counts for it, read from its first bytes.

`image_type` names the format by its magic bytes (JPEG, PNG, GIF or WebP, the
ones the Messages API takes), whatever a platform announced; `dimensions`
reads the width and height its header declares (PNG's IHDR, GIF's screen,
WebP's VP8 / VP8L / VP8X chunk, JPEG's SOFn segment, reached segment by
segment), never its pixels. `api_tokens` is what the API counts for an image
of that size: it scales an image down until its long edge is at most
LONG_EDGE pixels, then counts width x height / 750, at most MAX_TOKENS.

Both read through a `Reader` (the bytes at an offset), so an image already in
a request, as base64, is read in small windows (`base64_reader`) and never
decoded whole: `block_tokens` is the cost of an image block of a request.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable, Mapping
from typing import Any

# The API's resizing: the long edge at most 1568 px, about 1,600 tokens at most;
# an image costs width x height / 750 tokens after it.
LONG_EDGE = 1568
MAX_TOKENS = 1600
PIXELS_PER_TOKEN = 750
# A JPEG's segments walked before giving up on finding its size (a real one has a few dozen).
_MAX_SEGMENTS = 512
# JPEG markers that start a frame (SOF0-3, 5-7, 9-11, 13-15) and that carry no length.
_SOF = frozenset({*range(0xC0, 0xC4), *range(0xC5, 0xC8), *range(0xC9, 0xCC), *range(0xCD, 0xD0)})
_STANDALONE = frozenset({0x01, *range(0xD0, 0xDA)})

Reader = Callable[[int, int], bytes]
"""`read(offset, n)`: up to `n` bytes of an image from `offset` (fewer at its end)."""


def bytes_reader(data: bytes) -> Reader:
    """A Reader of `data`."""
    return lambda offset, n: data[offset : offset + n]


def base64_reader(data: str) -> Reader:
    """A Reader of the image `data` encodes (base64), decoding only the
    characters that hold the bytes asked for; nothing past broken base64."""

    def read(offset: int, n: int) -> bytes:
        start, end = offset // 3 * 4, -(-(offset + n) // 3) * 4
        try:
            window = base64.b64decode(data[start:end], validate=True)
        except (binascii.Error, ValueError):
            return b""
        return window[offset % 3 : offset % 3 + n]

    return read


def image_type(read: Reader) -> str | None:
    """The media type the image's magic bytes say (image/jpeg, image/png,
    image/gif, image/webp), or None for anything else."""
    head = read(0, 12)
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def dimensions(read: Reader, mime: str) -> tuple[int, int] | None:
    """(width, height) as the header of an image of type `mime` declares
    them; None when it declares none that can be read."""
    size = _READERS[mime](read) if mime in _READERS else None
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    return size


def api_tokens(size: tuple[int, int] | None) -> int:
    """The tokens the API counts for an image of `size` (width, height), after
    its own resizing; MAX_TOKENS for an unknown size."""
    if size is None:
        return MAX_TOKENS
    width, height = size
    scale = min(1.0, LONG_EDGE / max(width, height))
    pixels = max(1, round(width * scale)) * max(1, round(height * scale))
    return min(MAX_TOKENS, math.ceil(pixels / PIXELS_PER_TOKEN))


def block_tokens(block: Mapping[str, Any]) -> int:
    """The tokens of an image block of a request: from the size its base64
    data declares (MAX_TOKENS for any other source, or none readable)."""
    source = block.get("source")
    if not isinstance(source, Mapping) or not isinstance(source.get("data"), str):
        return MAX_TOKENS
    read = base64_reader(source["data"])
    mime = image_type(read)
    return api_tokens(dimensions(read, mime) if mime else None)


def _u16be(b: bytes, at: int) -> int:
    return int.from_bytes(b[at : at + 2], "big")


def _png(read: Reader) -> tuple[int, int] | None:
    head = read(12, 12)  # the IHDR chunk: its type, then width and height
    if len(head) < 12 or head[:4] != b"IHDR":
        return None
    return int.from_bytes(head[4:8], "big"), int.from_bytes(head[8:12], "big")


def _gif(read: Reader) -> tuple[int, int] | None:
    head = read(6, 4)  # the logical screen
    if len(head) < 4:
        return None
    return int.from_bytes(head[:2], "little"), int.from_bytes(head[2:], "little")


def _webp(read: Reader) -> tuple[int, int] | None:
    head = read(12, 18)  # the first chunk's header and the start of its data
    chunk = head[:4]
    if chunk == b"VP8X" and len(head) == 18:  # the canvas: 24-bit width - 1 and height - 1
        return int.from_bytes(head[12:15], "little") + 1, int.from_bytes(head[15:18], "little") + 1
    if chunk == b"VP8L" and len(head) >= 13 and head[8] == 0x2F:  # 14-bit width - 1 and height - 1
        bits = int.from_bytes(head[9:13], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":  # a key frame: start code, then 14-bit width and height
        frame = read(23, 7)
        if len(frame) == 7 and frame[:3] == b"\x9d\x01\x2a":
            return int.from_bytes(frame[3:5], "little") & 0x3FFF, int.from_bytes(
                frame[5:7], "little"
            ) & 0x3FFF
    return None


def _jpeg(read: Reader) -> tuple[int, int] | None:
    at = 2  # after SOI
    for _ in range(_MAX_SEGMENTS):
        head = read(at, 2)
        if len(head) < 2 or head[0] != 0xFF:
            return None
        marker = head[1]
        if marker == 0xFF:  # a fill byte before the marker
            at += 1
            continue
        if marker in _STANDALONE:
            at += 2
            continue
        segment = read(at + 2, 7)  # its length, then (a frame's) precision, height, width
        if len(segment) < 2:
            return None
        if marker in _SOF:
            return (_u16be(segment, 5), _u16be(segment, 3)) if len(segment) == 7 else None
        at += 2 + _u16be(segment, 0)
    return None


_READERS: dict[str, Callable[[Reader], tuple[int, int] | None]] = {
    "image/jpeg": _jpeg,
    "image/png": _png,
    "image/gif": _gif,
    "image/webp": _webp,
}
