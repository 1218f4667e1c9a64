"""The persona a SOUL.md front matter describes, its id, and its way back to markdown.

`Persona` validates the typed fields (errors name the field, `hexaco.openness:
expected a number in [0, 1], got 'high'`); `soul_id` derives the id that keys a
soul's memory; `render_soul_markdown` writes a persona back as SOUL.md, and
`persona_from_legacy` reads a legacy JSON persona definition.
`unknown_field_warnings` words the warning for fields it does not know, with the
known field a name is close to (`defaultMod` -> did you mean 'defaultMood'?).
"""

from __future__ import annotations

import difflib
import hashlib
import re
import unicodedata
from collections.abc import Iterable
from typing import Annotated, Any

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from bot.config.validation import format_errors
from bot.errors import SoulLoadError
from bot.soul.voice import SoulVoice, speaks

HEXACO_TRAITS = (
    "honesty", "emotionality", "extraversion", "agreeableness", "conscientiousness", "openness",
)  # fmt: skip


def _unit_interval(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise PydanticCustomError("unit_interval", "expected a number in [0, 1]")
    return float(value)


def _text(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise PydanticCustomError("text", "expected a non-empty string")
    return value


SOUL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _agent_id(value: Any) -> Any:
    if not isinstance(value, str) or not SOUL_ID.match(value):
        raise PydanticCustomError(
            "agent_id",
            "expected an id of at most 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
        )
    return value


Trait = Annotated[float, BeforeValidator(_unit_interval)]
Text = Annotated[str, BeforeValidator(_text)]


class Hexaco(BaseModel):
    """The six HEXACO traits, each in [0, 1]. `honesty` is read from `honesty`
    or `honestyHumility`; `honesty` wins when both are set."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    honesty: Trait | None = Field(
        None,
        validation_alias=AliasChoices("honesty", "honestyHumility"),
        serialization_alias="honestyHumility",
    )
    emotionality: Trait | None = None
    extraversion: Trait | None = None
    agreeableness: Trait | None = None
    conscientiousness: Trait | None = None
    openness: Trait | None = None

    @model_validator(mode="before")
    @classmethod
    def _honesty_wins(cls, data: Any) -> Any:
        if isinstance(data, dict) and "honesty" in data:
            return {k: v for k, v in data.items() if k != "honestyHumility"}
        return data

    def scores(self) -> dict[str, float]:
        """The traits that are set, in HEXACO order."""
        values = {name: getattr(self, name) for name in HEXACO_TRAITS}
        return {name: value for name, value in values.items() if value is not None}


class Persona(BaseModel):
    """A soul's front matter fields and its body (the prose of SOUL.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: Text | None = None
    agent_id: Annotated[str, BeforeValidator(_agent_id)] | None = Field(None, alias="agentId")
    role: Text | None = None
    hexaco: Hexaco | None = None
    voice: dict[str, Any] | None = None
    default_mood: Text | None = Field(None, alias="defaultMood")
    allowed_moods: tuple[Text, ...] = Field((), alias="allowedMoods")
    hard_limits: tuple[Text, ...] = Field((), alias="hardLimits")
    avatar: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    body: str = ""

    @model_validator(mode="after")
    def _mood_allowed(self) -> Persona:
        if self.allowed_moods and self.default_mood and self.default_mood not in self.allowed_moods:
            raise ValueError(
                f"defaultMood: {self.default_mood!r} is not one of allowedMoods "
                f"({', '.join(self.allowed_moods)})"
            )
        return self

    @model_validator(mode="after")
    def _voice_fits(self) -> Persona:
        try:
            voice = self.speech()
        except ValidationError as exc:
            lines = format_errors(exc, SoulVoice)
            raise ValueError("; ".join(f"voice.{line}" for line in lines)) from None
        if voice is not None and self.allowed_moods:
            for mood in voice.moods:
                if mood not in self.allowed_moods:
                    raise ValueError(f"voice.moods.{mood}: is not one of allowedMoods "
                                     f"({', '.join(self.allowed_moods)})")  # fmt: skip
        return self

    def speech(self) -> SoulVoice | None:
        """The `voice:` block checked, when it names a provider (see
        bot/soul/voice.py); None when it names none, or `none`: nothing is
        spoken. Raises ValidationError for a block that does not fit."""
        return SoulVoice.model_validate(self.voice) if speaks(self.voice) else None


FRONT_MATTER_FIELDS = tuple(
    (field.alias or name) for name, field in Persona.model_fields.items() if name != "body"
)


def unknown_field_warnings(fields: Iterable[str], source: str) -> list[str]:
    """One warning per name of `fields` that is no front matter field (it is
    ignored), with the known field it is close to, if any: `SOUL.md: unknown field
    'defaultMod' (did you mean 'defaultMood'?), ignored`."""
    warnings = []
    for name in sorted(set(fields) - set(FRONT_MATTER_FIELDS)):
        close = difflib.get_close_matches(name, FRONT_MATTER_FIELDS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        warnings.append(f"{source}: unknown field '{name}'{hint}, ignored")
    return warnings


def persona_from_fields(fields: dict[str, Any], body: str, source: str) -> Persona:
    """Validate front matter `fields` (unknown ones already removed) and `body`.

    Raises SoulLoadError naming `source` and every bad field.
    """
    try:
        return Persona.model_validate({**fields, "body": body})
    except ValidationError as exc:
        lines = format_errors(exc, Persona)
        raise SoulLoadError("\n".join(f"{source}: {line}" for line in lines)) from None


def slugify(name: str) -> str:
    """`Zoë the Bold` -> `zoe-the-bold`; only Latin letters and digits survive."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")


def soul_id(persona: Persona) -> str | None:
    """`agentId`, else the slug of `name`, else `agent-` and a stable hash of the
    name (for a name with no Latin letters or digits); None without either."""
    if persona.agent_id:
        return persona.agent_id
    if not persona.name:
        return None
    slug = slugify(persona.name)[:64].strip("-")
    if slug:
        return slug
    return "agent-" + hashlib.sha256(persona.name.encode()).hexdigest()[:10]


def render_soul_markdown(persona: Persona) -> str:
    """SOUL.md text for `persona`: YAML front matter, then the body.

    A persona with no fields has no front matter, unless its body opens with
    three dashes not followed by a fourth, which a loader would read as front
    matter: then an empty block (two `---` lines) goes in front of it.
    """
    fields = persona.model_dump(by_alias=True, exclude_none=True, exclude={"body"})
    fields = {key: value for key, value in fields.items() if value != ()}
    if fields.get("hexaco") is not None:
        fields["hexaco"] = {k: v for k, v in fields["hexaco"].items() if v is not None}
    for key in ("allowedMoods", "hardLimits"):
        if key in fields:
            fields[key] = list(fields[key])
    if fields:
        dumped = yaml.safe_dump(fields, sort_keys=False, allow_unicode=True, width=1000)
        return f"---\n{dumped}---\n{persona.body}"
    if persona.body.startswith("---") and not persona.body.startswith("----"):
        return f"---\n---\n{persona.body}"
    return persona.body


def _legacy_prompt(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("template"), str):
        return str(value["template"])
    if isinstance(value, list):
        parts = [p for p in value if isinstance(p, dict) and isinstance(p.get("content"), str)]
        parts.sort(key=lambda p: p.get("priority", 0) if isinstance(p.get("priority"), int) else 0)
        return "\n\n".join(str(p["content"]) for p in parts)
    return ""


def persona_from_legacy(data: dict[str, Any], source: str) -> Persona:
    """A Persona from a legacy JSON persona definition.

    Read: `id` (-> agentId), `name`, `description` (-> role), `personalityTraits`
    (the HEXACO keys among them), `voiceConfig` (-> voice), `avatarConfig`
    (-> avatar), `moodAdaptation.defaultMood` / `.allowedMoods`, `hardLimits`,
    `metadata`, and `baseSystemPrompt` (a string, a `{template}` object or a list
    of `{content, priority}` parts) as the body. Other keys are not carried over.
    Raises SoulLoadError naming `source` and the field.
    """
    traits = data.get("personalityTraits")
    hexaco = None
    if isinstance(traits, dict):
        keys = {*HEXACO_TRAITS, "honestyHumility"}
        hexaco = {k: v for k, v in traits.items() if k in keys} or None
    mood = data.get("moodAdaptation")
    if not isinstance(mood, dict):
        mood = {}
    fields = {
        "agentId": data.get("id"),
        "name": data.get("name"),
        "role": data.get("description"),
        "hexaco": hexaco,
        "voice": data.get("voiceConfig"),
        "defaultMood": mood.get("defaultMood"),
        "allowedMoods": mood.get("allowedMoods"),
        "hardLimits": data.get("hardLimits"),
        "avatar": data.get("avatarConfig"),
        "metadata": data.get("metadata"),
    }
    present = {key: value for key, value in fields.items() if value is not None}
    return persona_from_fields(present, _legacy_prompt(data.get("baseSystemPrompt")), source)
