"""SOUL.md regions: parsing, META fields and parameters, the loader on such files."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import RegionError, SoulLoadError
from bot.soul.loader import load_soul
from bot.soul.prompt import system_blocks
from bot.soul.regions import (
    AUTOBIOGRAPHY,
    CORE,
    META,
    HeartbeatParams,
    meta_fields,
    parse_regions,
    set_meta,
    strip_markers,
)

SOUL = (
    "# SOUL.md\n\n<!-- SOUL_META -->\n- name: twinkle\n- version: 0.3.0\n\n"
    "<!-- SOUL_CORE -->\n## Core\nKind.\n\n## Rules\n1. Be polite.\n\n"
    "  <!--   SOUL_MEMORY -->  \n## Memory\n- none yet\n\n"
    "<!-- SOUL_AUTOBIOGRAPHY -->\n## Autobiography\n"
)


def test_regions_run_to_the_next_marker_and_render_back_byte_for_byte() -> None:
    regions = parse_regions(SOUL)
    assert regions is not None
    assert regions.preamble == "# SOUL.md\n\n"
    assert [name for _, name, _ in regions.parts] == [
        "SOUL_META", "SOUL_CORE", "SOUL_MEMORY", "SOUL_AUTOBIOGRAPHY",
    ]  # fmt: skip
    assert regions.get(CORE) == "## Core\nKind.\n\n## Rules\n1. Be polite.\n\n"
    assert regions.get(AUTOBIOGRAPHY) == "## Autobiography\n"
    assert regions.render() == SOUL
    with_crlf = SOUL.replace("\n", "\r\n")
    assert parse_regions(with_crlf).render() == with_crlf  # type: ignore[union-attr]


def test_no_marker_means_no_regions_and_bad_markers_are_errors() -> None:
    assert parse_regions("# Plain soul\n<!-- a comment -->\n") is None
    with pytest.raises(RegionError, match=r"line 3: unknown region marker SOUL_HEART"):
        parse_regions("x\n\n<!-- SOUL_HEART -->\n")
    with pytest.raises(RegionError, match=r"line 2: the SOUL_CORE marker appears a second time"):
        parse_regions("<!-- SOUL_CORE -->\n<!-- SOUL_CORE -->\n")


# Separators that str.splitlines() breaks on but a file's "\n" line ends do not.
EXOTIC = ["\u2028", "\u2029", "\x85", "\x1c", "\x1d", "\x1e", "\v", "\f", "\r"]


@pytest.mark.parametrize("sep", EXOTIC, ids=lambda c: f"U+{ord(c):04X}")
def test_only_a_line_end_ends_a_line(sep: str) -> None:
    text = f"<!-- SOUL_META -->\n- version: 1{sep}- epoch: 9\n- x: a{sep}<!-- SOUL_CORE -->\n"
    regions = parse_regions(text)
    assert regions is not None and [name for _, name, _ in regions.parts] == [META]
    assert regions.render() == text
    assert "epoch" not in meta_fields(regions.get(META) or "")
    assert strip_markers(f"a{sep}<!-- SOUL_CORE -->\n") == f"a{sep}<!-- SOUL_CORE -->\n"
    body = f"- version: 1{sep}- name: forged\n"
    assert set_meta(body, {"name": "twinkle"}) == body + "- name: twinkle\n"


def test_markers_stay_out_of_the_prompt_text() -> None:
    text = strip_markers(SOUL)
    assert "SOUL_" not in text and "## Rules\n1. Be polite." in text
    assert strip_markers("keep <!-- SOUL_CORE --> inline\n") == "keep <!-- SOUL_CORE --> inline\n"


def test_meta_fields_and_set_meta() -> None:
    body = parse_regions(SOUL).get(META)  # type: ignore[union-attr]
    assert meta_fields(body or "") == {"name": "twinkle", "version": "0.3.0"}
    changed = set_meta(body or "", {"version": "0.3.1", "update_count": "1"})
    assert changed == "- name: twinkle\n- version: 0.3.1\n- update_count: 1\n\n"
    assert set_meta("\n", {"epoch": "1"}) == "\n- epoch: 1\n"


def test_heartbeat_parameters_have_defaults_and_are_checked() -> None:
    assert HeartbeatParams.from_meta({}) == HeartbeatParams(50, 10, 5, 0.5)
    assert HeartbeatParams.from_meta({"min_importance": "0.7"}).min_importance == 0.7
    with pytest.raises(RegionError, match="min_conversation_tokens: expected a number"):
        HeartbeatParams.from_meta({"min_conversation_tokens": "lots"})
    with pytest.raises(RegionError, match=r"min_importance: expected 0.0 to 1.0, got 2.0"):
        HeartbeatParams.from_meta({"min_importance": "2"})
    with pytest.raises(RegionError, match="summarize_oldest must not be more"):
        HeartbeatParams.from_meta({"max_autobiography_entries": "4", "summarize_oldest": "5"})


def write_soul(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "twinkle"
    folder.mkdir()
    (folder / "SOUL.md").write_text(text)
    return folder


def test_the_loader_reads_a_soul_with_regions(tmp_path: Path) -> None:
    soul = load_soul(write_soul(tmp_path, SOUL))
    assert soul.id == "twinkle"  # named in META: no front matter needed
    assert soul.heartbeat == HeartbeatParams()
    [block, *_] = system_blocks(soul)
    assert "<!--" not in block.text and "Be polite." in block.text


def test_the_loader_names_a_bad_region_or_parameter(tmp_path: Path) -> None:
    folder = write_soul(tmp_path, SOUL.replace("- version: 0.3.0", "- min_importance: high"))
    with pytest.raises(SoulLoadError, match=r"SOUL.md: SOUL_META: min_importance: expected"):
        load_soul(folder)
    (folder / "SOUL.md").write_text(SOUL + "<!-- SOUL_META -->\n")
    with pytest.raises(SoulLoadError, match=r"SOUL.md: line 20: the SOUL_META marker"):
        load_soul(folder)


def test_line_numbers_count_the_front_matter(tmp_path: Path) -> None:
    folder = write_soul(tmp_path, "---\nname: T\n---\n<!-- SOUL_X -->\n")
    with pytest.raises(SoulLoadError, match=r"SOUL.md: line 4: unknown region marker SOUL_X"):
        load_soul(folder)


def test_a_soul_without_regions_has_no_heartbeat(tmp_path: Path) -> None:
    soul = load_soul(write_soul(tmp_path, "---\nname: Plain\n---\nJust prose.\n"))
    assert soul.heartbeat is None
