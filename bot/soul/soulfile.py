"""Writing a soul's SOUL.md safely: a file lock, re-read and edit under it, an
atomic replace, a dated backup before the first write of each UTC day.

Every write goes through `SoulFile.update`: it takes the lock
(`memory/.meta/soul.lock`, filelock, so other processes are kept out too),
reads the file as it is now, applies the edit and replaces the file through a
new file and a rename. Two sessions reflecting at once therefore both land.
Backups are `memory/.meta/backups/SOUL.md.YYYY-MM-DD`, and a rollback's
`SOUL.md.YYYY-MM-DDTHHMMSS` (`-2`, `-3`... when that name is taken: one is never
overwritten); the last 30 of either kind are kept, in a folder made 0700, each
file 0600, whatever the umask; SOUL.md keeps its own mode. `rollback` restores
any of them (keeping what it replaces as a timed backup; a rollback to a backup
equal to SOUL.md changes nothing), `epoch` starts a new autobiography. Nothing
is written through a link that leads out of the soul folder (`memory/` or
`.meta/` pointing elsewhere).
These calls block: run them in a worker thread. Each write takes a `check`,
called under the file lock right before anything is written: on a shared
store it raises when the soul's lock across processes is no longer held
(bot/soul/soullock.py), and nothing is written.
"""

from __future__ import annotations

import errno
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from filelock import FileLock

from bot.errors import Rejected, SoulbotError
from bot.soul import heartbeat
from bot.soul.registry import SoulRegistry
from bot.soul.soullock import Check, unchecked
from bot.storage.files import (
    PRIVATE_FILE,
    PRIVATE_FOLDER,
    decode_text,
    link_out,
    make_folders,
    replace_file,
)

KEEP_BACKUPS = 30
LOCK_TIMEOUT_S = 30.0
# A backup's name after `SOUL.md.`: a day, or a rollback's time with its counter.
_WHEN = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:T(\d{6})(?:-([1-9]\d{0,5}))?)?$")


def _order(when: str) -> tuple[str, str, int]:
    """The sort key of a backup name that `_WHEN` matches: day, time, counter."""
    match = _WHEN.match(when)
    assert match is not None
    day, clock, counter = match.groups()
    return day, clock or "", int(counter or 1)


