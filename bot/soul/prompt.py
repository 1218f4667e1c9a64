"""The system prompt of a soul, as an ordered list of blocks.

Order (seeds/SOUL_FILES.md, "Loading Order at Agent Boot"): the SOUL.md body;
`## Style` and STYLE.md; `## Long-Term Memory (index)` and memory/index.md when
it holds more than its heading; the HEXACO trait paragraph; the hard limits,
always last. Blocks are kept apart so the runtime can put cache breakpoints
between them. IDENTITY.md and AGENTS.md are not part of the prompt.

The mood (`mood_block`) is not one of them: it belongs to a conversation (the
soul's `defaultMood`, or the one it moved to with `set_mood`), so the turn puts
it first among the conversation's own blocks, right after the hard limits and
past the breakpoint that ends the soul's (bot/chat/turn.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot import prompts
from bot.soul.files import INDEX_HEADING
from bot.soul.loader import Soul
from bot.soul.persona import Hexaco, Persona

STYLE_HEADING = "## Style"
INDEX_BLOCK_HEADING = "## Long-Term Memory (index)"
TRAITS_HEADING = "## Personality"
LIMITS_HEADING = "## Hard Limits"

_TRAIT_WORDS = {
    "honesty": ("honesty-humility", "sincere, fair, modest", "shrewd, status-seeking"),
    "emotionality": ("emotionality", "sensitive, empathic, anxious at times", "steady, detached"),
    "extraversion": ("extraversion", "outgoing, lively, bold", "reserved, quiet"),
    "agreeableness": ("agreeableness", "patient, forgiving, gentle", "critical, stubborn"),
    "conscientiousness": (
        "conscientiousness",
        "organised, careful, thorough",
        "spontaneous, loose",
    ),
    "openness": ("openness", "curious, imaginative, unconventional", "conventional, practical"),
}


@dataclass(frozen=True)
class PromptBlock:
    """One system prompt block: `kind` says where it came from."""

    kind: str
    text: str


def trait_paragraph(hexaco: Hexaco) -> str | None:
    """The HEXACO scores as prose, or None when no trait is set."""
    scores = hexaco.scores()
    if not scores:
        return None
    parts = []
    for trait, score in scores.items():
        label, high, low = _TRAIT_WORDS[trait]
        if score >= 0.65:
            parts.append(f"{label} {score:.2f}: high ({high})")
        elif score <= 0.35:
            parts.append(f"{label} {score:.2f}: low ({low})")
        else:
            parts.append(f"{label} {score:.2f}: moderate")
    return (
        f"{TRAITS_HEADING}\nYour HEXACO personality traits (0 = low, 1 = high); "
        "let them colour how you speak and decide:\n" + "\n".join(f"- {p}" for p in parts)
    )


def _index_body(index: str | None) -> str | None:
    if index is None:
        return None
    text = index.strip()
    if text.startswith(INDEX_HEADING):
        text = text[len(INDEX_HEADING) :].strip()
    return text or None


def system_blocks(soul: Soul) -> list[PromptBlock]:
    """The soul's system prompt blocks, in order; empty parts are left out."""
    persona = soul.persona
    blocks = []
    if persona.body.strip():
        blocks.append(PromptBlock("soul", persona.body.strip()))
    if soul.style and soul.style.strip():
        blocks.append(PromptBlock("style", f"{STYLE_HEADING}\n{soul.style.strip()}"))
    index = _index_body(soul.wiki_index)
    if index:
        blocks.append(PromptBlock("memory_index", f"{INDEX_BLOCK_HEADING}\n{index}"))
    traits = trait_paragraph(persona.hexaco) if persona.hexaco else None
    if traits:
        blocks.append(PromptBlock("traits", traits))
    if persona.hard_limits:
        limits = "\n".join(f"- {limit}" for limit in persona.hard_limits)
        blocks.append(
            PromptBlock(
                "hard_limits", f"{LIMITS_HEADING}\nThese hold above everything else:\n{limits}"
            )
        )
    return blocks


def current_mood(persona: Persona, chosen: str | None) -> str | None:
    """The mood a conversation is in: `chosen` (its `set_mood`) while it is one
    of the persona's allowedMoods, else its defaultMood (None without one)."""
    if chosen is not None and chosen in persona.allowed_moods:
        return chosen
    return persona.default_mood


def mood_block(persona: Persona, mood: str | None) -> str | None:
    """The system block of a conversation in `mood` (`current_mood`): the mood,
    and the moods the set_mood tool moves between; None for a persona with
    neither a mood nor allowedMoods."""
    if mood is None and not persona.allowed_moods:
        return None
    now = prompts.MOOD_NOW.format(mood=mood) if mood else prompts.MOOD_NONE
    lines = [prompts.MOOD_HEADING, now]
    if persona.allowed_moods:
        lines.append(prompts.MOOD_MAY_CHANGE.format(moods=", ".join(persona.allowed_moods)))
    return "\n".join(lines)


def estimate_tokens(text: str) -> int:
    """A rough token count (characters / 4, rounded up)."""
    return -(-len(text) // 4)
