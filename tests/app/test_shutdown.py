"""The shutdown order in process (docs/conversations.md): replies of turns in flight go out,
then the shutdown tasks run, then the database closes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from apscheduler.triggers.cron import CronTrigger

from bot.app.daemon import Daemon
from bot.app.runtime import Runtime
from bot.app.scheduler import Scheduler
from bot.config.schema import Config
from bot.soul.registry import SoulRegistry
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import RecordingPlatform, capture_logs, make_config, wait_until


async def serving_daemon(config: Config) -> tuple[Runtime, RecordingPlatform, Daemon]:
    """A runtime on one RecordingPlatform, with its daemon (not serving yet)."""
    registry = SoulRegistry(config.workspaces)
    registry.reload_all()
    platform = RecordingPlatform()
    runtime = await Runtime.open(config, registry, [platform])
    return runtime, platform, Daemon(runtime, Scheduler(CronTrigger(hour=3, timezone="UTC")))


async def test_turns_then_shutdown_tasks_then_the_store(tmp_path: Path) -> None:
    order: list[str] = []
    async with FakeAnthropic(latency_s=0.5) as fake:
        config = make_config(tmp_path, fake.url)
        runtime, platform, daemon = await serving_daemon(config)

        async def compile_wiki() -> None:
            order.append(f"compile after {len(platform.sent)} reply")
            await runtime.db.run(lambda c: order.append("store still open"))

        async def broken() -> None:
            raise RuntimeError("boom")

        daemon.shutdown_tasks += [("broken", broken), ("compile", compile_wiki)]
        serving = asyncio.create_task(daemon.serve())
        await wait_until(lambda: platform.started)
        await platform.say("answer me before you go")
        await wait_until(lambda: fake.requests)
        with capture_logs() as logs:
            daemon.request_stop()
            code = await serving
    assert code == 0
    assert order == ["compile after 1 reply", "store still open"]
    assert platform.sent[0].text.endswith("answer me before you go")
    events = [(e["event"], e.get("task")) for e in logs]
    assert [task for event, task in events if event.startswith("shutdown.task")] == [
        "heartbeat",
        "compile",
        "broken",
        "compile",
    ]  # the daemon's own tasks first, then those added here
    assert events.index(("turn.completed", None)) < events.index(("shutdown.task_failed", "broken"))
    assert events[-1] == ("daemon.stopped", None)


async def test_one_deadline_for_the_whole_shutdown(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url, "shutdown: {deadline_s: 0.5}\n")
        _, platform, daemon = await serving_daemon(config)

        async def hangs() -> None:
            await asyncio.sleep(60)

        daemon.shutdown_tasks = [("hangs", hangs), ("compile", daemon.shutdown_tasks[1][1])]
        serving = asyncio.create_task(daemon.serve())
        await wait_until(lambda: platform.started)
        with capture_logs() as logs:
            daemon.request_stop()
            code = await asyncio.wait_for(serving, 5)
    assert code == 0
    cut = [e for e in logs if e["event"] == "shutdown.cut_short"]
    assert [e["task"] for e in cut] == ["hangs", "compile"]  # the deadline was spent
    assert [e["event"] for e in logs][-1] == "daemon.stopped"
