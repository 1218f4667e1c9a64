"""The store: one SQLite database under `data_dir` (WAL mode), or PostgreSQL.

Every query runs on a single worker thread that owns the connection, so the
event loop never waits on the disk and SQLite sees one writer. Each component
keeps its own tables; `SCHEMA` creates them all (bot/storage/postgres.py has
PostgreSQL's). The stores write their SQL once, against `Conn`
(bot/storage/sql.py), and run on either engine. A new file is made 0600 in a
folder made 0700, whatever the umask; SQLite gives its -wal and -shm files the
database file's mode. A data_dir or a database soulbot cannot use (an
operator's fault) is a StorageError naming the path and what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import queue
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog

from bot.errors import SoulbotError, StorageError, StoreUnavailable
from bot.storage import postgres
from bot.storage.files import PRIVATE_FOLDER, create_private, make_folders
from bot.storage.sql import Conn, Engine, SqliteConn

T = TypeVar("T")
log = structlog.get_logger(__name__)

DB_NAME = "soulbot.db"
# Bump whenever SCHEMA changes. `connect` brings an older file up to date: SCHEMA's
# IF NOT EXISTS statements add what is new (tables, indexes); a changed table needs a
# migration step of its own in `connect`.
# 2: the indexes history_live (the rows a session loads: compacted ones are not even
#    visited) and seen_messages_ts (the prune of delivered ids past their window); the
#    table reply_addresses.
# 3: the table memory_folds (which traces a compile folded into which wiki page), so
#    `/memory drop` can take a page back with the traces it was made of.
# 4: the table sent_messages (the platform ids of the bot's replies, with their text), so
#    a reply to one of them is known, and quoted, after a restart too.
# 5: PostgreSQL's budget_totals keeps a row for each process (`instance`), so one
#    process's call never waits on another's uncommitted total (SQLite: no change).
# 6: usage's cache columns may be NULL: a figure the model server did not report
#    (another server of the Messages API), unknown rather than 0 (`_nullable_cache`).
# 7: history.delivered: a reply row is stored with 0 and set to 1 once sent, so a reply
#    a crash kept from its chat is sent at the next start (rows before it count as sent).
# 8: the table session_bindings (the soul and scope a session's history was said under),
#    so a changed binding starts a new conversation.
# The tables memory_erasures (bot/cluster/wikilock.py), session_leases
# (bot/cluster/leases.py) and session_moods (bot/chat/moods.py) came without a version of
# their own: IF NOT EXISTS makes them at every open, on either engine.
# 9: SQLite's history ids are AUTOINCREMENT: an id is never given twice, so a row written
#    after an erase (`forget`) is above every id before it, the ones a live session holds
#    included (`_autoincrement_history`; PostgreSQL's identity never repeats already).
# 10: the index history_recent (a person's messages by time), so the start's search for
#     messages a crash left unanswered reads the recent rows only, not every session.
# The table voice_usage (bot/model/usage.py: seconds of voice notes heard, characters
# spoken) came without a version of its own, as memory_erasures did; so did reminders and
# person_zones (bot/chat/reminder_store.py), check_ins_sent and check_in_optouts
# (bot/chat/check_ins.py); so did web_tokens
# (bot/chat/weblogin.py: the web console's sign-in links and sessions, hashed), and
# chat_places (bot/chat/chat_places.py: whether a `chat:` scope is a group or private).
SCHEMA_VERSION = 10

_USAGE = """
CREATE TABLE IF NOT EXISTS {name} (
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
    cache_creation_input_tokens INTEGER,
    cache_read_input_tokens INTEGER,
    cost_usd REAL NOT NULL
);
"""

_HISTORY = """
CREATE TABLE IF NOT EXISTS {name} (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL,
    generation INTEGER NOT NULL,
    role TEXT NOT NULL,
    kind TEXT NOT NULL,
    content TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    reply_to INTEGER,
    ts REAL NOT NULL,
    delivered INTEGER NOT NULL DEFAULT 1
);
"""
_HISTORY_COLUMNS = "id, session, generation, role, kind, content, tokens, reply_to, ts, delivered"

SCHEMA = (
    _USAGE.format(name="usage")
    + _HISTORY.format(name="history")
    + """
