"""The health file the daemon keeps and `soulbot health` reads."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from bot.app import health
from bot.app.health import check_health, keep_health, write_health
from bot.storage.files import replace_file


def test_a_fresh_file_of_a_live_process_is_healthy(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    write_health(path, {"adapters": ["telegram", "discord"]})
    line = check_health(path, max_age_s=60)
    assert line.startswith(f"ok: pid {os.getpid()}, adapters telegram, discord, updated ")


def test_missing_stale_unreadable_and_dead_are_unhealthy(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    with pytest.raises(RuntimeError, match="is missing: soulbot run is not serving"):
        check_health(path)
    write_health(path, {})
    updated = json.loads(path.read_text())["updated"]
    with pytest.raises(RuntimeError, match=r"is 61 s old \(limit 60 s\)"):
        check_health(path, 60, now=updated + 61)
    path.write_text("{not json")
    with pytest.raises(RuntimeError, match="is unreadable"):
        check_health(path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    path.write_text(json.dumps({"pid": dead.pid, "updated": updated}))
    with pytest.raises(RuntimeError, match=f"process {dead.pid} of .* is gone"):
        check_health(path, now=updated)


async def test_keep_health_rewrites_the_file_and_removes_it_when_stopped(tmp_path: Path) -> None:
    path = tmp_path / "data" / "health.json"
    beats = asyncio.Queue[int]()
    count = 0

    def status() -> dict[str, object]:
        nonlocal count
        count += 1
        beats.put_nowait(count)
        return {"beat": count}

    task = asyncio.create_task(keep_health(path, status, every_s=0.01))
    async with asyncio.timeout(5):
        while await beats.get() < 3:
            pass
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert not path.exists()
    assert count >= 3


def test_a_store_call_waiting_past_the_limit_fails_the_check(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    write_health(path, {"adapters": ["telegram"], "store_wait_s": 75.0})
    with pytest.raises(RuntimeError, match=r"store stalled: a store call has waited 75 s"):
        check_health(path, stalled_after_s=60)
    assert check_health(path, stalled_after_s=90).startswith("ok: pid ")
    assert check_health(path).startswith("ok: pid ")  # no limit: never stalled
    write_health(path, {"adapters": ["telegram"]})  # a file of an older soulbot: nothing to judge
    assert check_health(path, stalled_after_s=60).startswith("ok: pid ")


async def test_a_write_in_flight_when_stopped_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The write runs on a thread that a cancel does not stop: hold it there while
    # the task is cancelled, then let it finish. The file must not come back.
    path = tmp_path / "health.json"
    writing, release, written = threading.Event(), threading.Event(), threading.Event()

    def held_replace(target: Path, data: bytes) -> None:
        writing.set()
        release.wait(5)
        replace_file(target, data)
        written.set()

    monkeypatch.setattr(health, "replace_file", held_replace)
    task = asyncio.create_task(keep_health(path, dict, every_s=60))
    assert await asyncio.to_thread(writing.wait, 5)
    task.cancel()
    await asyncio.wait({task}, timeout=0.1)  # the removal has run, or waits for the write
    release.set()
    assert await asyncio.to_thread(written.wait, 5)
    await asyncio.gather(task, return_exceptions=True)
    assert not path.exists()
