from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import SoulbotError
from bot.soul.frontmatter import split_front_matter
from bot.soul.loader import load_soul
from bot.soul.persona import FRONT_MATTER_FIELDS, Persona
from bot.soul.workspace import create_workspace


def test_init_creates_a_workspace_that_loads(tmp_path: Path) -> None:
    folder = create_workspace(tmp_path, "Luna")
    for name in (
        "SOUL.md",
        "STYLE.md",
        "IDENTITY.md",
        "AGENTS.md",
        "memory/index.md",
        "memory/.meta/index.json",
        "examples/good-outputs.md",
        "examples/bad-outputs.md",
    ):
        assert (folder / name).is_file(), name
    assert (folder / "memory" / "index.md").read_text() == "# Memory Index\n"
    soul = load_soul(folder)
    assert soul.id == "luna"
    assert soul.name == "Luna"
    assert soul.warnings == ()
    assert "You are Luna." in soul.persona.body


def test_init_front_matter_shows_every_field_with_a_comment(tmp_path: Path) -> None:
    text = (create_workspace(tmp_path, "luna") / "SOUL.md").read_text()
    head = split_front_matter(text, "SOUL.md")
    assert set(head.fields) == set(FRONT_MATTER_FIELDS)
    lines = text.split("---\n")[1].splitlines()
    for field in FRONT_MATTER_FIELDS:
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{field}:"))
        assert lines[at - 1].startswith("#"), f"{field} has no comment above it"


def test_init_from_a_persona(tmp_path: Path) -> None:
    persona = Persona(name="Old", agentId="old-bot", body="Legacy prompt")
    folder = create_workspace(tmp_path, "old", persona)
    soul = load_soul(folder)
    assert (soul.id, soul.persona.body) == ("old-bot", "Legacy prompt")
    assert (folder / "STYLE.md").exists()


@pytest.mark.parametrize("name", ["", " ", "../..", "---", "日本"])
def test_init_refuses_bad_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(SoulbotError, match="cannot name a workspace"):
        create_workspace(tmp_path, name)


def test_init_refuses_an_existing_folder(tmp_path: Path) -> None:
    (tmp_path / "luna").mkdir()
    (tmp_path / "luna" / "SOUL.md").write_text("mine")
    with pytest.raises(SoulbotError, match="already exists"):
        create_workspace(tmp_path, "luna")
    assert (tmp_path / "luna" / "SOUL.md").read_text() == "mine"
