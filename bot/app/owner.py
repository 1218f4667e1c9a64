"""One daemon per `data_dir`, or per `instance` of it.

`soulbot run` and `soulbot chat` hold `data_dir/soulbot.lock` (an flock, through
the filelock package, so the kernel lets go when the process dies, SIGKILL
included) for as long as they serve, and write their pid beside it. A second
daemon on the same folder stops at once with one line naming the folder and
the pid that holds it: two daemons would answer the same messages twice, and
each would take the other's health file away. Processes that share `data_dir`
and a PostgreSQL store each have an `instance` name, and each holds its own
`soulbot-<instance>.lock`: two of one name are refused the same way.

What must not run beside any daemon of the data, whatever its instance (a
restore, a migrate of the config's store, `memory forget`), asks `servers`
(every instance's pid file, without taking a lock) or holds `own_every_instance`
(every instance's lock found in data_dir, and its own).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from bot.errors import DataDirInUse

LOCK_FILE = "soulbot.lock"
PID_FILE = "soulbot.pid"


def instance_file(name: str, instance: str | None) -> str:
    """The name of a per-process file (`soulbot.lock` -> `soulbot-<instance>.lock`)."""
    if instance is None:
        return name
    stem, dot, suffix = name.partition(".")
    return f"{stem}-{instance}{dot}{suffix}"


def _holder(pid_file: Path) -> str:
    try:
        return pid_file.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def serving(data_dir: Path, instance: str | None = None) -> DataDirInUse | None:
    """The DataDirInUse `own_data_dir` would raise now, judged by the pid file
    alone (a live process of that pid), without taking the lock: a daemon
    starting at the same moment is never turned away by this look."""
    pid = _holder(data_dir / instance_file(PID_FILE, instance))
    if not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, another user's
        pass
    return DataDirInUse(_where(data_dir, instance), pid)


def instances(data_dir: Path) -> list[str | None]:
    """The instances that have a lock or a pid file in `data_dir` (None: the
    one without a name), in name order; none when the folder is missing."""
    pattern = re.compile(r"soulbot(?:-([a-z0-9][a-z0-9-]*))?\.(?:lock|pid)")
    try:
        names = [path.name for path in data_dir.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = {m.group(1) for m in map(pattern.fullmatch, names) if m is not None}
    return sorted(found, key=lambda name: name or "")


def servers(data_dir: Path) -> list[DataDirInUse]:
    """`serving` of every instance of `data_dir`: one DataDirInUse for each
    daemon that serves it now, judged by the pid files alone."""
    found = (serving(data_dir, instance) for instance in instances(data_dir))
    return [served for served in found if served is not None]


def _where(data_dir: Path, instance: str | None) -> str:
    return str(data_dir) if instance is None else f"{data_dir} (instance {instance})"


@contextlib.contextmanager
def own_data_dir(data_dir: Path, instance: str | None = None) -> Iterator[None]:
    """Hold `data_dir` (or this `instance` of it) while the context is open.
    Raises DataDirInUse when another process holds it, OSError when the folder
    cannot be made."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = FileLock(data_dir / instance_file(LOCK_FILE, instance), mode=0o600)
    pid_file = data_dir / instance_file(PID_FILE, instance)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise DataDirInUse(_where(data_dir, instance), _holder(pid_file)) from None
    try:
        pid_file.write_text(f"{os.getpid()}\n")
        yield
    finally:
        with contextlib.suppress(OSError):
            pid_file.unlink()
        lock.release()


@contextlib.contextmanager
def own_every_instance(data_dir: Path, instance: str | None = None) -> Iterator[None]:
    """Hold `data_dir` for `instance` and for every other instance with a lock
    or pid file there, so that no daemon of it serves or starts while the
    context is open. Raises DataDirInUse naming the first instance held by
    another process, OSError when the folder cannot be made."""
    with contextlib.ExitStack() as stack:
        for name in dict.fromkeys([*instances(data_dir), instance]):  # the others' first
            stack.enter_context(own_data_dir(data_dir, name))
        yield
