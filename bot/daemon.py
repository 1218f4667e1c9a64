"""The daemon's lifecycle: start, serve until a signal, shut down.

Signal handlers only set a flag (uvicorn's pattern): SIGTERM or SIGINT asks
for a stop, and `serve` winds down and returns the exit code.
"""

from __future__ import annotations

import asyncio
import signal

import structlog

from bot.config import Config
from bot.soul.registry import SoulRegistry

log = structlog.get_logger(__name__)


class Daemon:
    """Owns the registry and the serving loop. Use `serve()` once."""

    def __init__(self, config: Config, registry: SoulRegistry) -> None:
        self._config = config
        self._registry = registry
        self._stop = asyncio.Event()
        self._served = False

    def request_stop(self, signum: int | None = None) -> None:
        """Ask for a graceful stop."""
        if self._stop.is_set():
            return
        log.info("daemon.stopping", signal=signal.Signals(signum).name if signum else None)
        self._stop.set()

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
        try:
            souls = [s.id for s in self._registry.all()]
            log.info("daemon.started", souls=souls, default_soul=self._config.default_soul)
            await self._stop.wait()
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
        log.info("daemon.stopped")
        return 0
