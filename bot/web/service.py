"""The web console as a service of the daemon: `serving_web(daemon)` is what
`soulbot run` gives the daemon with `web.enabled` (bot/app/daemon.py `Service`):
it listens on `web.listen`, on the daemon's own event loop, while the daemon
serves."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from bot.app.daemon import Daemon
from bot.config.schema import split_listen
from bot.web.pages import ACTIONS, ROUTES
from bot.web.server import Console, build_app

log = structlog.get_logger(__name__)


def console_app(daemon: Daemon) -> web.Application:
    """The console of `daemon`, every page in it."""
    return build_app(Console(daemon, daemon.runtime.web_login), ROUTES, ACTIONS)


@contextlib.asynccontextmanager
async def serving_web(daemon: Daemon) -> AsyncIterator[web.AppRunner | None]:
    """Serve the console on `web.listen` while open. A bind that fails is logged
    (`web.error`) and the daemon serves without it, as without metrics."""
    config = daemon.runtime.config.web
    runner = web.AppRunner(console_app(daemon), access_log=None, handle_signals=False)
    await runner.setup()
    host, port = split_listen(config.listen)
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        log.error("web.error", listen=config.listen, error=str(exc))
        await runner.cleanup()
        yield None
        return
    log.info("web.listening", listen=config.listen, url=config.base_url())
    try:
        yield runner
    finally:
        await runner.cleanup()
