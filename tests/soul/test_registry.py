from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from bot.errors import SoulbotError
from bot.soul.loader import Soul, load_soul
from bot.soul.registry import SoulRegistry
from tests.kit import capture_logs
from tests.soul.conftest import MakeSoul

BROKEN = "---\nname: Broken\nhexaco: {openness: high}\n---\nBody"


def test_a_broken_soul_does_not_stop_the_others(make_soul: MakeSoul, tmp_path: Path) -> None:
    make_soul("aria")
    broken = make_soul("broken", soul=BROKEN)
    registry = SoulRegistry(tmp_path / "workspaces")
    with capture_logs() as logs:
        report = registry.reload_all()
    assert [s.id for s in registry.all()] == ["aria"]
    assert not report.ok
    failure, kept = report.failed[0]
    assert failure.path == broken
    assert "hexaco.openness: expected a number in [0, 1], got 'high'" in failure.error
    assert not kept
    failed = [e for e in logs if e["event"] == "soul.load_failed"]
    assert len(failed) == 1
    assert failed[0]["path"] == str(broken)
    assert "hexaco.openness" in failed[0]["error"]
    assert [e["soul"] for e in logs if e["event"] == "soul.loaded"] == ["aria"]


def test_hidden_folders_and_files_are_not_souls(make_soul: MakeSoul, tmp_path: Path) -> None:
    make_soul("aria")
    (tmp_path / "workspaces" / ".git").mkdir()
    (tmp_path / "workspaces" / "README.md").write_text("hi")
    report = SoulRegistry(tmp_path / "workspaces").reload_all()
    assert report.ok
    assert [s.id for s in report.loaded] == ["aria"]


def test_a_linked_soul_folder_fails(make_soul: MakeSoul, tmp_path: Path) -> None:
    real = make_soul("aria")
    (tmp_path / "workspaces" / "zlink").symlink_to(real)
    registry = SoulRegistry(tmp_path / "workspaces")
    report = registry.reload_all()
    assert [s.id for s in registry.all()] == ["aria"]
    assert "symbolic link" in report.failed[0][0].error


def test_duplicate_ids_fail_the_second_folder(make_soul: MakeSoul, tmp_path: Path) -> None:
    make_soul("a-first")
    make_soul("b-second")
    registry = SoulRegistry(tmp_path / "workspaces")
    report = registry.reload_all()
    assert registry.get("aria") is not None
    assert registry.get("aria").folder.name == "a-first"  # type: ignore[union-attr]
    assert "soul id 'aria' is already used by" in report.failed[0][0].error


def test_missing_workspaces_folder(tmp_path: Path) -> None:
    with pytest.raises(SoulbotError, match="the workspaces folder does not exist"):
        SoulRegistry(tmp_path / "nope").reload_all()


def test_reload_keeps_the_previous_good_version(make_soul: MakeSoul, tmp_path: Path) -> None:
    folder = make_soul("aria")
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    before = registry.get("aria")
    (folder / "SOUL.md").write_text(BROKEN.replace("name: Broken", "agentId: aria"))
    with capture_logs() as logs:
        report = registry.reload("aria")
    assert registry.get("aria") is before
    assert report.failed[0][1] is True
    assert any(e["event"] == "soul.load_failed" for e in logs)
    report_all = registry.reload_all()
    assert registry.get("aria") is before
    assert report_all.failed[0][1] is True


def test_reload_picks_up_a_change(make_soul: MakeSoul, tmp_path: Path) -> None:
    folder = make_soul("aria")
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    (folder / "SOUL.md").write_text("---\nagentId: aria\nname: Aria Two\n---\nNew body")
    with capture_logs() as logs:
        report = registry.reload("aria")
    assert report.ok
    assert registry.get("aria").name == "Aria Two"  # type: ignore[union-attr]
    assert [e["event"] for e in logs if e["event"].startswith("soul.")] == [
        "soul.loaded",
        "soul.reloaded",
    ]


