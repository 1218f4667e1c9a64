"""The nightly jobs (APScheduler's AsyncIOScheduler behind our own start/stop).

Tasks registered with `add_nightly` run one after another when the trigger
fires (the memory compile, SOUL.md backups). A failing task is logged as
`scheduler.task_failed` and the others still run; the scheduler keeps going.
A run missed by up to an hour (a busy loop, a suspended machine) still runs
once (misfire grace, coalescing); a run missed while the process was down is
not made up.

Tasks registered with `add_every` run every so many seconds (the reminders'
poll of the store, bot/chat/reminder_delivery.py): one run at a time, a run
that falls behind coalesced, a failure logged (`scheduler.task_failed`) and the
next run on time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

log = structlog.get_logger(__name__)

Task = Callable[[], Awaitable[None]]
Every = Callable[[], Awaitable[object]]  # what it returns is not read


def nightly_trigger(cron: str, timezone: str) -> Any:
    """The trigger for a crontab line in a time zone (validated by the config)."""
    return CronTrigger.from_crontab(cron, timezone=timezone)


class Scheduler:
    """Runs the registered nightly tasks on `trigger`. Start inside the loop."""

    def __init__(self, trigger: Any) -> None:
        self._trigger = trigger
        self._tasks: list[tuple[str, Task]] = []
        self._every: list[tuple[str, float, Every]] = []
        self._scheduler: AsyncIOScheduler | None = None
        self._running: asyncio.Task[None] | None = None

    def add_nightly(self, name: str, task: Task) -> None:
        self._tasks.append((name, task))

    def add_every(self, name: str, seconds: float, task: Every) -> None:
        """Run `task` every `seconds` once started (see the module docstring)."""
        self._every.append((name, seconds, task))

    @staticmethod
    async def _run_every(name: str, task: Every) -> None:
        try:
            await task()
        except Exception as exc:
            log.exception("scheduler.task_failed", task=name, error_class=type(exc).__name__)

    async def run_nightly(self) -> None:
        """Run every task once, in order; a failure is logged and skipped."""
        for name, task in self._tasks:
            try:
                await task()
            except Exception as exc:
                log.exception("scheduler.task_failed", task=name, error_class=type(exc).__name__)
            else:
                log.info("scheduler.task_done", task=name)

    def start(self) -> None:
        if self._scheduler is not None:
            raise RuntimeError("Scheduler.start() was already called")
        self._scheduler = AsyncIOScheduler()
        self._scheduler.add_job(
            self._fire,
            self._trigger,
            id="nightly",
            misfire_grace_time=3600,
            coalesce=True,
            max_instances=1,
        )
        for name, seconds, task in self._every:
            self._scheduler.add_job(
                self._run_every, IntervalTrigger(seconds=seconds), args=(name, task), id=name,
                misfire_grace_time=max(1, int(seconds)), coalesce=True, max_instances=1,
            )  # fmt: skip
        self._scheduler.start()
        log.info(
            "scheduler.started", next_run=str(self._scheduler.get_job("nightly").next_run_time)
        )

    def next_run(self) -> datetime | None:
        """When the nightly run fires next; None when the scheduler is not running."""
        if self._scheduler is None or not self._scheduler.running:
            return None
        job = self._scheduler.get_job("nightly")
        when: datetime | None = job.next_run_time if job is not None else None
        return when

    async def _fire(self) -> None:
        """The job: the nightly run as a task of our own, which `stop` awaits."""
        if self._running is not None and not self._running.done():
            return  # the last run is still going (max_instances is 1 as well)
        self._running = asyncio.create_task(self.run_nightly(), name="nightly")
        await asyncio.shield(self._running)

    async def stop(self, seconds: float) -> bool:
        """Stop firing, and wait up to `seconds` for a run in progress; True
        when none is left running (one cut short is cancelled). Idempotent."""
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=False)
        running = self._running
        if running is None or running.done():
            return True
        await asyncio.wait({running}, timeout=seconds)
        if running.done():
            return True
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        log.warning("shutdown.cut_short", task="nightly", after_s=seconds)
        return False
