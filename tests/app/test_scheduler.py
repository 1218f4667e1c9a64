"""The nightly scheduler: the trigger fires, a failing task does not stop it."""

from __future__ import annotations

import asyncio

import pytest
from apscheduler.triggers.cron import CronTrigger

from bot.app.scheduler import Scheduler, nightly_trigger
from tests.kit import capture_logs


@pytest.mark.timeout(15)
async def test_tasks_run_on_the_trigger_and_a_failure_is_logged() -> None:
    ran: list[str] = []
    twice = asyncio.Event()

    async def broken() -> None:
        raise RuntimeError("compile exploded")

    async def compile_wiki() -> None:
        ran.append("compile")
        if len(ran) == 2:
            twice.set()

    scheduler = Scheduler(CronTrigger(second="*", timezone="UTC"))
    scheduler.add_nightly("broken", broken)
    scheduler.add_nightly("compile", compile_wiki)
    with capture_logs() as logs:
        scheduler.start()
        try:
            async with asyncio.timeout(10):
                await twice.wait()
        finally:
            await scheduler.stop(1.0)
    assert ran == ["compile", "compile"]  # it fired again after a failure
    failed = [e for e in logs if e["event"] == "scheduler.task_failed"]
    assert len(failed) >= 2 and failed[0]["task"] == "broken"
    assert failed[0]["error_class"] == "RuntimeError"


async def test_start_twice_is_refused_and_stop_is_idempotent() -> None:
    scheduler = Scheduler(nightly_trigger("0 3 * * *", "Europe/Lisbon"))
    scheduler.start()
    with pytest.raises(RuntimeError):
        scheduler.start()
    assert await scheduler.stop(1.0)
    assert await scheduler.stop(1.0)


@pytest.mark.timeout(15)
async def test_stop_waits_for_a_run_in_progress_and_cuts_one_past_its_time() -> None:
    started, finished = asyncio.Event(), asyncio.Event()

    async def compile_wiki() -> None:
        started.set()
        await asyncio.sleep(0.3)
        finished.set()

    scheduler = Scheduler(CronTrigger(second="*", timezone="UTC"))
    scheduler.add_nightly("compile", compile_wiki)
    scheduler.start()
    await asyncio.wait_for(started.wait(), 5)
    assert await scheduler.stop(5.0)
    assert finished.is_set()  # the run was waited for, not left behind

    hung = Scheduler(CronTrigger(second="*", timezone="UTC"))
    hung.add_nightly("compile", lambda: asyncio.sleep(60))
    started.clear()
    with capture_logs() as logs:
        hung.start()
        await asyncio.sleep(0)
        while hung._running is None:  # noqa: ASYNC110 (no event to wait on from outside)
            await asyncio.sleep(0.01)
        assert not await hung.stop(0.1)
    assert [e["task"] for e in logs if e["event"] == "shutdown.cut_short"] == ["nightly"]


def test_the_nightly_trigger_keeps_its_time_zone() -> None:
    trigger = nightly_trigger("30 2 * * *", "Asia/Tokyo")
    assert str(trigger.timezone) == "Asia/Tokyo"
    assert "hour='2'" in str(trigger) and "minute='30'" in str(trigger)


@pytest.mark.timeout(15)
async def test_a_task_every_few_seconds_runs_again_after_a_failure() -> None:
    runs: list[int] = []
    third = asyncio.Event()

    async def poll() -> int:
        runs.append(len(runs))
        if len(runs) == 1:
            raise RuntimeError("the store is gone")
        if len(runs) == 3:
            third.set()
        return 0

    scheduler = Scheduler(nightly_trigger("0 3 * * *", "UTC"))
    scheduler.add_every("reminders", 0.05, poll)
    with capture_logs() as logs:
        scheduler.start()
        try:
            async with asyncio.timeout(10):
                await third.wait()
        finally:
            await scheduler.stop(1.0)
    failed = [e for e in logs if e["event"] == "scheduler.task_failed"]
    assert failed[0]["task"] == "reminders" and failed[0]["error_class"] == "RuntimeError"
    assert len(runs) >= 3
