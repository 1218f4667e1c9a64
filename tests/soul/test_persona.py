from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.errors import SoulLoadError
from bot.soul.frontmatter import split_front_matter
from bot.soul.loader import parse_soul_text
from bot.soul.persona import (
    Hexaco,
    Persona,
    persona_from_fields,
    persona_from_legacy,
    render_soul_markdown,
    slugify,
    soul_id,
)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": 3}, "S: name: expected a non-empty string, got 3"),
        ({"name": "  "}, "S: name: expected a non-empty string, got '  '"),
        ({"role": ["a"]}, "S: role: expected a non-empty string, got a list"),
        ({"defaultMood": 1.5}, "S: defaultMood: expected a non-empty string, got 1.5"),
        ({"agentId": "../x"}, "S: agentId: expected an id of at most 64 letters"),
        ({"agentId": "a" * 65}, "S: agentId: expected an id"),
        ({"allowedMoods": "happy"}, "S: allowedMoods: expected a list, got 'happy'"),
        ({"allowedMoods": ["ok", 2]}, "S: allowedMoods[1]: expected a non-empty string, got 2"),
        ({"hardLimits": {"a": 1}}, "S: hardLimits: expected a list, got a mapping"),
        (
            {"hexaco": {"openness": "high"}},
            "S: hexaco.openness: expected a number in [0, 1], got 'high'",
        ),
        ({"hexaco": {"openness": 1.5}}, "S: hexaco.openness: expected a number in [0, 1], got 1.5"),
        (
            {"hexaco": {"openness": -0.1}},
            "S: hexaco.openness: expected a number in [0, 1], got -0.1",
        ),
        (
            {"hexaco": {"openness": True}},
            "S: hexaco.openness: expected a number in [0, 1], got True",
        ),
        (
            {"hexaco": {"honestyHumility": "x"}},
            "S: hexaco.honestyHumility: expected a number in [0, 1]",
        ),
        ({"hexaco": {"opennes": 0.5}}, "S: hexaco.opennes: unknown key (did you mean 'openness'?)"),
        ({"hexaco": [0.1]}, "S: hexaco: expected a mapping, got a list"),
        ({"voice": "rachel"}, "S: voice: expected a mapping, got 'rachel'"),
        ({"avatar": ["a"]}, "S: avatar: expected a mapping, got a list"),
        ({"metadata": 5}, "S: metadata: expected a mapping, got 5"),
        (
            {"allowedMoods": ["calm"], "defaultMood": "angry"},
            "S: defaultMood: 'angry' is not one of allowedMoods (calm)",
        ),
    ],
)
def test_wrong_types_name_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(SoulLoadError) as info:
        persona_from_fields(fields, "", "S")
    assert message in str(info.value)


def test_every_bad_field_is_reported_at_once() -> None:
    with pytest.raises(SoulLoadError) as info:
        persona_from_fields({"name": 1, "role": 2, "hexaco": {"openness": 9}}, "", "S")
    assert len(str(info.value).splitlines()) == 3


def test_honesty_wins_over_honesty_humility() -> None:
    both = Hexaco.model_validate({"honestyHumility": 0.2, "honesty": 0.9})
    assert both.honesty == 0.9
    assert Hexaco.model_validate({"honestyHumility": 0.3}).honesty == 0.3
    assert Hexaco.model_validate({"honesty": 0.4}).honesty == 0.4


def test_integer_traits_are_numbers() -> None:
    assert Hexaco.model_validate({"openness": 1, "emotionality": 0}).scores() == {
        "emotionality": 0.0,
        "openness": 1.0,
    }


@pytest.mark.parametrize(
    ("persona", "expected"),
    [
        (Persona(agentId="support-bot", name="Aria"), "support-bot"),
        (Persona(name="Aria the Bold!"), "aria-the-bold"),
        (Persona(name="Zoë Ünal"), "zoe-unal"),
        (Persona(name="R2-D2"), "r2-d2"),
        (Persona(agentId="x1"), "x1"),
        (Persona(), None),
    ],
)
def test_soul_id(persona: Persona, expected: str | None) -> None:
    assert soul_id(persona) == expected


def test_soul_id_of_a_name_without_latin_letters_is_a_stable_hash() -> None:
    first = soul_id(Persona(name="小明"))
    assert first is not None and first.startswith("agent-") and len(first) == len("agent-") + 10
    assert soul_id(Persona(name="小明")) == first
    assert soul_id(Persona(name="小红")) != first
    assert soul_id(Persona(name="!!!")) is not None


def test_slugify_keeps_only_latin_letters_and_digits() -> None:
    assert slugify("  Hello,  World 2 ") == "hello-world-2"
    assert slugify("Привет") == ""


