"""What the processes on one shared store must agree on, checked at start.

Several processes may share a PostgreSQL store (`instance`). Each registers
itself in the table `processes` once the store is open and before its adapters
connect (`Topology.join`): its instance, host, pid, absolute `data_dir`,
whether it polls Telegram, and its Discord `shard_count` and `shard_ids`. In the
same transaction (under a lock of its own, so two processes starting together
are judged one after the other) it reads the rows of the other live processes,
those updated within `STALE_S`, and refuses to start on the first conflict
(`conflict`), with one line naming both processes:
- Telegram runs in one process only (two would take each other's updates);
- Discord processes agree on `shard_count` and hold disjoint `shard_ids`
  (unsharded: the one shard 0);
- all share one `data_dir` (the wikis, media and exports live there).

The row of a dead run of the same instance is replaced (its instance lock,
bot/app/owner.py, says it is dead). A running process refreshes its row every
`REFRESH_S` (`topology.refresh_failed` when the store fails it; the next try
may succeed) and deletes it at a clean stop (`leave`); a killed one's row goes
stale and blocks no one after `STALE_S`. Times are each process's wall clock,
as for the leases (bot/cluster/leases.py). On SQLite one daemon serves a
`data_dir`: nothing is registered there.

`soulbot check` asks the same question without registering (`refusal`), on a
read-only connection, so it lists the line `run` would stop with.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from bot.config.schema import Config
from bot.errors import TopologyConflict
from bot.storage import postgres
from bot.storage.db import Database
from bot.storage.sql import Conn

log = structlog.get_logger(__name__)

STALE_S = 120.0  # a row not refreshed for this long is a dead process's
REFRESH_S = 30.0  # how often a running process refreshes its row

_COLUMNS = "instance, host, pid, data_dir, telegram, discord, shard_count, shard_ids, updated"


@dataclass(frozen=True)
class Process:
    """One process's row of `processes`: who it is and what it serves."""

    instance: str
    host: str
    pid: int
    data_dir: str
    telegram: bool
    discord: bool
    shard_count: int | None
    shard_ids: tuple[int, ...] | None

    @classmethod
    def of(cls, config: Config) -> Process:
        """This process, as `config` sets it up."""
        adapters = config.adapters
        discord = adapters.discord
        return cls(
            config.instance or "",
            socket.gethostname(),
            os.getpid(),
            str(config.data_dir.absolute()),
            bool(adapters.telegram.token.get_secret_value()),
            bool(discord.token.get_secret_value()),
            discord.shard_count,
            discord.shard_ids,
        )

    def shards(self) -> set[int]:
        """The Discord shards this process holds (unsharded: shard 0)."""
        if self.shard_ids is not None:
            return set(self.shard_ids)
        return set(range(self.shard_count or 1))

    def name(self) -> str:
        """`instance b (host h, pid 123)`, for a line about this process."""
        return f"instance {self.instance or '(unnamed)'} (host {self.host}, pid {self.pid})"


def conflict(mine: Process, other: Process) -> str | None:
    """The one line that says why `mine` cannot run beside `other` on one
    store, or None when they agree (see the module docstring)."""
    if mine.data_dir != other.data_dir:
        return (
            f"data_dir: {mine.data_dir} here, {other.data_dir} in {other.name()}: "
            "processes on one store share one data_dir"
        )
    if mine.telegram and other.telegram:
        return (
            f"telegram: {other.name()} already polls Telegram on this store; "
            "set adapters.telegram.token in one process only"
        )
    if not (mine.discord and other.discord):
        return None
    if mine.shard_count != other.shard_count:
        return (
            f"discord: shard_count {mine.shard_count or 'unset'} here, "
            f"{other.shard_count or 'unset'} in {other.name()}: every process sets the same"
        )
    if both := sorted(mine.shards() & other.shards()):
        return (
            f"discord: shard {both[0]} is {other.name()}'s too: give each process "
            "shard_ids of its own"
        )
    return None


def _row(values: Sequence[object]) -> Process:
    instance, host, pid, data_dir, telegram, discord, count, ids = values[:8]
    shard_ids = tuple(int(i) for i in str(ids).split(",")) if ids else None
    shard_count = None if count is None else int(str(count))
    return Process(str(instance), str(host), int(str(pid)), str(data_dir), bool(telegram),
                   bool(discord), shard_count, shard_ids)  # fmt: skip


