"""Real audio for the speech fakes and the platform fakes, made and read with
PyAV: a tone as long as a text would take to say, in each format a speech
service answers; and `probe`, which decodes a file the bot sent and says what
it is (the Telegram and Discord fakes check voice notes with it).
"""

from __future__ import annotations

import io
import math
import struct
from dataclasses import dataclass
from fractions import Fraction

import av
import av.error

SPEECH_RATE = 24_000  # OpenAI's `pcm` and ElevenLabs' `pcm_24000`: 16-bit mono little-endian
SECONDS_PER_CHAR = 0.02  # the fakes "speak" 50 characters a second
# OpenAI's response_format -> (container, codec)
FORMATS = {
    "mp3": ("mp3", "libmp3lame"),
    "opus": ("ogg", "libopus"),
    "aac": ("adts", "aac"),
    "flac": ("flac", "flac"),
    "wav": ("wav", "pcm_s16le"),
}


def seconds_for(text: str) -> float:
    """How long the fakes' audio for `text` plays (at least a tenth of a second)."""
    return max(0.1, round(len(text) * SECONDS_PER_CHAR, 2))


def tone_pcm(seconds: float, rate: int = SPEECH_RATE, hz: float = 440.0) -> bytes:
    """A sine tone at half scale as raw 16-bit mono little-endian PCM."""
    count = round(seconds * rate)
    return b"".join(
        struct.pack("<h", int(16000 * math.sin(2 * math.pi * hz * n / rate))) for n in range(count)
    )


def tone(seconds: float, response_format: str, hz: float = 440.0) -> bytes:
    """A tone of `seconds` in OpenAI's `response_format`: `pcm` (raw, 24 kHz) or
    a file of `FORMATS`."""
    pcm = tone_pcm(seconds, SPEECH_RATE, hz)
    if response_format == "pcm":
        return pcm
    container_format, codec = FORMATS[response_format]
    rate = 48_000 if codec == "libopus" else SPEECH_RATE
    out = io.BytesIO()
    with av.open(out, "w", format=container_format) as container:
        stream = container.add_stream(codec, rate=rate, layout="mono")
        size = stream.codec_context.frame_size or 1024
        resampler = av.AudioResampler(stream.codec_context.format, "mono", rate, frame_size=size)
        frame = av.AudioFrame(format="s16", layout="mono", samples=len(pcm) // 2)
        frame.planes[0].update(pcm)
        frame.sample_rate = SPEECH_RATE
        frame.time_base = Fraction(1, SPEECH_RATE)
        frame.pts = 0
        for part in [*resampler.resample(frame), *resampler.resample(None)]:
            container.mux(stream.encode(part))
        container.mux(stream.encode(None))
    return out.getvalue()


@dataclass(frozen=True)
class Probe:
    """What a file holds: its container, first audio codec, rate, channels and
    how long it plays (decoded to the end, not read from a header)."""

    container: str
    codec: str
    rate: int
    channels: int
    duration_s: float


def probe(data: bytes) -> Probe:
    """Decode `data` whole. Raises ValueError when it is no audio FFmpeg reads."""
    try:
        with av.open(io.BytesIO(data), "r") as container:
            if not container.streams.audio:
                raise ValueError("no audio stream")
            stream = container.streams.audio[0]
            samples = sum(frame.samples for frame in container.decode(stream))
            return Probe(container.format.name, stream.codec_context.name, stream.rate,
                         stream.channels, samples / stream.rate)  # fmt: skip
    except av.error.FFmpegError as exc:
        raise ValueError(f"not audio: {exc}") from exc


def is_ogg_opus(data: bytes) -> bool:
    """Whether `data` is OGG/Opus that decodes to the end."""
    try:
        found = probe(data)
    except ValueError:
        return False
    return found.container == "ogg" and found.codec in ("opus", "libopus")