def test_reload_by_folder_name_adds_a_new_soul(make_soul: MakeSoul, tmp_path: Path) -> None:
    make_soul("aria")
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    make_soul("bob", soul="---\nname: Bob\n---\nHi")
    registry.reload("bob")
    assert [s.id for s in registry.all()] == ["aria", "bob"]
    with pytest.raises(SoulbotError, match="no soul or workspace folder is named 'nobody'"):
        registry.reload("nobody")


@pytest.mark.parametrize("name", ["outside", "../outside", "ABS", ".", "..", ".hidden", "a/b", ""])
def test_reload_takes_only_a_folder_of_the_workspaces(
    make_soul: MakeSoul, tmp_path: Path, name: str
) -> None:
    make_soul("aria")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SOUL.md").write_text("---\nname: Evil\n---\nFrom outside.")
    hidden = tmp_path / "workspaces" / ".hidden"
    shutil.copytree(outside, hidden)
    (tmp_path / "workspaces" / "a").mkdir()
    shutil.copytree(outside, tmp_path / "workspaces" / "a" / "b")
    name = str(outside) if name == "ABS" else name
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    with pytest.raises(SoulbotError, match="no soul or workspace folder is named"):
        registry.reload(name)
    assert [s.id for s in registry.all()] == ["aria"]


def test_reload_with_an_id_change_replaces_the_old_id(make_soul: MakeSoul, tmp_path: Path) -> None:
    folder = make_soul("aria")
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    (folder / "SOUL.md").write_text("---\nagentId: aria2\n---\nBody")
    registry.reload("aria")
    assert [s.id for s in registry.all()] == ["aria2"]


def test_reload_cannot_take_another_souls_id(make_soul: MakeSoul, tmp_path: Path) -> None:
    make_soul("aria")
    bob = make_soul("bob", soul="---\nname: Bob\n---\nHi")
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    (bob / "SOUL.md").write_text("---\nagentId: aria\n---\nImpostor")
    report = registry.reload("bob")
    assert "already used by" in report.failed[0][0].error
    assert registry.get("bob") is not None
    assert registry.get("aria").persona.body != "Impostor"  # type: ignore[union-attr]


def test_reload_all_removes_deleted_souls(make_soul: MakeSoul, tmp_path: Path) -> None:
    make_soul("aria")
    bob = make_soul("bob", soul="---\nname: Bob\n---\nHi")
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    shutil.rmtree(bob)
    report = registry.reload_all()
    assert report.removed == ("bob",)
    assert [s.id for s in registry.all()] == ["aria"]


@pytest.mark.parametrize(
    ("first", "second"), [("one", "one"), ("all", "one"), ("one", "all"), ("all", "all")]
)
def test_a_reload_that_read_older_files_never_wins(
    make_soul: MakeSoul, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str, second: str
) -> None:
    """Reloads from two threads (`asyncio.to_thread` callers): the one that
    started first read the older SOUL.md and is held before its swap, while
    the later one reads the newer file. The newer soul must stay live."""
    folder = make_soul("aria")
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    read, release = threading.Event(), threading.Event()

    def slow_first(path: Path, *args: Any) -> Soul:
        soul = load_soul(path, *args)
        if threading.current_thread().name == "first":
            read.set()
            release.wait(10)
        return soul

    monkeypatch.setattr("bot.soul.registry.load_soul", slow_first)
    run = {"one": lambda: registry.reload("aria"), "all": registry.reload_all}
    older = threading.Thread(target=run[first], name="first")
    older.start()
    assert read.wait(10)
    (folder / "SOUL.md").write_text("---\nagentId: aria\nname: Aria Two\n---\nNewer body")
    newer = threading.Thread(target=run[second], name="second")
    newer.start()
    newer.join(0.3)  # unserialised, the newer reload is done by now, and then overwritten
    release.set()
    older.join(10)
    newer.join(10)
    assert registry.get("aria").name == "Aria Two"  # type: ignore[union-attr]