CREATE INDEX IF NOT EXISTS usage_day_soul ON usage (day, soul);
CREATE INDEX IF NOT EXISTS usage_day_user ON usage (day, user);
CREATE INDEX IF NOT EXISTS history_session ON history (session, generation, id);
CREATE INDEX IF NOT EXISTS history_live ON history (session, generation, id)
    WHERE kind IN ('message', 'summary');
CREATE INDEX IF NOT EXISTS history_recent ON history (ts)
    WHERE kind = 'message' AND role = 'user';
CREATE TABLE IF NOT EXISTS sessions (
    session TEXT PRIMARY KEY,
    generation INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS session_bindings (
    session TEXT PRIMARY KEY,
    soul TEXT NOT NULL,
    scope TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS reply_addresses (
    session TEXT PRIMARY KEY,
    inbound TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS seen_messages (
    session TEXT NOT NULL,
    message_id TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (session, message_id)
);
CREATE INDEX IF NOT EXISTS seen_messages_ts ON seen_messages (ts);
CREATE TABLE IF NOT EXISTS sent_messages (
    session TEXT NOT NULL,
    message_id TEXT NOT NULL,
    text TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (session, message_id)
);
CREATE INDEX IF NOT EXISTS sent_messages_ts ON sent_messages (ts);
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
CREATE TABLE IF NOT EXISTS memory_folds (
    trace INTEGER NOT NULL,
    page TEXT NOT NULL,
    PRIMARY KEY (trace, page)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS memory_folds_page ON memory_folds (page, trace);
CREATE TABLE IF NOT EXISTS memory_erasures (
    soul TEXT NOT NULL,
    scope TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    PRIMARY KEY (soul, scope)
);
CREATE TABLE IF NOT EXISTS session_leases (
    session TEXT PRIMARY KEY,
    instance TEXT NOT NULL,
    run TEXT NOT NULL,
    expires REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS reminders (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    soul TEXT NOT NULL,
    scope TEXT NOT NULL,
    session TEXT NOT NULL,
    platform TEXT NOT NULL,
    user_id TEXT NOT NULL,
    address TEXT NOT NULL,
    text TEXT NOT NULL,
    zone TEXT NOT NULL,
    due REAL NOT NULL,
    created REAL NOT NULL,
    claimed_by TEXT,
    claimed_until REAL,
    kind TEXT NOT NULL DEFAULT 'reminder'
);
CREATE INDEX IF NOT EXISTS reminders_due ON reminders (due);
CREATE INDEX IF NOT EXISTS reminders_person ON reminders (platform, user_id);
CREATE TABLE IF NOT EXISTS check_ins_sent (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    platform TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session TEXT NOT NULL,
    entry INTEGER NOT NULL,
    ts REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS check_ins_sent_person ON check_ins_sent (platform, user_id, ts);
CREATE TABLE IF NOT EXISTS check_in_optouts (
    platform TEXT NOT NULL,
    user_id TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (platform, user_id)
);
CREATE TABLE IF NOT EXISTS person_zones (
    platform TEXT NOT NULL,
    user_id TEXT NOT NULL,
    zone TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (platform, user_id)
);
CREATE TABLE IF NOT EXISTS chat_places (
    scope TEXT PRIMARY KEY,
    private INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS web_tokens (
    hash TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    admin TEXT NOT NULL,
    csrf TEXT NOT NULL,
    expires REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS session_moods (
    session TEXT PRIMARY KEY,
    soul TEXT NOT NULL,
    mood TEXT NOT NULL,
    ts REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS voice_usage (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    day TEXT NOT NULL,
    soul TEXT NOT NULL,
    scope TEXT NOT NULL,
    session TEXT NOT NULL,
    user TEXT NOT NULL,
    source TEXT NOT NULL,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    amount REAL NOT NULL,
    cost_usd REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS voice_usage_day ON voice_usage (day, soul);
CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(
    text, content='memory', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
"""
)


# SQLite's primary result codes (the low byte of an extended one).
_BUSY, _LOCKED, _READONLY, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 5, 6, 8, 11, 13, 14, 26


_READ_ONLY = (
    "read-only: soulbot must write the file and its folder (the -wal and -shm files go beside it)"
)
_FILE_IN_THE_WAY = (
    "a file is where a folder must be: data_dir must be a folder, or a path to make one"
)
_CANNOT_WRITE = "data_dir must be a folder this user may create and write"


def _os_problem(exc: OSError) -> str:
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        return _FILE_IN_THE_WAY
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot be written ({exc.strerror}): {_CANNOT_WRITE}"
    return f"cannot be made or written: {exc.strerror}"


def _sqlite_problem(exc: sqlite3.Error) -> str:
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code in (_NOTADB, _CORRUPT):
        return (
            "not a SQLite database, or a damaged one: move it aside (soulbot then starts "
            "an empty one) or put a backup in its place"
        )
    if code in (_BUSY, _LOCKED):
        return (
            "locked by another process for over 5 s (another soulbot, a sqlite3 shell?): "
            "stop it and start again"
        )
    if code == _READONLY:
        return _READ_ONLY
    if code == _FULL:
        return "the disk is full"
    if code == _CANTOPEN:
        return f"cannot be opened ({exc}): data_dir must be a folder this user may write"
    return f"cannot be used: {exc}"


def prepare_data_dir(folder: Path) -> None:
    """Make the folder `folder` (data_dir) when it is missing (PRIVATE_FOLDER,
    and the folders above it) and check that this process may write in it.
    Raises StorageError naming the folder (`data_dir_problem`, or what the
    making met)."""
    problem = data_dir_problem(folder)
    if problem is not None:
        raise problem
    try:
        make_folders(folder, PRIVATE_FOLDER)
    except OSError as exc:
        raise StorageError(Path(exc.filename or folder), _os_problem(exc)) from exc


def data_dir_problem(folder: Path) -> StorageError | None:
    """Why `prepare_data_dir(folder)` would fail, found without making or
    changing anything: a file where the folder, or one above it, must be; the
    folder, or the nearest one above it when it is missing, not writable by
    this process. None when it would succeed."""
    for path in (folder, *folder.parents):
        try:
            info = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            return StorageError(folder, _os_problem(exc))
        if not stat.S_ISDIR(info.st_mode):
            return StorageError(folder, _FILE_IN_THE_WAY)
        if not os.access(path, os.W_OK | os.X_OK):
            return StorageError(folder, f"cannot be written: {_CANNOT_WRITE}")
        return None
    return None


def store_problem(data_dir: Path, url: str | None) -> SoulbotError | None:
    """Why the store of a config (`store_target`) could not be opened, found
    without making or changing anything: `data_dir_problem` of data_dir (and of
    a SQLite file's folder); then, when the SQLite file is there, a StorageError
    when it is not a database, is damaged, read-only or locked past the busy
    timeout (`connect`'s words), a SoulbotError when a newer soulbot wrote it.
    A PostgreSQL server is not asked. None when no problem is found."""
    target = store_target(data_dir, url)
    folders = [data_dir] if isinstance(target, str) else [data_dir, target.parent]
    for folder in dict.fromkeys(folders):
        problem = data_dir_problem(folder)
        if problem is not None:
            return problem
    if isinstance(target, str) or not os.path.lexists(target):
        return None
    if not os.access(target, os.R_OK | os.W_OK):  # SQLite would open it read-only
        return StorageError(target, _READ_ONLY)
    try:
        conn = sqlite3.connect(
            f"{target.absolute().as_uri()}?mode=rw", uri=True, isolation_level=None
        )
        try:
            conn.execute("PRAGMA busy_timeout=5000")
            _check_version(conn, target)
            conn.execute("BEGIN IMMEDIATE")  # the write lock `connect` takes, given back
            conn.execute("ROLLBACK")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return StorageError(target, _sqlite_problem(exc))
    except SoulbotError as exc:
        return exc
    return None


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the database at `path` (created when missing, private:
    see the module's docstring), in WAL mode, schema in place. Raises
    StorageError naming the path and what to do when data_dir cannot be made
    or written, or the file is not a database, is damaged, read-only, or
    locked past the busy timeout; SoulbotError for a database written by a
    newer soulbot."""
    prepare_data_dir(path.parent)
    try:
        create_private(path)
    except OSError as exc:
        raise StorageError(path.parent, _os_problem(exc)) from exc
    try:
        return _open(path)
    except sqlite3.Error as exc:
        raise StorageError(path, _sqlite_problem(exc)) from exc


def store_target(data_dir: Path, url: str | None) -> Path | str:
    """What `Database` opens for a config: `store.url` (a PostgreSQL URL, or
    the file of a `sqlite:///` one), else `data_dir`'s soulbot.db."""
    if url is None:
        return data_dir / DB_NAME
    if postgres.is_postgres(url):
        return url
    return Path(url.removeprefix("sqlite:///"))


def open_conn(target: Path | str, timeouts: postgres.Timeouts | None = None) -> Conn:
    """A connection to the store at `target` (a SQLite file, or a PostgreSQL
    URL limited by `timeouts`), schema in place. Raises as `connect` or
    `postgres.connect` do."""
    if isinstance(target, str):
        return postgres.connect(target, SCHEMA_VERSION, timeouts)
    return SqliteConn(connect(target))


def _open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        version = _check_version(conn, path)
    except SoulbotError:
        conn.close()
        raise
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=5000")
    if version < 6:
        _nullable_cache(conn)
    if version < 9:
        _autoincrement_history(conn)
    conn.executescript(SCHEMA)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    return conn


def _nullable_cache(conn: sqlite3.Connection) -> None:
    """Schema 6: a usage table of before (its cache columns NOT NULL) made again
    with nullable ones, its rows kept (SQLite cannot drop a NOT NULL in place).
    Nothing when there is no such table; the indexes come back with SCHEMA."""
    with _upgrading(conn):
        columns = {row[1]: row[3] for row in conn.execute("PRAGMA table_info(usage)")}
        if columns.get("cache_read_input_tokens"):  # notnull
            _remake(conn, "usage", _USAGE)


def _autoincrement_history(conn: sqlite3.Connection) -> None:
    """Schema 9: a history table of before (ids reused after a delete) made
    again with AUTOINCREMENT ids, its rows and their ids kept (SQLite cannot
    add it in place), so the next id is above the highest kept; a table
    before schema 7 gets its `delivered` column so (its rows count as sent).
    Nothing when there is no such table, or it is made so already; the
    indexes come back with SCHEMA."""
    with _upgrading(conn):
        row = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'history'"
        ).fetchone()
        columns = {info[1] for info in conn.execute("PRAGMA table_info(history)")}
        if row is None or ("AUTOINCREMENT" in row[0].upper() and "delivered" in columns):
            return
        delivered = "delivered" if "delivered" in columns else "1"
        _remake(conn, "history", _HISTORY, _HISTORY_COLUMNS.replace("delivered", delivered))


@contextlib.contextmanager
def _upgrading(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction for a schema step, rolled back when it fails."""
    conn.execute("BEGIN IMMEDIATE")  # another process upgrading at once waits here
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _remake(conn: sqlite3.Connection, table: str, create: str, select: str = "*") -> None:
    """Make `table` again as the statement `create` (with `{name}`) makes it,
    its rows copied (`select`: their columns in the new table's order)."""
    conn.execute(create.format(name=f"{table}_new"))
    conn.execute(f"INSERT INTO {table}_new SELECT {select} FROM {table}")
    conn.execute(f"DROP TABLE {table}")
    conn.execute(f"ALTER TABLE {table}_new RENAME TO {table}")


def _check_version(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version of the database at `path`. Raises SoulbotError when a
    newer soulbot wrote it."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise SoulbotError(
            f"{path}: written by a newer soulbot (schema {version}; this one reads "
            f"{SCHEMA_VERSION})"
        )
    return version


class Database:
    """The async face of the store: `await db.run(fn)` runs `fn(conn)` on the
    database thread, `conn` a `Conn` of the engine `target` names (a SQLite
    file's path, or a PostgreSQL URL). Open once, close once; use after close
    raises. `shared` says the store may be shared by several processes
    (PostgreSQL): what a process keeps in memory may be stale there.

    The thread takes every call queued since its last wake-up and answers the
    whole batch with one hand-back to the event loop: under load, hundreds of
    tiny statements cost one thread switch instead of hundreds.

    One call that waits (a lock another session holds) holds up every call
    behind it: `waiting_s` says for how long, for the health file and the
    metrics; `timeouts` (PostgreSQL's, bot/storage/postgres.py) bound it.
    """

    def __init__(self, target: Path | str, timeouts: postgres.Timeouts | None = None) -> None:
        self.target = target
        self.timeouts = timeouts
        self.engine: Engine = "postgresql" if isinstance(target, str) else "sqlite"
        self.shared = self.engine == "postgresql"
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        # The calls not yet answered, oldest first, with when each was queued
        # (changed on the event loop's thread only).
        self._pending: dict[_Call, float] = {}
        self._thread: threading.Thread | None = None
        self._ready = False
        self._opened = False

    async def open(self) -> None:
        """Open the database. Raises RuntimeError when called twice, StorageError
        when it cannot be made or used (see `connect`), SoulbotError for a
        database of a newer soulbot; the thread is stopped again then."""
        if self._opened:
            raise RuntimeError("Database.open() was already called")
        self._opened = True
        self._thread = threading.Thread(target=self._serve, name="soulbot-db", daemon=True)
        self._thread.start()
        try:
            await self._submit(lambda conn: None)  # connects, or raises why it cannot
        except BaseException:
            await self.close()
            raise
        self._ready = True

    def _serve(self) -> None:
        conn: Conn | None = None
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
                        conn = open_conn(self.target, self.timeouts)
                    results.append((call, call.fn(conn), None))
                except BaseException as exc:
                    results.append((call, None, self._passing(exc)))
                    if conn is not None and conn.broken():
                        conn.close()  # a server gone (a restart, a network cut): the next
                        conn = None  # call connects again
            if results:
                loop = results[0][0].loop
                with contextlib.suppress(RuntimeError):  # the loop is gone
                    loop.call_soon_threadsafe(_settle, results)
            if stop:
                if conn is not None:
                    conn.close()
                return

    def _passing(self, exc: BaseException) -> BaseException:
        """`exc`, or StoreUnavailable (from it) when it is PostgreSQL's timeout or
        a lost connection (psycopg's OperationalError): a failure that passes."""
        psycopg = sys.modules.get("psycopg")  # never imported on SQLite
        if psycopg is None or not isinstance(exc, psycopg.OperationalError):
            return exc
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = postgres.shown(self.target) if isinstance(self.target, str) else self.target
        error = StoreUnavailable(
            where, f"{type(exc).__name__}: {postgres.without_password(reason)}"
        )
        error.__cause__ = exc
        return error

    def _submit(self, fn: Callable[[Conn], T]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        call = _Call(fn, future, loop, self._pending)
        self._pending[call] = time.monotonic()
        self._calls.put(call)
        return future

    def waiting_s(self) -> float:
        """How long the oldest call queued or running has waited for its answer,
        in seconds; 0.0 when none waits. Safe to call from any thread."""
        try:
            since = next(iter(self._pending.values()))
        except (StopIteration, RuntimeError):  # none; or changed while read (another thread)
            return 0.0
        return max(0.0, time.monotonic() - since)

    async def run(self, fn: Callable[[Conn], T]) -> T:
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


@dataclass(frozen=True, eq=False)
class _Call:
    fn: Callable[[Conn], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    pending: dict[_Call, float]  # the database's, this call's entry taken out once answered


def _settle(results: list[tuple[_Call, Any, BaseException | None]]) -> None:
    for call, value, error in results:
        call.pending.pop(call, None)
        if call.future.done():  # cancelled while queued
            continue
        if error is not None:
            call.future.set_exception(error)
        else:
            call.future.set_result(value)
