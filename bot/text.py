"""Decoding the text files soulbot reads (config, soul files)."""

from __future__ import annotations


def decode_text(data: bytes) -> str:
    """UTF-8 text without a byte order mark, with `\\n` line ends.

    Raises UnicodeDecodeError, whose `start` counts bytes from the file's start.
    """
    text = data.decode("utf-8")
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
