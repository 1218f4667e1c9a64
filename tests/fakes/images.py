"""Image files as a person's phone sends them, of a given size in pixels and in
bytes, for the platform fakes (a photo, an image file) and the tests.

`jpeg` is laid out as a camera's: SOI, a JFIF APP0, an Exif APP1 of
`exif_bytes` (a phone's runs to tens of kilobytes, so the frame header comes
late), the SOF0 frame header with the width and height, then scan bytes up to
`size` and EOI. `png` is the signature, IHDR, an IDAT of filler and IEND. The
headers are what an encoder writes; the pixel data is filler that no decoder
would accept (the fakes never decode an image, nor does the bot). The fakes
read an image the bot sends as the platforms must before showing it: its type
by its magic bytes (`image_type`) and its size from its header (`image_size`).
"""

from __future__ import annotations

import struct
import zlib


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def jpeg(width: int, height: int, size: int = 0, *, exif_bytes: int = 20_000) -> bytes:
    """A JPEG of `width` x `height` pixels, padded to `size` bytes (at least its headers)."""
    jfif = _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    exif = _segment(0xE1, b"Exif\x00\x00" + b"\x00" * max(0, exif_bytes - 6))
    frame = _segment(0xC0, struct.pack(">BHHB", 8, height, width, 3) + b"\x01\x22\x00" * 3)
    scan = _segment(0xDA, b"\x03\x01\x00\x02\x11\x03\x11\x00\x3f\x00")
    head = b"\xff\xd8" + jfif + exif + frame + scan
    return head + b"\x55" * max(0, size - len(head) - 2) + b"\xff\xd9"


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def png(width: int, height: int, size: int = 0) -> bytes:
    """A PNG of `width` x `height` pixels (RGB), padded to `size` bytes (at least its headers)."""
    head = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0,
                                                             0, 0))  # fmt: skip
    end = _chunk(b"IEND", b"")
    filler = max(0, size - len(head) - len(end) - 12)
    return head + _chunk(b"IDAT", b"\x55" * filler) + end


_PNG = b"\x89PNG\r\n\x1a\n"
# JPEG frame headers (SOF0-SOF15) hold the size; C4, C8 and CC are other segments.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_type(data: bytes) -> str | None:
    """`image/png` or `image/jpeg` by the magic bytes, or None."""
    if data.startswith(_PNG):
        return "image/png"
    return "image/jpeg" if data.startswith(b"\xff\xd8") else None


def image_size(data: bytes) -> tuple[int, int] | None:
    """The (width, height) a PNG's or a JPEG's header gives, or None for
    anything else (or a header cut short)."""
    if data.startswith(_PNG) and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return width, height
    if not data.startswith(b"\xff\xd8"):
        return None
    at = 2
    while at + 4 <= len(data) and data[at] == 0xFF:
        marker, length = data[at + 1], struct.unpack(">H", data[at + 2 : at + 4])[0]
        if marker in _SOF and at + 9 <= len(data):
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None