def live_others(conn: Conn, me: Process, now: float) -> list[Process]:
    """The rows of the other live processes (refreshed within `STALE_S` of
    `now`; a row of `me`'s instance is a dead run's, or `me`'s own)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM processes WHERE instance <> ? AND updated >= ? ORDER BY instance",
        (me.instance, now - STALE_S),
    ).fetchall()
    return [_row(row) for row in rows]


def first_conflict(me: Process, others: Sequence[Process]) -> str | None:
    """The line of the first of `others` that `me` cannot run beside, or None."""
    return next((line for other in others if (line := conflict(me, other))), None)


def refusal(url: str, me: Process, timeouts: postgres.Timeouts | None = None) -> str | None:
    """The line `Topology.join` would refuse `me` with now on the PostgreSQL
    store at `url`, read on a read-only connection that registers nothing and
    makes no table (`soulbot check`); None when it would not (no store made
    yet included). Raises StorageError when the server cannot be reached or used."""
    conn = postgres.reading(url, timeouts)
    try:
        if not conn.execute("SELECT to_regclass('processes') IS NOT NULL").fetchone()[0]:
            return None
        return first_conflict(me, live_others(conn, me, time.time()))
    finally:
        conn.close()


class Topology:
    """This process's row of `processes`: `join` at start, `leave` at a clean stop."""

    def __init__(self, db: Database, me: Process, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._me = me
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    async def join(self) -> None:
        """Check the live processes against this one and register it, then keep
        its row fresh. Raises TopologyConflict (nothing registered) on the
        first conflict, what the store raised otherwise, RuntimeError when
        called twice."""
        if self._task is not None:
            raise RuntimeError("Topology.join() may run only once")
        await self._db.run(self._register)
        self._task = asyncio.create_task(self._keep(), name="topology.refresh")

    def _register(self, conn: Conn) -> None:
        me = self._me
        now = self._clock()
        with conn.transaction(lock="processes"):
            if line := first_conflict(me, live_others(conn, me, now)):
                raise TopologyConflict(line)
            ids = ",".join(map(str, me.shard_ids)) if me.shard_ids is not None else None
            conn.execute(
                f"INSERT INTO processes ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (instance) DO UPDATE SET host = excluded.host, pid = excluded.pid, "
                "data_dir = excluded.data_dir, telegram = excluded.telegram, "
                "discord = excluded.discord, shard_count = excluded.shard_count, "
                "shard_ids = excluded.shard_ids, updated = excluded.updated",
                (me.instance, me.host, me.pid, me.data_dir, me.telegram, me.discord,
                 me.shard_count, ids, now),
            )  # fmt: skip

    async def others(self) -> list[Process]:
        """The other live processes on the store now. Raises what the store raised."""
        return await self._db.run(lambda conn: live_others(conn, self._me, self._clock()))

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            try:
                await self.refresh()
            except Exception as exc:
                log.warning("topology.refresh_failed", error_class=type(exc).__name__,
                            error=str(exc))  # fmt: skip

    async def refresh(self) -> None:
        """Mark this process's row alive now. Raises what the store raised."""
        me, now = self._me, self._clock()
        await self._db.run(lambda conn: conn.execute(
            "UPDATE processes SET updated = ? WHERE instance = ? AND host = ? AND pid = ?",
            (now, me.instance, me.host, me.pid),
        ))  # fmt: skip

    async def leave(self) -> None:
        """Stop the refresh and delete this process's row; idempotent. A store
        that fails it is logged (`topology.refresh_failed`): the row goes stale."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        me = self._me
        try:
            await self._db.run(lambda conn: conn.execute(
                "DELETE FROM processes WHERE instance = ? AND host = ? AND pid = ?",
                (me.instance, me.host, me.pid),
            ))  # fmt: skip
        except Exception as exc:
            log.warning("topology.refresh_failed", error_class=type(exc).__name__,
                        error=str(exc))  # fmt: skip


async def live(db: Database, clock: Callable[[], float] = time.time) -> list[Process]:
    """The processes registered on the store whose rows are fresh (refreshed
    within STALE_S), by instance: the daemons serving it now, on any host."""
    since = clock() - STALE_S
    rows = await db.run(lambda conn: conn.execute(
        f"SELECT {_COLUMNS} FROM processes WHERE updated >= ? ORDER BY instance", (since,)
    ).fetchall())  # fmt: skip
    return [_row(row) for row in rows]
