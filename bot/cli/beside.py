"""What a CLI command that writes what a running daemon holds in memory does
beside one: it refuses, with one line naming the daemon and what to do instead
(the chat command that does the same work inside it, whose live sessions then
see it).

A daemon is one whose pid file in `data_dir` names a live process (any
instance: bot/app/owner.py), or, on a shared store, one whose row in
`processes` is fresh (bot/app/topology.py): a daemon on another host too.
"""

from __future__ import annotations

import asyncio

from bot.app.owner import servers
from bot.cli.common import fail
from bot.cluster.topology import Process, live
from bot.config.schema import Config
from bot.errors import SoulbotError
from bot.storage.db import Database, store_target


def refuse_beside_a_daemon(config: Config, then: str) -> None:
    """Exit 1 with `soulbot (pid N) serves WHERE: THEN` when a daemon serves
    `config`'s data (the first found)."""
    for served in servers(config.data_dir):
        fail(f"soulbot (pid {served.pid}) serves {served.where}: {then}")
    try:
        check_the_store(config, then)
    except SoulbotError as exc:
        fail(str(exc))


def check_the_store(config: Config, then: str) -> None:
    """Raise SoulbotError `soulbot instance I (host H, pid N) serves this
    store: THEN` when a process registered on `config`'s shared store is live
    (nothing on SQLite), or when the store cannot be asked."""
    for process in asyncio.run(_on_the_store(config)):
        raise SoulbotError(f"soulbot {process.name()} serves this store: {then}")


async def _on_the_store(config: Config) -> list[Process]:

    target = store_target(config.data_dir, config.store.url)
    if not isinstance(target, str):  # SQLite: one host, the pid files say it all
        return []
    db = Database(target, config.store.timeouts())
    await db.open()
    try:
        return await live(db)
    finally:
        await db.close()
