"""`Cluster`: what this process shares with the others on its store, behind
one API whatever the engine (the room's map: bot/cluster/__init__.py).

The runtime makes one from its Database and Config. On SQLite a process is
alone on its store: it owns every conversation, takes no lease, registers
nowhere, and its wiki locks are file locks (which `soulbot compile` from a
shell takes too). On PostgreSQL the wiki locks are advisory locks, the turns
and the recovery take leases, the process registers in `processes` at start,
and a conversation's owner is judged from the live rows there.
"""

from __future__ import annotations

from bot.cluster.leases import Leases
from bot.cluster.ownership import Owners
from bot.cluster.topology import Process, Topology
from bot.cluster.wikilock import WikiLock, wiki_lock
from bot.config.schema import Config
from bot.storage.db import Database
from bot.types import Inbound


class Cluster:
    """This process among the others on its store: `wiki_lock`, `leases`,
    `topology` (`join`, `leave`) and `owner_of`."""

    def __init__(self, db: Database, config: Config) -> None:
        self._db = db
        self._data_dir = config.data_dir
        self.me = Process.of(config)
        self.shared = db.shared
        """Whether other processes may share the store (PostgreSQL)."""
        # On SQLite the one daemon's sessions know their own turns, and a lease
        # would cost each turn two statements for nothing.
        self.leases = (
            Leases(db, config.instance or "", config.sessions.lease_s) if self.shared else None
        )
        """Who answers a conversation now (bot/cluster/leases.py); None: alone."""
        self.topology = Topology(db, self.me) if self.shared else None
        """This process's row of `processes` (bot/cluster/topology.py); None: alone."""

    def wiki_lock(self, soul: str, scope: str) -> WikiLock:
        """The lock of the wiki of `soul` and `scope` across processes
        (bot/cluster/wikilock.py)."""
        return wiki_lock(self._db, self._data_dir, soul, scope)

    async def join(self) -> None:
        """Register this process among the live ones, once, before its adapters
        connect. Raises TopologyConflict on a conflict (see Topology.join)."""
        if self.topology is not None:
            await self.topology.join()

    async def leave(self) -> None:
        """Take this process's row away (a clean stop); idempotent."""
        if self.topology is not None:
            await self.topology.leave()

    async def owners(self) -> Owners:
        """The live processes now, to judge owners by (bot/cluster/ownership.py).
        Raises what the store raised."""
        if self.topology is None:
            return Owners(self.me, alone=True)
        return Owners(self.me, tuple(await self.topology.others()))

    async def owner_of(self, conversation: Inbound) -> Process | None:
        """The live process that owns `conversation` (the one its messages come
        to), or None when none does. Raises what the store raised, ValueError
        for a Discord server id that is not a number."""
        return (await self.owners()).of(conversation)
