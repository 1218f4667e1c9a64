"""The one SQLite database under `data_dir` (WAL mode).

Every query runs on a single worker thread that owns the connection, so the
event loop never waits on the disk and SQLite sees one writer. Each component
keeps its own tables; `SCHEMA` creates them all.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from bot.errors import SoulbotError

T = TypeVar("T")

DB_NAME = "soulbot.db"
# Bump with a migration step in `connect` whenever SCHEMA changes a table.
SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    day TEXT NOT NULL,
    soul TEXT NOT NULL,
    scope TEXT NOT NULL,
    session TEXT NOT NULL,
    user TEXT NOT NULL,
    source TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_creation_input_tokens INTEGER NOT NULL,
    cache_read_input_tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_day_soul ON usage (day, soul);
CREATE INDEX IF NOT EXISTS usage_day_user ON usage (day, user);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    generation INTEGER NOT NULL,
    role TEXT NOT NULL,
    kind TEXT NOT NULL,
    content TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    reply_to INTEGER,
    ts REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS history_session ON history (session, generation, id);
CREATE TABLE IF NOT EXISTS sessions (
    session TEXT PRIMARY KEY,
    generation INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS seen_messages (
    session TEXT NOT NULL,
    message_id TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (session, message_id)
);
"""


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the database at `path` (created when missing), in WAL
    mode, schema in place. Raises SoulbotError for a database written by a newer
    soulbot."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        conn.close()
        raise SoulbotError(
            f"{path}: written by a newer soulbot (schema {version}; this one reads "
            f"{SCHEMA_VERSION})"
        )
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.executescript(SCHEMA)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    return conn


class Database:
    """The async face of the database: `await db.run(fn)` runs `fn(conn)` on
    the database thread. Open once, close once; use after close raises."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._opened = False

    async def open(self) -> None:
        """Open the database. Raises RuntimeError when called twice, SoulbotError
        for a database of a newer soulbot."""
        if self._opened:
            raise RuntimeError("Database.open() was already called")
        self._opened = True
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="soulbot-db")
        loop = asyncio.get_running_loop()
        self._conn = await loop.run_in_executor(self._executor, connect, self.path)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(conn)` on the database thread. Raises RuntimeError when closed."""
        if self._executor is None or self._conn is None:
            raise RuntimeError("the database is not open")
        conn = self._conn
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, conn)

    async def close(self) -> None:
        """Close the connection; safe to call twice."""
        if self._executor is None:
            return
        executor, conn = self._executor, self._conn
        self._executor, self._conn = None, None
        if conn is not None:
            await asyncio.get_running_loop().run_in_executor(executor, conn.close)
        executor.shutdown(wait=True)
