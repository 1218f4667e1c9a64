"""Retention (bot/app/retention.py) on both engines: what is past its window and
read by no turn goes, in small batches; what a turn, a budget or a recovery
reads stays."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apscheduler.triggers.cron import CronTrigger

from bot.app import retention
from bot.app.daemon import Daemon
from bot.app.retention import DAY_S, Pruned, Retention
from bot.app.scheduler import Scheduler
from bot.chat.history import HistoryStore
from bot.chat.media import keep, kept_folder, read_image
from bot.config.schema import RetentionConfig
from bot.errors import BudgetExceeded
from bot.model.client import Usage
from bot.model.usage import Ledger, usage_table
from bot.storage.db import Database
from bot.types import Media
from tests.app.test_shutdown import serving_daemon
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.images import png
from tests.kit import capture_logs, make_config
from tests.model.test_usage import NOON, SONNET, Clock, budget, ctx

WINDOW = RetentionConfig(history_days=30, usage_days=2, media_days=30, reply_address_days=30)


def count(table: str) -> Callable[[Any], int]:
    return lambda conn: int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


async def test_history_rows_no_turn_loads_go_once_past_the_window(db: Database) -> None:
    clock = Clock(NOON)
    history = HistoryStore(db, clock=clock)
    old = [await history.append("tg:1", 0, "user", f"old {n}") for n in range(4)]
    await history.compact("tg:1", 0, [e.id for e in old[:3]], "first summary")
    await history.compact("tg:1", 0, [old[3].id], "second summary")  # the first one: old_summary
    await history.append("tg:2", 0, "user", "said before a reset")
    await history.reset("tg:2")
    clock.now += 40 * DAY_S
    young = await history.append("tg:1", 0, "user", "young")
    await history.compact("tg:1", 0, [young.id], "third summary")  # compacted, but young
    await history.append("tg:2", 1, "user", "after the reset")
    before = await history.load("tg:1"), await history.load("tg:2")

    pruned = await Retention(WINDOW, db, None, clock=clock).run()

    # 4 compacted rows and 2 summaries replaced (both said long ago) of tg:1, the
    # row of tg:2's older generation.
    assert pruned.history == 7
    assert (await history.load("tg:1"), await history.load("tg:2")) == before
    kinds = await db.run(
        lambda c: sorted(r[0] for r in c.execute("SELECT kind FROM history").fetchall())
    )
    # tg:1's young compacted row and its live summary, tg:2's new generation.
    assert kinds == ["compacted", "message", "summary"]
    assert await Retention(WINDOW, db, None, clock=clock).run() == Pruned()


async def test_old_usage_goes_and_todays_budget_and_the_report_still_hold(db: Database) -> None:
    clock = Clock(NOON)
    ledger = Ledger(db, budget=budget(user=1_000), clock=clock)
    for day in range(5):  # 5 days, 300 tokens a day
        clock.now = NOON + day * DAY_S
        await ledger.record(ctx(), SONNET, Usage(input_tokens=300))
        await ledger.record_voice(ctx(), "heard", "whisper-1", 10.0, 0.001)
    await ledger.record(ctx(), SONNET, Usage(input_tokens=600))  # today: 900

    pruned = await Retention(WINDOW, db, None, clock=clock).run()

    assert pruned.usage == 3  # usage_days 2: today and yesterday stay
    assert pruned.voice_usage == 3 and await db.run(count("voice_usage")) == 2
    assert pruned.budget_totals == (6 if db.shared else 0)  # a user and a soul a day
    assert await db.run(count("usage")) == 3
    with pytest.raises(BudgetExceeded):  # today's 900 still count
        await Ledger(db, budget=budget(user=1_000), clock=clock).check(ctx(), 200)
    report = await db.run(lambda c: usage_table(c, days=2, by="day", now=clock.now))
    tokens, voice = report.split("\n\nVoice\n")
    lines = {line.split()[0]: line.split()[1:3] for line in tokens.splitlines()[3:]}
    assert lines["2025-03-13"] == ["1", "300"] and lines["2025-03-14"] == ["2", "900"]
    assert [line.split()[:2] for line in voice.splitlines()[2:4]] == [
        ["2025-03-13", "10.0"], ["2025-03-14", "10.0"]
    ]  # fmt: skip


async def test_reply_addresses_of_idle_sessions_go(db: Database) -> None:
    clock = Clock(NOON)
    history = HistoryStore(db, clock=clock)
    await history.append_message("tg:idle", 0, "hello", "m1", address='{"chat": "idle"}')
    await history.append_message("tg:back", 0, "hello", "m2", address='{"chat": "back"}')
    clock.now += 31 * DAY_S
    await history.append_message("tg:back", 0, "again", "m3", address='{"chat": "back"}')

    pruned = await Retention(WINDOW, db, None, clock=clock).run()

    assert pruned.reply_addresses == 1
    assert await history.unanswered(clock.now - 60) == [("tg:back", '{"chat": "back"}')]
    sessions = await db.run(lambda c: c.execute("SELECT session FROM reply_addresses").fetchall())
    assert [tuple(s) for s in sessions] == [("tg:back",)]


async def test_kept_images_go_past_the_window_and_empty_folders_with_them(
    sqlite_db: Database, tmp_path: Path
) -> None:
    media = tmp_path / "media"
    now = NOON + 100 * DAY_S
    old, fresh = media / "tg_1" / "1-1.png", media / "tg_2" / "9-1.png"
    for file in (old, fresh):
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(b"png")
    (media / "tg_2" / "2-1.png").write_bytes(b"png")
    for path, age_days in ((old, 31), (media / "tg_2" / "2-1.png", 31), (fresh, 1)):
        os.utime(path, (now - age_days * DAY_S,) * 2)
    clock = Clock(now)

    first = await Retention(WINDOW, sqlite_db, media, clock=clock).run()
    assert first.media_files == 2
    assert sorted(p.relative_to(media).as_posix() for p in media.rglob("*")) == [
        "tg_1", "tg_2", "tg_2/9-1.png",
    ]  # fmt: skip
    os.utime(media / "tg_1", (now - 31 * DAY_S,) * 2)  # emptied a month ago
    await Retention(WINDOW, sqlite_db, media, clock=clock).run()
    assert not (media / "tg_1").exists() and fresh.exists()


async def test_every_delete_is_a_small_batch_of_its_own(
    sqlite_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "BATCH_ROWS", 3)
    monkeypatch.setattr(retention, "ID_SPAN", 4)
    clock = Clock(NOON)
    history, ledger = (
        HistoryStore(sqlite_db, clock=clock),
        Ledger(sqlite_db, budget=budget(), clock=clock),
    )
    rows = [await history.append("tg:1", 0, "user", f"row {n}") for n in range(20)]
    await history.compact("tg:1", 0, [e.id for e in rows], "summary")
    for _ in range(10):
        await ledger.record(ctx(), SONNET, Usage(input_tokens=1))
    clock.now += 40 * DAY_S
    calls: list[int] = []
    run = sqlite_db.run

    async def counted(fn: Callable[[Any], Any]) -> Any:
        calls.append(1)
        return await run(fn)

    monkeypatch.setattr(sqlite_db, "run", counted)
    pruned = await Retention(WINDOW, sqlite_db, None, clock=clock).run()
    assert (pruned.history, pruned.usage) == (20, 10)
    # 21 rows walked 4 ids at a time (6 spans and the end), 10 usage rows 3 at a time (4).
    assert len(calls) >= 7 + 4


async def _month_of_dead_rows(db: Database, clock: Clock) -> None:
    history, ledger = (
        HistoryStore(db, clock=clock),
        Ledger(db, budget=budget(user=1_000), clock=clock),
    )
    for session in range(6):
        rows = [await history.append(f"tg:{session}", 0, "user", f"m{n}") for n in range(10)]
        await history.compact(f"tg:{session}", 0, [e.id for e in rows], "summary")
        await history.append_message(f"tg:{session}", 0, "hi", f"x{session}", address="{}")
        await ledger.record(ctx(), SONNET, Usage(input_tokens=1))
    clock.now += 40 * DAY_S


async def test_a_second_process_skips_the_run_another_holds(
    two: tuple[Database, Database],
) -> None:
    here, there = two
    clock = Clock(NOON)
    await _month_of_dead_rows(here, clock)
    assert await there.try_lock(retention.LOCK)
    assert await Retention(WINDOW, here, None, clock=clock).run() == Pruned()
    await there.unlock(retention.LOCK)
    assert (await Retention(WINDOW, here, None, clock=clock).run()).history == 60


async def test_two_processes_deleting_at_once_do_no_harm(
    two: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even without the lock (both take it), concurrent deletes of the same
    rows neither fail nor count a row twice, in small batches or large."""
    here, there = two
    monkeypatch.setattr(retention, "BATCH_ROWS", 2)
    monkeypatch.setattr(retention, "ID_SPAN", 3)
    clock = Clock(NOON)
    await _month_of_dead_rows(here, clock)

    async def taken(name: str) -> bool:
        return True

    for db in two:
        monkeypatch.setattr(db, "try_lock", taken)
    runs = [Retention(WINDOW, db, None, clock=clock).run() for db in (here, there, here, there)]
    done = await asyncio.gather(*runs)
    assert sum(p.history for p in done) == 60
    assert sum(p.usage for p in done) == 6
    assert sum(p.budget_totals for p in done) == 2
    assert sum(p.reply_addresses for p in done) == 6
    assert await here.run(count("history")) == 6 + 6  # each session's summary and message


