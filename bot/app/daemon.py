"""The daemon's lifecycle: start, serve until a signal, shut down in order.

It owns the whole order. Start: on a shared store, the check that this process
agrees with the others on it (bot/cluster/topology.py), the adapters, the reflector's
idle sweep, the nightly scheduler (the memory compile, then retention), the health
file. Signal handlers only set flags (uvicorn's pattern). The first SIGTERM/SIGINT
starts the graceful shutdown (docs/conversations.md), all of it within
`shutdown.deadline_s`: adapters stop taking messages; the messages already taken are
stored; up to `memory.compile.shutdown_wait_s` for the turns in flight (replies
still go out), then for their memory writes; whatever is left is logged as
`shutdown.pending` (turns, writes) and the turns cancelled; a nightly run and
`/soul compile` runs in progress are waited for; the shutdown tasks run (`heartbeat`:
reflections on the open conversations, so a private scope's reflection lands in its
wiki before `compile`: the memory compile); the health file goes, the runtime closes
(bot/app/runtime.py); exit 0. A task the deadline cuts short is cancelled and logged
as `shutdown.cut_short`. A second signal cuts the wait and the tasks short: the
store still closes cleanly, and the exit code is 1. (The end of console input is no
signal: a stop it began takes two to force, so a SIGTERM that races a closing stdin
still stops gracefully.)

With `metrics.listen` set, the Prometheus endpoint (bot/app/metrics.py) serves
from before the adapters start until the shutdown is done; so do the `services`
the daemon is given (the web console, which `soulbot run` gives it with
`web.enabled`). The health file holds
each adapter's `connected` and `last_event` (`Adapter.last_seen`), for
`soulbot health`'s deaf check, and `store_wait_s` (`Database.waiting_s`), for
its stalled-store check.

An adapter that is a `ShutdownWatcher` (the terminal chat) is told each step
as it starts (`ShutdownStep`: stopping, replies, writes, heartbeat, compile,
done; forced), so a person at the terminal sees the stop at work.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from datetime import datetime

import structlog

from bot.app.health import adapter_state, health_path, keep_health
from bot.app.metrics import MetricsServer, serving_metrics
from bot.app.runtime import Runtime
from bot.app.scheduler import Scheduler, nightly_trigger
from bot.types import ShutdownStep, ShutdownWatcher

log = structlog.get_logger(__name__)

ShutdownTask = Callable[[], Awaitable[None]]
# A server the daemon runs beside the adapters (the web console: bot/web/server.py), given
# the daemon; it serves while its context is open.
Service = Callable[["Daemon"], AbstractAsyncContextManager[object]]


class Daemon:
    """Owns the serving loop of a Runtime. Use `serve()` once."""

    def __init__(
        self, runtime: Runtime, scheduler: Scheduler | None = None, services: Sequence[Service] = ()
    ) -> None:
        self._runtime = runtime
        self._services = services
        compile_config = runtime.config.memory.compile
        self._scheduler = scheduler or Scheduler(
            nightly_trigger(compile_config.cron, compile_config.timezone)
        )
        self._scheduler.add_nightly("compile", self._compile_all)
        self._scheduler.add_nightly("retention", self._retain)
        if runtime.reminders is not None:  # the store is polled: see bot/chat/reminder_delivery.py
            self._scheduler.add_every(
                "reminders", runtime.config.reminders.poll_s, runtime.reminders.tick
            )
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self._served = False
        self._signals = 0
        self.metrics: MetricsServer | None = None  # while serving, with `metrics.listen`
        self.shutdown_tasks: list[tuple[str, ShutdownTask]] = [
            ("heartbeat", self._reflect_all),
            ("compile", self._save_memory),
        ]

    @property
    def runtime(self) -> Runtime:
        return self._runtime

    def next_nightly(self) -> datetime | None:
        """When the nightly tasks (compile, retention) run next; None when not scheduled."""
        return self._scheduler.next_run()

    async def _compile_all(self) -> None:
        await self._runtime.memory.compile_all()

    async def _retain(self) -> None:
        await self._runtime.retention.run()

    async def _reflect_all(self) -> None:
        """The shutdown heartbeat: a reflection on every open conversation."""
        self._show(ShutdownStep("heartbeat"))
        await self._runtime.reflector.flush()

    async def _save_memory(self) -> None:
        """The shutdown compile, shown with the number of wikis it folds into."""
        wikis = await self._runtime.memory.pending_wikis()
        self._show(ShutdownStep("compile", len(wikis)))
        await self._compile_all()

    def _show(self, step: ShutdownStep) -> None:
        """Tell the adapters that show the stop (the terminal chat) about `step`."""
        for adapter in self._runtime.adapters.values():
            if isinstance(adapter, ShutdownWatcher):
                adapter.shutdown_step(step)

    def request_stop(self, signum: int | None = None) -> None:
        """Ask for a graceful stop. A second signal forces it; a request without
        a signal (the end of console input) never does."""
        name = signal.Signals(signum).name if signum else None
        if signum is not None:
            self._signals += 1
            if self._signals > 1:
                log.warning("shutdown.forced", signal=name)
                if not self._force.is_set():
                    self._force.set()
                    self._show(ShutdownStep("forced"))
                return
        if not self._stop.is_set():
            log.info("daemon.stopping", signal=name)
            self._stop.set()

    async def _or_forced(self, work: Awaitable[object]) -> bool:
        """Run `work` unless a second signal comes first; True when it finished.
        Raises what `work` raised."""
        task = asyncio.ensure_future(work)
        forced = asyncio.ensure_future(self._force.wait())
        await asyncio.wait({task, forced}, return_when=asyncio.FIRST_COMPLETED)
        forced.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return False
        task.result()
        return True

    async def serve(self) -> int:
        """Run until asked to stop; returns the process exit code.

        Raises RuntimeError when called twice.
        """
        if self._served:
            raise RuntimeError("Daemon.serve() may run only once")
        self._served = True
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_stop, signum)
        runtime = self._runtime
        health: asyncio.Task[None] | None = None
        listen = runtime.config.metrics.listen
        try:
            await runtime.cluster.join()  # before anything serves: the processes must agree
            async with (
                serving_metrics(
                    listen, runtime.adapters, runtime.sessions, runtime.db.waiting_s
                ) as self.metrics,
                AsyncExitStack() as services,
            ):
                for service in self._services:
                    await services.enter_async_context(service(self))
                await runtime.start_adapters()
                await runtime.recover(own_instance=True)
                runtime.reflector.start()
                self._scheduler.start()
                souls = [s.id for s in runtime.registry.all()]
                log.info("daemon.started", souls=souls, adapters=list(runtime.adapters))
                health = asyncio.create_task(keep_health(health_path(runtime.config), self.status))
                await self._stop.wait()
                return await self._shutdown()
        finally:
            self.metrics = None
            if health is not None:
                health.cancel()
                await asyncio.gather(health, return_exceptions=True)
            await self._scheduler.stop(0.0)
            await runtime.cluster.leave()
            await runtime.close()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            log.info("daemon.stopped")

    def status(self) -> dict[str, object]:
        """What the health file says now (bot/app/health.py)."""
        runtime = self._runtime
        return {
            "adapters": sorted(runtime.adapters),
            "adapter_state": adapter_state(runtime.adapters),
            "souls": [s.id for s in runtime.registry.all()],
            "sessions": len(runtime.sessions),
            "turns_in_flight": len(runtime.sessions.in_flight()),
            "stopping": self._stop.is_set(),
            "store_wait_s": round(runtime.db.waiting_s(), 1),
        }

    async def _shutdown(self) -> int:
        runtime = self._runtime
        loop = asyncio.get_running_loop()
        end = loop.time() + runtime.config.shutdown.deadline_s

        def left(limit: float = float("inf")) -> float:
            return max(0.0, min(end - loop.time(), limit))

        self._show(ShutdownStep("stopping", 2 - self._signals))  # the signals that force it
        await runtime.stop_adapters()
        turns_end = loop.time() + left(runtime.config.memory.compile.shutdown_wait_s)
        # Messages taken before the stop are stored (or answered) first.
        if not await self._or_forced(runtime.router.wait(turns_end - loop.time())):
            return 1
        if in_flight := len(runtime.sessions.in_flight()):
            self._show(ShutdownStep("replies", in_flight))
        if not await self._or_forced(runtime.sessions.wait(max(0.0, turns_end - loop.time()))):
            await runtime.sessions.cancel()
            return 1
        turns = len(runtime.sessions.in_flight())
        if turns:
            await runtime.sessions.cancel()
        # A reply sent but not stored (a full disk) would be answered again at the next start.
        await runtime.sessions.store_unsaved()
        await runtime.sessions.store_held()  # messages a failed store held: the next start answers
        if queued := runtime.memory.pending_writes():
            self._show(ShutdownStep("writes", queued))
        if not await self._or_forced(runtime.memory.drain(max(0.0, turns_end - loop.time()))):
            return 1
        writes = runtime.memory.pending_writes()
        if turns or writes:
            # What ends after this is not folded into the wiki by the compile below.
            log.warning("shutdown.pending", turns=turns, writes=writes)
        # Background work already running ends before the shutdown tasks start.
        if not await self._or_forced(self._scheduler.stop(left())):
            return 1
        if not await self._or_forced(runtime.router.commands.wait(left())):
            return 1
        for name, task in self.shutdown_tasks:
            try:
                if not await self._or_forced(asyncio.wait_for(task(), left())):
                    return 1
            except TimeoutError:
                log.warning("shutdown.cut_short", task=name,
                            deadline_s=runtime.config.shutdown.deadline_s)  # fmt: skip
                self._show(ShutdownStep(name, failed=True))
            except Exception as exc:
                log.exception("shutdown.task_failed", task=name, error_class=type(exc).__name__)
                self._show(ShutdownStep(name, failed=True))
            else:
                log.info("shutdown.task_done", task=name)
        self._show(ShutdownStep("done"))
        return 0
