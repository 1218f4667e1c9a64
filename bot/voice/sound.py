"""What a voice note's bytes hold, read in memory: its container, by its magic
bytes, and its length, by PyAV's demuxer (FFmpeg inside its wheel).

The container is named from the bytes, never probed by FFmpeg: FFmpeg's
probing may pick a format that opens other files or URLs (a playlist), so
only the formats the transcription endpoints take are read, each opened as
itself. Nothing is written to disk.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import av

# The containers the OpenAI-compatible endpoints read: FFmpeg's demuxer and the file
# extension the endpoint reads the format from.
_OGG, _MP3, _WAV = ("ogg", "ogg"), ("mp3", "mp3"), ("wav", "wav")
_FLAC, _MP4, _WEBM = ("flac", "flac"), ("mp4", "m4a"), ("matroska", "webm")
KNOWN = "OGG, MP3, WAV, FLAC, M4A or WebM"


@dataclass(frozen=True)
class Sound:
    """A voice note's bytes read: its length in seconds and the file extension
    its container is known by (`ogg`)."""

    seconds: float
    extension: str


def container(head: bytes) -> tuple[str, str] | None:
    """(FFmpeg's demuxer, the file extension) of the container `head` (the
    first bytes) starts, or None for none the endpoints read."""
    if head.startswith(b"OggS"):
        return _OGG
    if head.startswith(b"ID3") or (
        len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and head[1] & 0x06
    ):
        return _MP3
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return _WAV
    if head.startswith(b"fLaC"):
        return _FLAC
    if head[4:8] == b"ftyp":
        return _MP4
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return _WEBM
    return None


def read_sound(data: bytes) -> Sound:
    """The length and the container of `data`, the whole file. Blocking: run
    it on a thread. Raises ValueError for bytes of no container the endpoints
    read, or with no audio in them."""
    found = container(data[:16])
    if found is None:
        raise ValueError(f"not audio of a known kind ({KNOWN})")
    demuxer, extension = found
    try:
        with av.open(io.BytesIO(data), mode="r", format=demuxer) as opened:
            if not opened.streams.audio:
                raise ValueError("no sound in it")
            stream = opened.streams.audio[0]
            end = 0.0
            for packet in opened.demux(stream):
                if packet.pts is not None and packet.time_base is not None:
                    end = max(end, float((packet.pts + (packet.duration or 0)) * packet.time_base))
            base = stream.time_base
            start = float(stream.start_time * base) if stream.start_time and base else 0.0
    except av.FFmpegError as exc:
        raise ValueError(f"its {extension.upper()} cannot be read ({type(exc).__name__})") from exc
    seconds = max(0.0, end - start)
    if seconds <= 0:
        raise ValueError("no sound in it")
    return Sound(seconds, extension)
