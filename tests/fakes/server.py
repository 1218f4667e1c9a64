"""What the loopback fakes share: `async with fake:` starts and stops it."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from aiohttp import web


class LoopbackServer:
    """A fake server on 127.0.0.1; subclasses define `start` (which calls
    `_listen`), and `stop` when closing takes more than the server's end."""

    _runner: web.AppRunner | None = None
    _port: int = 0

    async def _listen(self, app: web.Application, port: int) -> None:
        """Serve `app` on 127.0.0.1:`port` (0: a free port, then in `_port`)."""
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self._port = int(self._runner.addresses[0][1])

    async def start(self, port: int = 0) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        """Close the server. Idempotent."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
