"""A soul's `voice:` block is checked when it names a provider: one line names
the bad field; without a provider (or `none`) it is kept as written."""

from __future__ import annotations

from typing import Any

import pytest

from bot.errors import SoulLoadError
from bot.soul.persona import persona_from_fields

MOODS = {"allowedMoods": ["calm", "stormy"]}


def _voice(block: Any) -> Any:
    return persona_from_fields({"voice": block, **MOODS}, "", "SOUL.md")


@pytest.mark.parametrize(
    ("block", "line"),
    [
        ({"provider": "elevenlabs"}, "voice.voiceId: expected the elevenlabs voice to speak with"),
        ({"provider": "openai"}, "voice.voice: expected the openai voice to speak with"),
        ({"provider": "elevenlabs", "voiceId": "v", "stability": 2},
         "voice.stability: expected a number in [0, 1], got 2"),
        ({"provider": "elevenlabs", "voiceId": "v", "stabilty": 0.2},
         "voice.stabilty: unknown key (did you mean 'stability'?)"),
        ({"provider": "openai", "voice": "nova", "style": 0.5},
         "voice.style: only provider elevenlabs takes it"),
        ({"provider": "openai", "voiceId": "v"},
         "voice.voiceId: is ElevenLabs'; provider openai takes `voice`"),
        ({"provider": "elevenlabs", "voiceId": "v", "speed": 2.0},
         "voice.speed: expected a number in [0.7, 1.2] for elevenlabs, got 2.0"),
        ({"provider": "polly", "voiceId": "v"},
         "voice.provider: expected one of elevenlabs, openai, got 'polly'"),
        ({"provider": "elevenlabs", "voiceId": "v", "moods": {"giddy": {"style": 1}}},
         "voice.moods.giddy: is not one of allowedMoods (calm, stormy)"),
        ({"provider": "elevenlabs", "voiceId": "v", "moods": {"calm": {"voice": "nova"}}},
         "voice.moods.calm.voice: is OpenAI's; provider elevenlabs takes `voiceId`"),
    ],
)  # fmt: skip
def test_a_bad_field_is_one_line_naming_it(block: dict[str, Any], line: str) -> None:
    with pytest.raises(SoulLoadError) as info:
        _voice(block)
    assert str(info.value) == f"SOUL.md: {line}"


def test_the_seeds_block_is_a_voice_and_moods_override_it() -> None:
    block = {
        "provider": "elevenlabs", "voiceId": "rachel-warm", "stability": 0.5, "style": 0.2,
        "moods": {"stormy": {"stability": 0.1, "style": 0.9}, "calm": {"voiceId": "soft-one"}},
    }  # fmt: skip
    voice = _voice(block).speech()
    assert voice is not None and voice.provider == "elevenlabs"
    assert voice.settings(None).voice_id == "rachel-warm"
    stormy = voice.settings("stormy")
    assert (stormy.voice_id, stormy.stability, stormy.style) == ("rachel-warm", 0.1, 0.9)
    calm = voice.settings("calm")
    assert (calm.voice_id, calm.stability) == ("soft-one", 0.5)
    assert voice.settings("unknown") == voice.settings(None)


@pytest.mark.parametrize(
    "block", [{"provider": "none", "style": "soft, unhurried"}, {"voiceId": "v"}, None]
)
def test_without_a_provider_the_block_is_kept_unchecked(block: dict[str, Any] | None) -> None:
    persona = _voice(block)
    assert persona.voice == block and persona.speech() is None
