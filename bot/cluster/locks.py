"""A named lock across every process of a store, for work one process at a
time does (the nightly retention), and the advisory keys the wiki locks take.

On PostgreSQL, a session advisory lock on the process's one connection (the
server drops it when that connection ends); on SQLite, whose processes share
one host, `try_lock` always takes it: the callers' file locks do the rest.
"""

from __future__ import annotations

import hashlib

from bot.storage.db import Database
from bot.storage.sql import Conn


def advisory_key(conn: Conn, name: str) -> int:
    """The 64-bit PostgreSQL advisory lock key of the lock `name` of the store on
    `conn`: its schema is part of it, as advisory locks are the whole database's
    and two stores in two schemas of one database must not share one."""
    (schema,) = conn.execute("SELECT current_schema()").fetchone()
    digest = hashlib.sha256(f"{schema}\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def try_lock(db: Database, name: str) -> bool:
    """Take the lock `name` across every process sharing `db`'s store, without
    waiting: whether it was taken (see the module)."""
    if not db.shared:
        return True
    return bool(
        await db.run(
            lambda c: c.execute(
                "SELECT pg_try_advisory_lock(?)", (advisory_key(c, name),)
            ).fetchone()[0]
        )
    )


async def holds_lock(db: Database, name: str) -> bool:
    """Whether this process's connection holds the lock `name` now: False once
    the connection that took it was lost (the server dropped it with that
    connection); on SQLite always True (see the module)."""
    if not db.shared:
        return True

    def query(conn: Conn) -> bool:
        key = advisory_key(conn, name)  # pg_locks shows a bigint as its high and low 32 bits
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND pid = pg_backend_pid() AND objsubid = 1 "
            "AND classid::bigint = ? AND objid::bigint = ?",
            ((key >> 32) & 0xFFFF_FFFF, key & 0xFFFF_FFFF),
        ).fetchone()
        return bool(row[0])

    return await db.run(query)


async def unlock(db: Database, name: str) -> None:
    """Give back the lock `name` taken by `try_lock`."""
    if db.shared:
        await db.run(
            lambda c: c.execute("SELECT pg_advisory_unlock(?)", (advisory_key(c, name),)).fetchone()
        )
