"""`soulbot web-login`: a one-time sign-in link to the web console, printed.

It runs beside the daemon, on the same store: it writes the link's hash
(bot/chat/weblogin.py) and the daemon that serves `web.listen` takes it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from bot.app.preflight import OPERATOR_FAULT
from bot.chat.weblogin import WebAuth
from bot.cli.common import common_options, fail, setup
from bot.config.schema import Config
from bot.errors import StorageError
from bot.storage.db import Database, prepare_data_dir, store_target


async def _link(config: Config) -> str:
    db = Database(store_target(config.data_dir, config.store.url), config.store.timeouts())
    await db.open()
    try:
        return await WebAuth(db, config.web).issue_link("cli")
    finally:
        await db.close()


@click.command("web-login")
@common_options
def web_login(config_path: Path | None, log_format: str | None) -> None:
    """Print a one-time sign-in link to the web console (`web:`), valid `web.link_minutes`."""
    config = setup(config_path, log_format)
    if not config.web.enabled:
        fail("the web console is off: set web.enabled: true and restart `soulbot run`")
    try:
        prepare_data_dir(config.data_dir)
        link = asyncio.run(_link(config))
    except StorageError as exc:
        fail(str(exc), OPERATOR_FAULT)
    click.echo(link)
    click.echo(f"(it works once, within {config.web.link_minutes:g} minutes)", err=True)


def exposed_line(config: Config) -> list[str]:
    """`soulbot check`'s warning when the console listens off loopback without HTTPS in front."""
    from ipaddress import ip_address

    from bot.config.schema import split_listen

    web = config.web
    if not web.enabled:
        return []
    host = split_listen(web.listen)[0]
    try:
        loopback = host == "localhost" or ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback or web.secure():
        return []
    return [
        f"web.listen {web.listen} is not loopback and web.public_url is not https://: sign-in "
        "links and session cookies would cross the network in clear; put HTTPS in front and "
        "set web.public_url"
    ]
