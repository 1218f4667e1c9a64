"""SOUL.md writes: the file lock, daily backups, rollback and epoch."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from bot.errors import SoulbotError
from bot.soul.heartbeat import Reflection, entries_of, merge
from bot.soul.registry import SoulRegistry
from bot.soul.soulfile import KEEP_BACKUPS, SoulFile, new_epoch, rollback_soul
from tests.soul.test_heartbeat import SOUL

DAY = 86_400.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_795_000_000.0  # 2026-11-18

    def __call__(self) -> float:
        return self.now


def soul_folder(tmp_path: Path, text: str = SOUL) -> Path:
    folder = tmp_path / "workspaces" / "twinkle"
    folder.mkdir(parents=True)
    (folder / "SOUL.md").write_text(text)
    return folder


def reflect(words: str, pause: float = 0.0):  # type: ignore[no-untyped-def]
    def edit(text: str, now: datetime) -> str:
        time.sleep(pause)  # inside the lock: widens the window a race would need
        return merge(text, Reflection(words, (), ()), now)[0]

    return edit


async def test_two_writers_at_once_both_land_one_after_the_other(tmp_path: Path) -> None:
    folder = soul_folder(tmp_path)
    started = time.monotonic()
    await asyncio.gather(
        asyncio.to_thread(SoulFile(folder).update, reflect("First about Miso.", 0.2)),
        asyncio.to_thread(SoulFile(folder).update, reflect("Second about Miso.", 0.2)),
    )
    assert time.monotonic() - started >= 0.4  # the lock made them take turns
    entries = entries_of((folder / "SOUL.md").read_text())
    assert sorted(e.split("] ")[1] for e in entries) == ["First about Miso.", "Second about Miso."]


def test_the_first_write_of_a_day_keeps_a_backup_and_30_are_kept(tmp_path: Path) -> None:
    folder = soul_folder(tmp_path)
    clock = Clock()
    file = SoulFile(folder, clock)
    file.update(reflect("Day one about Miso."))
    file.update(reflect("Day one again."))
    [backup] = file.backups.iterdir()
    assert backup.name == "SOUL.md.2026-11-18" and backup.read_text() == SOUL
    for _ in range(KEEP_BACKUPS + 5):
        clock.now += DAY
        file.update(reflect(f"Another day {clock.now}."))
    dates = file.dates()
    assert len(dates) == KEEP_BACKUPS and dates[-1] == "2026-12-23" and dates[0] == "2026-11-24"
    assert file.update(lambda text, now: None) is None  # an edit may decline


def test_rollback_restores_a_day_and_keeps_what_it_replaced(tmp_path: Path) -> None:
    folder = soul_folder(tmp_path)
    clock = Clock()
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    file = SoulFile(folder, clock)
    file.update(reflect("Before about Miso."))
    clock.now += DAY
    file.update(reflect("After about Miso."))
    current = (folder / "SOUL.md").read_text()
    line = rollback_soul(registry, "twinkle", "2026-11-18")
    assert line.startswith("twinkle: rolled back to the backup of 2026-11-18 (version ")
    assert (folder / "SOUL.md").read_text() == SOUL
    kept = [p for p in file.backups.iterdir() if "T" in p.name]
    assert len(kept) == 1 and kept[0].read_text() == current
    with pytest.raises(SoulbotError, match=r"no backup of .* for '2020-01-01' \(backups: "):
        rollback_soul(registry, "twinkle", "2020-01-01")
    with pytest.raises(SoulbotError, match="no soul with id 'nobody'"):
        rollback_soul(registry, "nobody", "2026-11-18")


def _three_versions(tmp_path: Path, clock: Clock) -> tuple[SoulRegistry, SoulFile]:
    """twinkle with backups of 2026-11-18 (SOUL) and 2026-11-19, and a third
    version in SOUL.md now; the clock stays on 2026-11-20."""
    folder = soul_folder(tmp_path)
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    file = SoulFile(folder, clock)
    for words in ("Day one about Miso.", "Day two about Miso.", "Day three about Miso."):
        file.update(reflect(words))
        clock.now += DAY
    return registry, file


def test_a_second_rollback_to_the_same_backup_changes_nothing(tmp_path: Path) -> None:
    clock = Clock()
    registry, file = _three_versions(tmp_path, clock)
    current = file.read()
    rollback_soul(registry, "twinkle", "2026-11-19")
    line = rollback_soul(registry, "twinkle", "2026-11-19")  # a double click, same second
    assert line.startswith("twinkle: SOUL.md is the backup of 2026-11-19 already; nothing changed")
    timed = [when for when in file.dates() if "T" in when]
    assert len(timed) == 1
    assert (file.backups / f"SOUL.md.{timed[0]}").read_text() == current


def test_timed_backups_never_overwrite_and_roll_back_too(tmp_path: Path) -> None:
    clock = Clock()
    registry, file = _three_versions(tmp_path, clock)
    current = file.read()
    day_two = (file.backups / "SOUL.md.2026-11-19").read_text()
    assert file.rollback("2026-11-19")
    assert file.rollback("2026-11-18")  # the same second: a name of its own
    stamp = "2026-11-21T110640"
    assert file.dates() == ["2026-11-18", "2026-11-19", "2026-11-20", "2026-11-21", stamp,
                            f"{stamp}-2"]  # fmt: skip
    assert (file.backups / f"SOUL.md.{stamp}").read_text() == current
    assert (file.backups / f"SOUL.md.{stamp}-2").read_text() == day_two
    line = rollback_soul(registry, "twinkle", stamp)
    assert line.startswith(f"twinkle: rolled back to the backup of {stamp} (version ")
    assert file.read() == current
    with pytest.raises(SoulbotError, match="no backup of"):
        rollback_soul(registry, "twinkle", f"{stamp}-9")


def test_rollbacks_keep_the_last_30_backups_of_either_kind(tmp_path: Path) -> None:
    clock = Clock()
    _, file = _three_versions(tmp_path, clock)
    for day in range(1, KEEP_BACKUPS + 1):
        (file.backups / f"SOUL.md.2026-10-{day:02d}").write_text(SOUL + f"\nday {day}\n")
    assert file.rollback("2026-10-01")  # the oldest: read before any prune
    assert "day 1\n" in file.read()
    dates = file.dates()  # 30 + 3 days, 2026-11-21's and the timed one: 5 pruned
    assert len(dates) == KEEP_BACKUPS
    assert dates[0] == "2026-10-06" and dates[-2:] == ["2026-11-21", "2026-11-21T110640"]


def test_a_rollback_to_a_file_that_does_not_load_keeps_the_live_version(tmp_path: Path) -> None:
    folder = soul_folder(tmp_path)
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    version = registry.get("twinkle").version  # type: ignore[union-attr]
    backups = folder / "memory" / ".meta" / "backups"
    backups.mkdir(parents=True)
    (backups / "SOUL.md.2026-01-01").write_text("<!-- SOUL_CORE -->\n<!-- SOUL_CORE -->\n")
    with pytest.raises(SoulbotError, match="but it does not load"):
        rollback_soul(registry, "twinkle", "2026-01-01")
    assert registry.get("twinkle").version == version  # type: ignore[union-attr]


def test_epoch_from_the_registry(tmp_path: Path) -> None:
    folder = soul_folder(tmp_path)
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    SoulFile(folder).update(reflect("Something about Miso."))
    assert new_epoch(registry, "twinkle").startswith("twinkle: epoch 1 started")
    assert entries_of((folder / "SOUL.md").read_text()) == []
    (tmp_path / "workspaces" / "plain").mkdir()
    (tmp_path / "workspaces" / "plain" / "SOUL.md").write_text("---\nname: plain\n---\nhi\n")
    registry.reload_all()
    with pytest.raises(SoulbotError, match=r"plain: SOUL\.md has no regions"):
        new_epoch(registry, "plain")


def test_the_lock_also_keeps_other_threads_out(tmp_path: Path) -> None:
    folder = soul_folder(tmp_path)
    inside = threading.Event()
    release = threading.Event()

    def slow(text: str, now: datetime) -> str:
        inside.set()
        release.wait(5)
        return merge(text, Reflection("Slow about Miso.", (), ()), now)[0]

    worker = threading.Thread(target=SoulFile(folder).update, args=(slow,))
    worker.start()
    assert inside.wait(5)
    finished = threading.Event()
    other = threading.Thread(
        target=lambda: (SoulFile(folder).update(reflect("Fast about Miso.")), finished.set())
    )
    other.start()
    assert not finished.wait(0.2)  # waits for the lock
    release.set()
    worker.join(5)
    other.join(5)
    assert finished.is_set() and len(entries_of((folder / "SOUL.md").read_text())) == 2


def test_backups_are_private_and_soul_md_keeps_its_mode(tmp_path: Path) -> None:
    folder = soul_folder(tmp_path)
    (folder / "SOUL.md").chmod(0o644)
    clock = Clock()
    old = os.umask(0o022)
    try:
        file = SoulFile(folder, clock)
        file.update(reflect("Day one about Miso."))
        clock.now += DAY
        file.update(reflect("Day two about Miso."))
        file.rollback("2026-11-18")
    finally:
        os.umask(old)
    backups = sorted(file.backups.iterdir())
    assert len(backups) == 3  # two days, and what the rollback replaced
    assert stat.S_IMODE(file.backups.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in backups} == {0o600}
    assert stat.S_IMODE((folder / "SOUL.md").stat().st_mode) == 0o644


def test_no_write_goes_through_a_meta_folder_that_links_out(tmp_path: Path) -> None:
    folder = soul_folder(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (folder / "memory").mkdir()
    (folder / "memory" / ".meta").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OSError, match="leads out of the soul folder"):
        SoulFile(folder).update(reflect("Day one about Miso."))
    assert list(outside.iterdir()) == []
    assert (folder / "SOUL.md").read_text() == SOUL
