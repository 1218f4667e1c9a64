"""Audio for voice notes, with PyAV (FFmpeg and libopus inside its wheel):
what a speech service answers (raw PCM, or any container FFmpeg reads) decoded
to 16-bit mono PCM at 48 kHz, and that PCM encoded as OGG/Opus, the format of
Telegram's and Discord's voice notes, with its duration and the waveform
Discord draws under a voice message. Everything happens in memory: no audio
byte is ever written to a file.
"""

from __future__ import annotations

import io
import math
from array import array
from fractions import Fraction

import av
import av.error

from bot.errors import SpeechError
from bot.types import VoiceNote

RATE = 48_000  # Opus's own rate: what Telegram and Discord voice notes carry
FRAME = 960  # samples in one 20 ms Opus frame at 48 kHz
BIT_RATE = 32_000  # speech in mono: clear, and about 240 KB a minute
WAVEFORM_POINTS = 256  # Discord's most
WAVEFORM_STEP_S = 0.1  # and at most one point a tenth of a second, as its clients sample


def decode(data: bytes, raw_rate: int | None = None) -> bytes:
    """16-bit mono PCM at 48 kHz from `data`: raw 16-bit little-endian mono PCM
    at `raw_rate` when given (ElevenLabs' `pcm_24000`), else a file in any
    format FFmpeg reads (WAV, MP3, Opus, FLAC, AAC). Raises SpeechError when
    it cannot be read or holds no audio."""
    options = {"sample_rate": str(raw_rate), "ch_layout": "mono"} if raw_rate else {}
    pcm = bytearray()
    try:
        with av.open(io.BytesIO(data), "r", format="s16le" if raw_rate else None,
                     options=options) as container:  # fmt: skip
            if not container.streams.audio:
                raise SpeechError("the speech service's answer holds no audio")
            resampler = av.AudioResampler("s16", "mono", RATE)
            for frame in container.decode(container.streams.audio[0]):
                for out in resampler.resample(frame):
                    pcm += bytes(out.planes[0])[: out.samples * 2]
            for out in resampler.resample(None):
                pcm += bytes(out.planes[0])[: out.samples * 2]
    except (av.error.FFmpegError, ValueError) as exc:
        raise SpeechError(f"the speech service's audio cannot be read: {exc}") from exc
    if not pcm:
        raise SpeechError("the speech service's answer holds no audio")
    return bytes(pcm)


def ogg_opus(pcm: bytes) -> bytes:
    """`pcm` (16-bit mono at 48 kHz) as OGG/Opus bytes; the last frame is
    filled with silence to a whole 20 ms."""
    frame_bytes = FRAME * 2
    if len(pcm) % frame_bytes:
        pcm += b"\0" * (frame_bytes - len(pcm) % frame_bytes)
    out = io.BytesIO()
    with av.open(out, "w", format="ogg") as container:
        stream = container.add_stream("libopus", rate=RATE, layout="mono")
        stream.bit_rate = BIT_RATE
        for start in range(0, len(pcm), frame_bytes):
            frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME)
            frame.planes[0].update(pcm[start : start + frame_bytes])
            frame.sample_rate = RATE
            frame.time_base = Fraction(1, RATE)
            frame.pts = start // 2
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return out.getvalue()


def waveform(pcm: bytes) -> bytes:
    """The loudness of `pcm` (16-bit mono at 48 kHz) over its length: one byte
    (0-255, the loudest sample's share of full scale) per tenth of a second,
    at most 256 of them."""
    samples = array("h", pcm[: len(pcm) // 2 * 2])
    if not samples:
        return b""
    points = min(WAVEFORM_POINTS, max(1, math.ceil(len(samples) / RATE / WAVEFORM_STEP_S)))
    step = len(samples) / points
    levels = []
    for n in range(points):
        part = samples[int(n * step) : max(int((n + 1) * step), int(n * step) + 1)]
        peak = max(max(part), -min(part))
        levels.append(min(255, peak * 255 // 32767))
    return bytes(levels)


def voice_note(pcm: bytes) -> VoiceNote:
    """`pcm` (16-bit mono at 48 kHz) as a voice note: OGG/Opus, how long it
    plays, its waveform."""
    return VoiceNote(ogg_opus(pcm), round(len(pcm) / 2 / RATE, 2), waveform(pcm))
