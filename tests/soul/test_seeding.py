"""The example souls are copied into a workspaces folder that holds no soul, and
never over a file that is there."""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from bot.soul.registry import SoulRegistry
from bot.soul.seeding import has_a_soul, seed_examples

SHIPPED = resources.files("bot.soul").joinpath("examples")


def shipped_files() -> dict[str, bytes]:
    """Relative path -> bytes of every file the package ships under examples/."""
    found: dict[str, bytes] = {}

    def walk(node: Traversable, prefix: str) -> None:
        for entry in node.iterdir():
            name = f"{prefix}{entry.name}"
            if entry.is_dir():
                walk(entry, name + "/")
            else:
                found[name] = entry.read_bytes()

    walk(SHIPPED, "")
    return found


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_missing_folder_is_made_with_every_example_file(tmp_path: Path) -> None:
    workspaces = tmp_path / "workspaces"
    assert seed_examples(workspaces) == ["twinkle", "wren"]
    assert files_under(workspaces) == shipped_files()
    assert "wren/SOUL.md" in shipped_files() and "twinkle/SOUL.md" in shipped_files()
    registry = SoulRegistry(workspaces)
    report = registry.reload_all()
    assert not report.failed
    assert [s.id for s in registry.all()] == ["twinkle", "wren"]


def test_without_make_a_missing_folder_stays_missing(tmp_path: Path) -> None:
    workspaces = tmp_path / "workspaces"
    assert seed_examples(workspaces, make=False) == []
    assert not workspaces.exists()


def test_an_empty_folder_gets_them_without_make(tmp_path: Path) -> None:
    (tmp_path / "workspaces").mkdir()
    assert seed_examples(tmp_path / "workspaces", make=False) == ["twinkle", "wren"]


def test_a_folder_with_a_soul_is_left_alone(tmp_path: Path) -> None:
    mine = tmp_path / "workspaces" / "juniper"
    mine.mkdir(parents=True)
    (mine / "SOUL.md").write_text("---\nname: Juniper\n---\nBody\n")
    assert has_a_soul(tmp_path / "workspaces")
    assert seed_examples(tmp_path / "workspaces") == []
    assert sorted(p.name for p in (tmp_path / "workspaces").iterdir()) == ["juniper"]


def test_dot_folders_and_loose_files_are_no_soul(tmp_path: Path) -> None:
    workspaces = tmp_path / "workspaces"
    (workspaces / ".before-restore-20260504").mkdir(parents=True)
    (workspaces / ".before-restore-20260504" / "SOUL.md").write_text("old")
    (workspaces / "SOUL.md").write_text("a file, not a soul folder")
    assert not has_a_soul(workspaces)
    assert seed_examples(workspaces) == ["twinkle", "wren"]


def test_a_checkout_from_before_the_move_keeps_what_the_bot_wrote(tmp_path: Path) -> None:
    """A clone that tracked workspaces/wren: `git pull` took the tracked files and
    left the wiki the bot wrote. The examples come back; nothing written is lost."""
    memory = tmp_path / "workspaces" / "wren" / "memory"
    (memory / "people").mkdir(parents=True)
    (memory / "people" / "ann.md").write_text("# Ann\nGrows basil.\n")
    (memory / "index.md").write_text("# Wren's wiki, as compiled\n")
    assert seed_examples(tmp_path / "workspaces") == ["twinkle", "wren"]
    assert (memory / "people" / "ann.md").read_text() == "# Ann\nGrows basil.\n"
    assert (memory / "index.md").read_text() == "# Wren's wiki, as compiled\n"
    assert (memory.parent / "SOUL.md").read_bytes() == shipped_files()["wren/SOUL.md"]


def test_a_path_that_is_a_file_is_not_touched(tmp_path: Path) -> None:
    (tmp_path / "workspaces").write_text("not a folder")
    assert seed_examples(tmp_path / "workspaces") == []
    assert (tmp_path / "workspaces").read_text() == "not a folder"
