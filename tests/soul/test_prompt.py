from __future__ import annotations

from bot.soul.files import MIGRATED_END, MIGRATED_START
from bot.soul.loader import load_soul
from bot.soul.persona import Hexaco
from bot.soul.prompt import estimate_tokens, system_blocks, trait_paragraph
from tests.soul.conftest import MakeSoul

FULL = """---
name: Aria
hexaco:
  honestyHumility: 0.9
  extraversion: 0.2
  openness: 0.5
hardLimits:
  - Never share pricing
  - Always escalate refunds
---
You are Aria.
"""


def test_block_order_and_content(make_soul: MakeSoul) -> None:
    folder = make_soul(
        soul=FULL,
        files={
            "STYLE.md": "Be brief.\n",
            "IDENTITY.md": "IDENTITY-CARD",
            "AGENTS.md": "AGENTS-RULES",
            "memory/index.md": "# Memory Index\n\n## Entities\n- [[entities/bob]] Notes on bob\n",
        },
    )
    blocks = system_blocks(load_soul(folder))
    assert [b.kind for b in blocks] == ["soul", "style", "memory_index", "traits", "hard_limits"]
    assert blocks[0].text == "You are Aria."
    assert blocks[1].text == "## Style\nBe brief."
    assert (
        blocks[2].text
        == "## Long-Term Memory (index)\n## Entities\n- [[entities/bob]] Notes on bob"
    )
    assert blocks[4].text.startswith("## Hard Limits\n")
    assert blocks[4].text.endswith("- Never share pricing\n- Always escalate refunds")
    whole = "\n".join(b.text for b in blocks)
    assert "IDENTITY-CARD" not in whole
    assert "AGENTS-RULES" not in whole


def test_an_index_with_only_its_heading_stays_out(make_soul: MakeSoul) -> None:
    blocks = system_blocks(load_soul(make_soul(soul=FULL)))
    assert [b.kind for b in blocks] == ["soul", "traits", "hard_limits"]


def test_hard_limits_are_last_even_with_nothing_else(make_soul: MakeSoul) -> None:
    soul = load_soul(make_soul(soul="---\nname: A\nhardLimits: [Be kind]\n---\n"))
    assert [b.kind for b in system_blocks(soul)] == ["hard_limits"]


def test_the_migration_end_marker_never_reaches_the_prompt(make_soul: MakeSoul) -> None:
    folder = make_soul(soul=FULL, files={"MEMORY.md": "Bob likes tea.\n"})
    soul = load_soul(folder)
    assert MIGRATED_END in (folder / "memory" / "index.md").read_text()
    index_block = next(b for b in system_blocks(soul) if b.kind == "memory_index")
    assert "Bob likes tea." in index_block.text
    assert MIGRATED_START in index_block.text
    assert MIGRATED_END not in index_block.text


def test_trait_paragraph_levels() -> None:
    text = trait_paragraph(Hexaco(honesty=0.9, extraversion=0.2, openness=0.5))
    assert text is not None
    lines = text.splitlines()
    assert lines[0] == "## Personality"
    assert "- honesty-humility 0.90: high (sincere, fair, modest)" in lines
    assert "- extraversion 0.20: low (reserved, quiet)" in lines
    assert "- openness 0.50: moderate" in lines
    assert trait_paragraph(Hexaco()) is None


def test_estimate_tokens_rounds_up() -> None:
    assert [estimate_tokens(t) for t in ("", "a", "abcd", "abcde")] == [0, 1, 1, 2]
