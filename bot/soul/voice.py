"""A soul's `voice:` block, checked: which speech service speaks its answers,
in which voice, with which settings, and what each mood changes.

```yaml
voice:
  provider: elevenlabs        # elevenlabs | openai | none
  voiceId: rachel-warm        # ElevenLabs' voice id (provider: elevenlabs)
  stability: 0.5              # ElevenLabs' voice settings, each in [0, 1]
  similarity_boost: 0.75
  style: 0.2
  use_speaker_boost: true
  speed: 1.0                  # ElevenLabs 0.7-1.2, OpenAI 0.25-4.0
  moods:
    stormy: {stability: 0.2, style: 0.8}
    calm: {voiceId: another-voice}
```

OpenAI-compatible services take `voice: nova` (a voice name) and `speed`
only. With `provider: none`, or none given, the block is kept as it is and not
checked: nothing is spoken (souls written before voice out carry free-form
fields there, `style: soft, unhurried`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

SPEED = {"elevenlabs": (0.7, 1.2), "openai": (0.25, 4.0)}
_ELEVENLABS_ONLY = ("stability", "similarity_boost", "style", "use_speaker_boost")


def _unit_interval(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise PydanticCustomError("unit_interval", "expected a number in [0, 1]")
    return float(value)


def _name(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise PydanticCustomError("text", "expected a non-empty string")
    return value.strip()


Level = Annotated[float, BeforeValidator(_unit_interval)]
Name = Annotated[str, BeforeValidator(_name)]


class VoiceSettings(BaseModel):
    """The voice and its settings; a mood's override sets some of them."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    voice_id: Name | None = Field(None, alias="voiceId")
    voice: Name | None = None
    stability: Level | None = None
    similarity_boost: Level | None = None
    style: Level | None = None
    use_speaker_boost: bool | None = None
    speed: float | None = None

    def over(self, base: VoiceSettings) -> VoiceSettings:
        """`base` with what this sets put over it."""
        return base.model_copy(update=self.model_dump(exclude_none=True))

    def elevenlabs_settings(self) -> dict[str, Any]:
        """ElevenLabs' `voice_settings`: those that are set."""
        chosen = {name: getattr(self, name) for name in (*_ELEVENLABS_ONLY, "speed")}
        return {name: value for name, value in chosen.items() if value is not None}


class SoulVoice(VoiceSettings):
    """A `voice:` block with a provider; see the module docstring."""

    provider: Literal["elevenlabs", "openai"]
    moods: dict[Name, VoiceSettings] = {}

    @model_validator(mode="after")
    def _fits_the_provider(self) -> SoulVoice:
        for where, settings in [("", self), *((f"moods.{m}.", s) for m, s in self.moods.items())]:
            _check(self.provider, where, settings)
        named = "voice_id" if self.provider == "elevenlabs" else "voice"
        if getattr(self, named) is None:
            key = "voiceId" if named == "voice_id" else "voice"
            raise ValueError(f"{key}: expected the {self.provider} voice to speak with")
        return self

    def settings(self, mood: str | None) -> VoiceSettings:
        """The voice and settings to speak with in `mood` (None: the block's own)."""
        base = VoiceSettings.model_validate(self.model_dump(exclude={"provider", "moods"}))
        override = self.moods.get(mood) if mood is not None else None
        return override.over(base) if override is not None else base


def _check(provider: str, where: str, settings: VoiceSettings) -> None:
    """Raise ValueError for a setting that `provider` does not take."""
    if provider == "openai":
        if settings.voice_id is not None:
            raise ValueError(f"{where}voiceId: is ElevenLabs'; provider openai takes `voice`")
        for name in _ELEVENLABS_ONLY:
            if getattr(settings, name) is not None:
                raise ValueError(f"{where}{name}: only provider elevenlabs takes it")
    elif settings.voice is not None:
        raise ValueError(f"{where}voice: is OpenAI's; provider elevenlabs takes `voiceId`")
    low, high = SPEED[provider]
    if settings.speed is not None and not low <= settings.speed <= high:
        raise ValueError(f"{where}speed: expected a number in [{low}, {high}] for {provider}, "
                         f"got {settings.speed}")  # fmt: skip


def speaks(block: dict[str, Any] | None) -> bool:
    """Whether a `voice:` block names a provider (else it is kept, unchecked)."""
    return isinstance(block, dict) and block.get("provider") not in (None, "none")
