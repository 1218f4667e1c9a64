"""The one SQLite database under `data_dir` (WAL mode).

Every query runs on a single worker thread that owns the connection, so the
event loop never waits on the disk and SQLite sees one writer. Each component
keeps its own tables; `SCHEMA` creates them all. A new file is made 0600 in a
folder made 0700, whatever the umask; SQLite gives its -wal and -shm files the
database file's mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bot.errors import SoulbotError
from bot.storage.files import PRIVATE_FOLDER, create_private, make_folders

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
CREATE TABLE IF NOT EXISTS paired_users (
    platform TEXT NOT NULL,
    user_id TEXT NOT NULL,
    approved_at REAL NOT NULL,
    approved_by TEXT NOT NULL,
    PRIMARY KEY (platform, user_id)
);
CREATE TABLE IF NOT EXISTS pairing_codes (
    code TEXT PRIMARY KEY,
    platform TEXT NOT NULL,
    user_id TEXT NOT NULL,
    user_name TEXT NOT NULL,
    chat_id TEXT NOT NULL,
    expires REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS heartbeat_marks (
    session TEXT PRIMARY KEY,
    entry INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS memory_scopes (
    id INTEGER PRIMARY KEY,
    soul TEXT NOT NULL,
    scope TEXT NOT NULL,
    next_seq INTEGER NOT NULL DEFAULT 0,
    rows INTEGER NOT NULL DEFAULT 0,
    words INTEGER NOT NULL DEFAULT 0,
    last_trace INTEGER NOT NULL DEFAULT 0,
    UNIQUE (soul, scope)
);
CREATE TABLE IF NOT EXISTS memory (
    id INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    speaker TEXT,
    name TEXT NOT NULL,
    page TEXT,
    text TEXT NOT NULL,
    created_at REAL NOT NULL,
    entities TEXT NOT NULL,
    words INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_page ON memory (page, id) WHERE page IS NOT NULL;
CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(
    text, content='memory', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
"""


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the database at `path` (created when missing, private:
    see the module's docstring), in WAL mode, schema in place. Raises
    SoulbotError for a database written by a newer soulbot, OSError when the
    file or its folder cannot be made."""
    make_folders(path.parent, PRIVATE_FOLDER)
    create_private(path)
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
    the database thread. Open once, close once; use after close raises.

    The thread takes every call queued since its last wake-up and answers the
    whole batch with one hand-back to the event loop: under load, hundreds of
    tiny statements cost one thread switch instead of hundreds.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._ready = False
        self._opened = False

    async def open(self) -> None:
        """Open the database. Raises RuntimeError when called twice, SoulbotError
        for a database of a newer soulbot."""
        if self._opened:
            raise RuntimeError("Database.open() was already called")
        self._opened = True
        self._thread = threading.Thread(target=self._serve, name="soulbot-db", daemon=True)
        self._thread.start()
        await self._submit(lambda conn: None)  # connects, or raises why it cannot
        self._ready = True

    def _serve(self) -> None:
        conn: sqlite3.Connection | None = None
        while True:
            batch = [self._calls.get()]
            while not self._calls.empty():
                batch.append(self._calls.get_nowait())
            results: list[tuple[_Call, Any, BaseException | None]] = []
            stop = False
            for call in batch:
                if call is None:
                    stop = True
                    continue
                try:
                    if conn is None:
                        conn = connect(self.path)
                    results.append((call, call.fn(conn), None))
                except BaseException as exc:
                    results.append((call, None, exc))
            if results:
                loop = results[0][0].loop
                with contextlib.suppress(RuntimeError):  # the loop is gone
                    loop.call_soon_threadsafe(_settle, results)
            if stop:
                if conn is not None:
                    conn.close()
                return

    def _submit(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put(_Call(fn, future, loop))
        return future

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(conn)` on the database thread. Raises RuntimeError when closed."""
        if not self._ready:
            raise RuntimeError("the database is not open")
        return await self._submit(fn)

    async def close(self) -> None:
        """Finish the queued calls and close the connection; safe to call twice."""
        thread, self._thread, self._ready = self._thread, None, False
        if thread is None:
            return
        self._calls.put(None)
        await asyncio.to_thread(thread.join)


@dataclass(frozen=True)
class _Call:
    fn: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


def _settle(results: list[tuple[_Call, Any, BaseException | None]]) -> None:
    for call, value, error in results:
        if call.future.done():  # cancelled while queued
            continue
        if error is not None:
            call.future.set_exception(error)
        else:
            call.future.set_result(value)