FULL = Persona(
    name="Aria",
    agentId="support-bot",
    role="Customer support agent for Meridian SaaS",
    hexaco=Hexaco(
        honesty=0.85,
        emotionality=0.55,
        extraversion=0.7,
        agreeableness=0.85,
        conscientiousness=0.9,
        openness=0.65,
    ),
    voice={"provider": "elevenlabs", "voiceId": "rachel-warm"},
    defaultMood="helpful_engaged",
    allowedMoods=("helpful_engaged", "empathetic", "focused"),
    hardLimits=("Never share internal pricing formulas", "Refunds over €100 need a human"),
    avatar={"style": "illustrated", "seed": 42},
    metadata={"team": "support", "tags": ["a", "b"], "nested": {"x": None}},
    body="## Who You Are\nYou are Aria.\n\n## Tone\nDirect.\n",
)


def _load(text: str) -> Persona:
    return parse_soul_text(text, "S", [])


def test_render_then_load_gives_back_every_field() -> None:
    text = render_soul_markdown(FULL)
    assert "honestyHumility: 0.85" in text
    assert _load(text) == FULL


def test_render_of_a_persona_with_no_fields_is_its_body() -> None:
    assert render_soul_markdown(Persona(body="Plain prompt.\n")) == "Plain prompt.\n"


@pytest.mark.parametrize("body", ["---\nlooks like front matter\n---\nx", "---js\nx", "---"])
def test_render_protects_a_body_that_opens_with_three_dashes(body: str) -> None:
    text = render_soul_markdown(Persona(body=body))
    assert text == f"---\n---\n{body}"
    assert _load(text).body == body


def test_render_leaves_a_body_with_four_dashes_alone() -> None:
    assert render_soul_markdown(Persona(body="----\nrule")) == "----\nrule"


_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30).filter(
    lambda s: s.strip() != ""
)
_trait = st.none() | st.floats(min_value=0, max_value=1)
_scalar = st.none() | st.booleans() | st.integers() | _text


@settings(max_examples=150, deadline=None)
@given(
    name=st.none() | _text,
    role=st.none() | _text,
    traits=st.tuples(*[_trait] * 6),
    moods=st.lists(_text, max_size=3, unique=True),
    limits=st.lists(_text, max_size=3),
    metadata=st.none() | st.dictionaries(_text, _scalar, max_size=3),
    body=st.text(max_size=80).map(lambda s: s.replace("\r", "")),
)
def test_render_load_round_trip(
    name: str | None,
    role: str | None,
    traits: tuple[float | None, ...],
    moods: list[str],
    limits: list[str],
    metadata: dict[str, Any] | None,
    body: str,
) -> None:
    names = (
        "honesty",
        "emotionality",
        "extraversion",
        "agreeableness",
        "conscientiousness",
        "openness",
    )
    persona = Persona(
        name=name,
        role=role,
        hexaco=Hexaco(**dict(zip(names, traits, strict=True))) if any(traits) else None,
        allowedMoods=tuple(moods),
        defaultMood=moods[0] if moods else None,
        hardLimits=tuple(limits),
        metadata=metadata,
        body=body,
    )
    assert _load(render_soul_markdown(persona)) == persona


def test_legacy_json_persona() -> None:
    legacy = {
        "id": "support-bot",
        "name": "Aria",
        "description": "Support agent",
        "version": "1.0.0",
        "baseSystemPrompt": [
            {"content": "second", "priority": 2},
            {"content": "first", "priority": 1},
        ],
        "personalityTraits": {"honesty": 0.8, "openness": 0.6, "humor": 0.9},
        "voiceConfig": {"voiceId": "v"},
        "avatarConfig": {"url": "a.png"},
        "moodAdaptation": {"defaultMood": "calm", "allowedMoods": ["calm", "bright"]},
        "hardLimits": ["No pricing"],
        "metadata": {"k": "v"},
        "toolIds": ["ignored"],
    }
    persona = persona_from_legacy(legacy, "legacy.json")
    assert persona.agent_id == "support-bot"
    assert persona.role == "Support agent"
    assert persona.body == "first\n\nsecond"
    assert persona.hexaco == Hexaco(honesty=0.8, openness=0.6)
    assert persona.voice == {"voiceId": "v"}
    assert persona.avatar == {"url": "a.png"}
    assert persona.allowed_moods == ("calm", "bright")
    assert _load(render_soul_markdown(persona)) == persona


def test_legacy_prompt_template_and_errors() -> None:
    persona = persona_from_legacy({"name": "A", "baseSystemPrompt": {"template": "Hi {{x}}"}}, "j")
    assert persona.body == "Hi {{x}}"
    with pytest.raises(SoulLoadError, match=r"j: hexaco.openness: expected a number in \[0, 1\]"):
        persona_from_legacy({"name": "A", "personalityTraits": {"openness": "wide"}}, "j")


def test_split_of_rendered_text_has_yaml_front_matter() -> None:
    head = split_front_matter(render_soul_markdown(FULL), "S")
    assert head.fields["agentId"] == "support-bot"
    assert head.fields["allowedMoods"] == ["helpful_engaged", "empathetic", "focused"]
