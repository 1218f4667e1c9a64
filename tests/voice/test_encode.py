"""Voice notes are real OGG/Opus at 48 kHz mono, whatever the speech service
answered; their duration and waveform follow the audio."""

from __future__ import annotations

import pytest

from bot.errors import SpeechError
from bot.voice.encode import RATE, decode, voice_note, waveform
from tests.fakes.speech_audio import SPEECH_RATE, probe, tone, tone_pcm


@pytest.mark.parametrize("response_format", ["mp3", "opus", "aac", "flac", "wav"])
def test_any_format_a_service_answers_becomes_48_khz_mono(response_format: str) -> None:
    pcm = decode(tone(1.5, response_format))
    assert len(pcm) / 2 / RATE == pytest.approx(1.5, abs=0.1)


def test_raw_pcm_at_its_rate_becomes_an_ogg_opus_note_as_long_as_it() -> None:
    note = voice_note(decode(tone_pcm(2.0, SPEECH_RATE), SPEECH_RATE))
    found = probe(note.data)
    assert (found.container, found.codec, found.rate, found.channels) == ("ogg", "opus", 48000, 1)
    assert found.duration_s == pytest.approx(2.0, abs=0.03) and note.duration_s == 2.0
    assert len(note.waveform) == 20  # one point a tenth of a second


def test_the_waveform_has_at_most_256_points_and_follows_the_loudness() -> None:
    long = decode(tone_pcm(40.0, 8000), 8000)
    assert len(waveform(long)) == 256
    quiet_then_loud = b"\0\0" * RATE + decode(tone_pcm(1.0, 8000), 8000)
    points = waveform(quiet_then_loud)
    assert len(points) == 20 and max(points[:9]) == 0 and min(points[11:]) > 100


@pytest.mark.parametrize("junk", [b"", b"<html>502 Bad Gateway</html>", b"RIFF\0\0\0\0WAVEjunk"])
def test_what_is_no_audio_is_a_speech_error(junk: bytes) -> None:
    with pytest.raises(SpeechError, match="speech service"):
        decode(junk)