class SoulFile:
    """The SOUL.md of one soul folder."""

    def __init__(self, folder: Path, clock: Callable[[], float] = time.time) -> None:
        self._folder = folder
        self.path = folder / "SOUL.md"
        self._meta = folder / "memory" / ".meta"
        self.backups = self._meta / "backups"
        self._clock = clock

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def _lock(self) -> FileLock:
        """The lock file's lock, making `.meta/`. Raises OSError when a link on
        the way to the backups leads out of the soul folder."""
        out = link_out(self._folder, self.backups)
        if out is not None:
            link, target = out
            reason = f"{link} leads out of the soul folder (to {target}); nothing is written there"
            raise OSError(errno.EXDEV, reason)
        self._meta.mkdir(parents=True, exist_ok=True)
        return FileLock(self._meta / "soul.lock", timeout=LOCK_TIMEOUT_S)

    def read(self) -> str:
        """The file's text. Raises OSError, UnicodeDecodeError."""
        return decode_text(self.path.read_bytes())

    def update(
        self, edit: Callable[[str, datetime], str | None], check: Check = unchecked
    ) -> str | None:
        """Under the lock: read, `edit(text, now)`, `check()`, back up, replace.
        Returns the new text, or None when `edit` returned None or the same
        text. Raises filelock.Timeout, OSError (a link out of the soul folder
        among them: see `_lock`), and what `edit` and `check` raise."""
        with self._lock():
            text = self.read()
            now = self._now()
            new = edit(text, now)
            if new is None or new == text:
                return None
            check()
            self._backup(text, now)
            replace_file(self.path, new.encode("utf-8"))
            return new

    def _backup(self, text: str, now: datetime) -> None:
        """Keep `text` as today's backup unless there is one; prune to the last
        KEEP_BACKUPS."""
        make_folders(self.backups, PRIVATE_FOLDER)
        today = self.backups / f"SOUL.md.{now.date().isoformat()}"
        if not today.exists():
            replace_file(today, text.encode("utf-8"), PRIVATE_FILE)
        self._prune()

    def _prune(self) -> None:
        """Keep the last KEEP_BACKUPS backups, days and timed ones together."""
        for old in self.dates()[:-KEEP_BACKUPS]:
            (self.backups / f"SOUL.md.{old}").unlink(missing_ok=True)

    def _timed_backup(self, text: str, now: datetime) -> None:
        """Keep `text` as `SOUL.md.<day>T<time>`, with `-2`, `-3`... after it
        when that name is taken (under the lock, so no other writer races)."""
        make_folders(self.backups, PRIVATE_FOLDER)
        stamp = now.strftime("%Y-%m-%dT%H%M%S")
        name, counter = stamp, 1
        while (self.backups / f"SOUL.md.{name}").exists():
            counter += 1
            name = f"{stamp}-{counter}"
        replace_file(self.backups / f"SOUL.md.{name}", text.encode("utf-8"), PRIVATE_FILE)

    def dates(self) -> list[str]:
        """The backups' names after `SOUL.md.` (a day, or a rollback's
        YYYY-MM-DDTHHMMSS with its counter), oldest first."""
        names = (p.name.removeprefix("SOUL.md.") for p in self.backups.glob("SOUL.md.*"))
        return sorted((name for name in names if _WHEN.match(name)), key=_order)

    def rollback(self, day: str, check: Check = unchecked) -> bool:
        """Replace SOUL.md with the backup `day` (a name `dates` gives); what it
        replaces is kept as a timed backup. Returns False, changing nothing,
        when the backup is SOUL.md as it is. Raises SoulbotError when there is
        no such backup, and what `check` raises."""
        source = self.backups / f"SOUL.md.{day}"
        if not _WHEN.match(day) or not source.is_file():
            known = ", ".join(self.dates()) or "none"
            raise SoulbotError(f"no backup of {self.path} for {day!r} (backups: {known})")
        with self._lock():
            restored = source.read_bytes()  # before a prune could take it
            if restored == self.path.read_bytes():
                return False
            now = self._now()
            current = self.read()
            check()
            self._timed_backup(current, now)
            self._backup(current, now)
            replace_file(self.path, restored)
            return True

    def epoch(self, check: Check = unchecked) -> int:
        """Start a new epoch (autobiography cleared; core and memory kept).
        Returns the new epoch number. Raises Rejected for a SOUL.md
        without regions, and what `check` raises."""
        result: list[int] = []

        def edit(text: str, now: datetime) -> str:
            new, number = heartbeat.start_epoch(text, now)
            result.append(number)
            return new

        self.update(edit, check)
        return result[0]


def _soul_file(registry: SoulRegistry, name: str) -> SoulFile:
    soul = registry.get(name)
    if soul is None:
        known = ", ".join(s.id for s in registry.all()) or "none"
        raise SoulbotError(f"no soul with id '{name}' is loaded (loaded: {known})")
    return SoulFile(soul.folder)


def rollback_soul(registry: SoulRegistry, name: str, day: str, check: Check = unchecked) -> str:
    """Restore the backup `day` and reload the soul; returns the line to
    show. A backup equal to SOUL.md changes nothing (a second click of the
    same rollback). Raises SoulbotError (no such soul or backup, the restored
    file does not load: the registry keeps the previous version live, or what
    `check` raises)."""
    if not _soul_file(registry, name).rollback(day, check):
        soul = registry.get(name)
        version = f" (version {soul.version})" if soul is not None else ""
        return f"{name}: SOUL.md is the backup of {day} already; nothing changed{version}"
    return _reloaded(registry, name, f"{name}: rolled back to the backup of {day}")


def new_epoch(registry: SoulRegistry, name: str, check: Check = unchecked) -> str:
    """Start a new epoch of the soul's autobiography and reload it; returns the
    line to show. Raises SoulbotError (`check`'s SoulWriteStopped among them)."""
    try:
        number = _soul_file(registry, name).epoch(check)
    except Rejected:
        raise SoulbotError(f"{name}: SOUL.md has no regions, so it has no heartbeat") from None
    return _reloaded(registry, name, f"{name}: epoch {number} started; the autobiography is empty")


def _reloaded(registry: SoulRegistry, name: str, done: str) -> str:
    report = registry.reload(name)
    if report.failed:
        failure, _ = report.failed[0]
        raise SoulbotError(f"{done}, but it does not load: {failure.error}")
    return f"{done} (version {report.loaded[0].version})"
