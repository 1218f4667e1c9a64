"""The daemon's health file, for container health checks and monitoring.

While `soulbot run` serves, it rewrites `data_dir/health.json` every
`EVERY_S` seconds (pid, time, adapters serving, souls, sessions, turns in
flight, and `adapter_state`: each adapter's `connected` and `last_event`, the
unix time it last heard from its platform or null) and removes it at exit.
`soulbot health` reads it: healthy when the file is younger than `--max-age`
seconds, its process is alive, and no adapter is deaf: connected, yet nothing
heard for more than `health.deaf_after_s` (an adapter with no `last_event`, the
terminal, is never deaf; one not connected is not judged: it is reconnecting or
stopped). A wedged event loop stops the rewrites, so the check fails then too.
`store_wait_s` is how long the oldest store call queued or running had waited
when the file was written (every chat waits behind it): above
`health.store_stalled_after_s`, the check fails ("store stalled").

The rewrites run on a worker thread, which a cancel does not stop: the write and
the removal take one lock, and the removal marks the file stopped first, so a
write still in flight when the daemon stops either ends before the removal or
writes nothing. No health file outlives `keep_health`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapters.base import Adapter
from bot.app.owner import instance_file
from bot.config.schema import Config
from bot.storage.files import replace_file

HEALTH_FILE = "health.json"
EVERY_S = 15.0
MAX_AGE_S = 60.0


def health_path(config: Config) -> Path:
    """This process's health file, absolute: `data_dir/health.json`, or
    `health-<instance>.json` for one `instance` of several. The daemon writes it
    and `soulbot health` reads it through this one function, so both take a
    relative `data_dir` from the folder they run in."""
    return (config.data_dir / instance_file(HEALTH_FILE, config.instance)).absolute()


def adapter_state(adapters: Mapping[str, Adapter]) -> dict[str, dict[str, Any]]:
    """`adapter_state` of the health file: by adapter name, `connected` and `last_event`."""
    return {
        name: {"connected": adapter.connected(), "last_event": adapter.last_seen()}
        for name, adapter in adapters.items()
    }


def deaf_lines(record: Mapping[str, Any], deaf_after_s: float, now: float) -> list[str]:
    """A line for each adapter of the health `record` that is connected but has
    heard nothing for more than `deaf_after_s` seconds; [] when none is."""
    lines = []
    states = record.get("adapter_state")
    for name, state in sorted(states.items() if isinstance(states, dict) else ()):
        last = state.get("last_event") if isinstance(state, dict) else None
        if not isinstance(last, int | float) or state.get("connected") is not True:
            continue
        if (silent := now - last) > deaf_after_s:
            lines.append(f"deaf: {name} connected but nothing received for {silent:.0f} s")
    return lines


def stalled_line(record: Mapping[str, Any], stalled_after_s: float) -> str | None:
    """The line saying the store is stalled, when the health `record`'s
    `store_wait_s` is over `stalled_after_s`; None when not (or not recorded)."""
    wait = record.get("store_wait_s")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > stalled_after_s:
        return (
            f"store stalled: a store call has waited {wait:.0f} s (limit {stalled_after_s:.0f} s)"
        )
    return None


def write_health(path: Path, status: dict[str, Any]) -> None:
    """Replace the health file with `status` plus pid and time. Raises OSError."""
    record = {"pid": os.getpid(), "updated": time.time(), **status}
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, (json.dumps(record, sort_keys=True) + "\n").encode())


class _HealthFile:
    """The health file's writes and its removal, in order across threads: once
    `remove` has run, `write` writes nothing."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stopped = False

    def write(self, status: dict[str, Any]) -> None:
        """`write_health`, unless the file was removed for good. Raises OSError."""
        with self._lock:
            if not self._stopped:
                write_health(self._path, status)

    def remove(self) -> None:
        """Remove the file, after a write in flight; no write comes after."""
        with self._lock:
            self._stopped = True
            with contextlib.suppress(OSError):
                self._path.unlink()


async def keep_health(path: Path, status: Any, every_s: float = EVERY_S) -> None:
    """Write `status()` to `path` now and every `every_s` seconds until cancelled,
    then remove the file, once a write in flight on its thread has ended (a
    second cancel stops the wait, not the removal). A failed write is retried
    at the next rewrite."""
    health = _HealthFile(path)
    try:
        while True:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(health.write, status())
            await asyncio.sleep(every_s)
    finally:
        await asyncio.shield(asyncio.to_thread(health.remove))


def check_health(
    path: Path,
    max_age_s: float = MAX_AGE_S,
    now: float | None = None,
    deaf_after_s: float | None = None,
    stalled_after_s: float | None = None,
) -> str:
    """One line saying the daemon is healthy. Raises RuntimeError saying why not
    (every deaf adapter, when `deaf_after_s` is set; a stalled store, when
    `stalled_after_s` is)."""
    try:
        record = json.loads(path.read_text())
        pid, updated = int(record["pid"]), float(record["updated"])
    except FileNotFoundError:
        raise RuntimeError(f"{path} is missing: soulbot run is not serving") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"{path} is unreadable: {exc}") from None
    now = time.time() if now is None else now
    age = now - updated
    if age > max_age_s:
        raise RuntimeError(
            f"{path} is {age:.0f} s old (limit {max_age_s:.0f} s): the daemon is stuck or gone"
        )
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise RuntimeError(f"process {pid} of {path} is gone") from None
    except PermissionError:
        pass  # alive, owned by another user
    problems = deaf_lines(record, deaf_after_s, now) if deaf_after_s is not None else []
    if stalled_after_s is not None and (stalled := stalled_line(record, stalled_after_s)):
        problems.append(stalled)
    if problems:
        raise RuntimeError("; ".join(problems))
    adapters = ", ".join(record.get("adapters", [])) or "none"
    return f"ok: pid {pid}, adapters {adapters}, updated {age:.0f} s ago"
