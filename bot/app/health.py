"""The daemon's health file, for container health checks and monitoring.

While `soulbot run` serves, it rewrites `data_dir/health.json` every
`EVERY_S` seconds (pid, time, adapters serving, souls, sessions, turns in
flight) and removes it at exit. `soulbot health` reads it: healthy when the
file is younger than `--max-age` seconds and its process is alive. A wedged
event loop stops the rewrites, so the check fails then too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from bot.storage.files import replace_file

HEALTH_FILE = "health.json"
EVERY_S = 15.0
MAX_AGE_S = 60.0


def write_health(path: Path, status: dict[str, Any]) -> None:
    """Replace the health file with `status` plus pid and time. Raises OSError."""
    record = {"pid": os.getpid(), "updated": time.time(), **status}
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, (json.dumps(record, sort_keys=True) + "\n").encode())


async def keep_health(path: Path, status: Any, every_s: float = EVERY_S) -> None:
    """Write `status()` to `path` now and every `every_s` seconds until cancelled,
    then remove the file. A failed write is retried at the next rewrite."""
    try:
        while True:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(write_health, path, status())
            await asyncio.sleep(every_s)
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # noqa: ASYNC240 (one tiny unlink at exit)


def check_health(path: Path, max_age_s: float = MAX_AGE_S, now: float | None = None) -> str:
    """One line saying the daemon is healthy. Raises RuntimeError saying why not."""
    try:
        record = json.loads(path.read_text())
        pid, updated = int(record["pid"]), float(record["updated"])
    except FileNotFoundError:
        raise RuntimeError(f"{path} is missing: soulbot run is not serving") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"{path} is unreadable: {exc}") from None
    age = (time.time() if now is None else now) - updated
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
    adapters = ", ".join(record.get("adapters", [])) or "none"
    return f"ok: pid {pid}, adapters {adapters}, updated {age:.0f} s ago"
