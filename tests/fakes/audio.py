"""Real audio for the tests: a tone encoded as OGG/Opus by PyAV (FFmpeg and
libopus inside its wheel), the format of a Telegram voice note and a Discord
voice message, and what a tone's bytes sound like (`tone_of`)."""

from __future__ import annotations

import io
import itertools
import math
from array import array

import av

RATE = 48_000
_FRAME = 960  # 20 ms at 48 kHz: one Opus frame


def tone_ogg_opus(seconds: float, hz: float = 440.0) -> bytes:
    """`seconds` of a sine tone at `hz`, mono, 48 kHz, as OGG/Opus bytes."""
    out = io.BytesIO()
    samples = int(seconds * RATE)
    with av.open(out, mode="w", format="ogg") as container:
        stream = container.add_stream("libopus", rate=RATE, layout="mono")
        for start in range(0, samples, _FRAME):
            count = min(_FRAME, samples - start)
            wave = array("h", (int(16_000 * math.sin(2 * math.pi * hz * (start + i) / RATE))
                               for i in range(count)))  # fmt: skip
            frame = av.AudioFrame(format="s16", layout="mono", samples=count)
            frame.planes[0].update(wave.tobytes())
            frame.sample_rate, frame.pts = RATE, start
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


def tone_of(data: bytes) -> tuple[float, float]:
    """(seconds, the frequency in Hz, from its zero crossings) of audio `data`,
    decoded whole: what a transcription fake hears. Raises av.FFmpegError for
    bytes that are no audio."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
    wave = array("h")
    with av.open(io.BytesIO(data)) as container:
        for frame in container.decode(container.streams.audio[0]):
            for out in resampler.resample(frame):
                wave.frombytes(bytes(out.planes[0])[: out.samples * 2])
    if not wave:
        return 0.0, 0.0
    crossings = sum(1 for a, b in itertools.pairwise(wave) if (a < 0) != (b < 0))
    seconds = len(wave) / RATE
    return seconds, crossings / 2 / seconds
