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
from bot.app.logs import observing
from bot.config.schema import split_listen
from bot.web.pages import ACTIONS, ROUTES
from bot.web.server import CONSOLE_KEY, Console, build_app

log = structlog.get_logger(__name__)


def console_app(daemon: Daemon) -> web.Application:
    """The console of `daemon`, every page in it."""
    return build_app(Console(daemon, daemon.runtime.web_login), ROUTES, ACTIONS)


@contextlib.asynccontextmanager
async def serving_console(daemon: Daemon) -> AsyncIterator[web.AppRunner]:
    """The console's runner, set up, with its model events observed while open."""
    app = console_app(daemon)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        with observing(app[CONSOLE_KEY].model_events):
            yield runner
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serving_web(daemon: Daemon) -> AsyncIterator[web.AppRunner | None]:
    """Serve the console on `web.listen` while open. A bind that fails is logged
    (`web.error`) and the daemon serves without it, as without metrics."""
    config = daemon.runtime.config.web
    host, port = split_listen(config.listen)
    async with serving_console(daemon) as runner:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            log.error("web.error", listen=config.listen, error=str(exc))
            yield None
            return
        log.info("web.listening", listen=config.listen, url=config.base_url())
        yield runner
