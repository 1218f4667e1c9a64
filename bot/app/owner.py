"""One daemon per `data_dir`.

`soulbot run` and `soulbot chat` hold `data_dir/soulbot.lock` (an flock, through
the filelock package, so the kernel lets go when the process dies, SIGKILL
included) for as long as they serve, and write their pid beside it. A second
daemon on the same folder stops at once with one line naming the folder and
the pid that holds it: two daemons would answer the same messages twice, and
each would take the other's health file away.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from bot.errors import DataDirInUse

LOCK_FILE = "soulbot.lock"
PID_FILE = "soulbot.pid"


def _holder(data_dir: Path) -> str:
    try:
        return (data_dir / PID_FILE).read_text().strip() or "unknown"
    except OSError:
        return "unknown"


@contextlib.contextmanager
def own_data_dir(data_dir: Path) -> Iterator[None]:
    """Hold `data_dir` while the context is open. Raises DataDirInUse when
    another process holds it, OSError when the folder cannot be made."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = FileLock(data_dir / LOCK_FILE, mode=0o600)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise DataDirInUse(data_dir, _holder(data_dir)) from None
    try:
        (data_dir / PID_FILE).write_text(f"{os.getpid()}\n")
        yield
    finally:
        with contextlib.suppress(OSError):
            (data_dir / PID_FILE).unlink()
        lock.release()