async def test_a_kept_image_is_dated_by_the_clock_retention_reads(
    sqlite_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    media = tmp_path / "media"
    image = await read_image(png(4, 4), Media("photo", "image/png", None, _never))
    monkeypatch.setattr(time, "time", lambda: NOON)
    await keep(media, "tg:1", 7, [image])
    kept = kept_folder(media, "tg:1") / "7-1.png"
    assert kept.stat().st_mtime == NOON
    pruned = await Retention(WINDOW, sqlite_db, media, clock=Clock(NOON + 31 * DAY_S)).run()
    assert pruned.media_files == 1 and not kept.exists()


async def _never() -> bytes:
    raise AssertionError("read_image is given the bytes")


async def test_the_nightly_run_keeps_the_windows_after_the_compile(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        runtime, _, _ = await serving_daemon(make_config(tmp_path, fake.url))
        scheduler = Scheduler(CronTrigger(hour=3, timezone="UTC"))
        Daemon(runtime, scheduler)  # registers its nightly tasks
        try:
            with capture_logs() as logs:
                await scheduler.run_nightly()
        finally:
            await runtime.close()
    done = [e["task"] for e in logs if e["event"] == "scheduler.task_done"]
    assert done == ["compile", "retention"]
    assert any(e["event"] == "retention.done" for e in logs)
