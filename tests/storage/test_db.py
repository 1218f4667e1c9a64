"""The database thread: batches, errors, lifecycle, schema version."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from bot.errors import SoulbotError, StoreUnavailable
from bot.storage.db import SCHEMA_VERSION, Database, connect
from bot.storage.sql import Conn
from tests.engines import SERVER, postgres_schema


async def test_many_calls_at_once_each_get_their_answer(db: Database) -> None:
    def insert(i: int) -> Callable[[Conn], str]:
        def call(c: Conn) -> str:
            c.execute("INSERT INTO seen_messages (session, message_id, ts) VALUES ('s', ?, 0)",
                      (str(i),))  # fmt: skip
            return str(c.execute("SELECT message_id FROM seen_messages WHERE message_id = ?",
                                 (str(i),)).fetchone()[0])  # fmt: skip

        return call

    answers = await asyncio.gather(*(db.run(insert(i)) for i in range(300)))
    assert answers == [str(i) for i in range(300)]
    count = await db.run(lambda c: c.execute("SELECT COUNT(*) FROM seen_messages").fetchone()[0])
    assert count == 300


async def test_a_failing_call_fails_alone(db: Database) -> None:
    def broken(conn: Conn) -> None:
        conn.execute("SELECT * FROM no_such_table")

    good, bad = await asyncio.gather(
        db.run(lambda c: c.execute("SELECT 41 + 1").fetchone()[0]),
        db.run(broken),
        return_exceptions=True,
    )
    assert good == 42
    assert isinstance(bad, sqlite3.OperationalError | psycopg.errors.UndefinedTable), bad


async def test_lifecycle(tmp_path: Path) -> None:
    database = Database(tmp_path / "x.db")
    with pytest.raises(RuntimeError, match="not open"):
        await database.run(lambda c: None)
    await database.open()
    with pytest.raises(RuntimeError, match="already called"):
        await database.open()
    pending = asyncio.ensure_future(database.run(lambda c: c.execute("SELECT 1").fetchone()[0]))
    await asyncio.sleep(0)  # the call is queued
    await database.close()
    assert await pending == 1  # queued before close: still answered
    await database.close()
    with pytest.raises(RuntimeError, match="not open"):
        await database.run(lambda c: None)
    conn = sqlite3.connect(tmp_path / "x.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


async def test_a_database_from_a_newer_soulbot_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SoulbotError, match="written by a newer soulbot"):
        connect(path)
    database = Database(path)
    with pytest.raises(SoulbotError, match="written by a newer soulbot"):
        await database.open()
    await database.close()


async def test_the_database_is_private_whatever_the_umask(tmp_path: Path) -> None:
    data = tmp_path / "data"
    old = os.umask(0o022)
    try:
        database = Database(data / "soulbot.db")
        await database.open()
        await database.run(lambda c: c.execute("INSERT INTO sessions VALUES ('s', 1)"))
        names = sorted(p.name for p in data.iterdir())
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in data.iterdir()}
        await database.close()
    finally:
        os.umask(old)
    assert names == ["soulbot.db", "soulbot.db-shm", "soulbot.db-wal"]
    assert modes == dict.fromkeys(names, 0o600)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700


def test_a_version_1_file_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    conn = connect(path)
    conn.execute("DROP INDEX IF EXISTS history_live")
    conn.execute("DROP INDEX IF EXISTS seen_messages_ts")
    conn.execute("DROP TABLE IF EXISTS memory_folds")
    conn.execute("DROP TABLE IF EXISTS sent_messages")
    conn.execute("ALTER TABLE history DROP COLUMN delivered")
    conn.execute("DROP TABLE IF EXISTS session_bindings")
    conn.execute(
        "INSERT INTO history (session, generation, role, kind, content, tokens, ts) "
        "VALUES ('s', 0, 'user', 'message', 'kept', 1, 0)"
    )
    conn.execute("PRAGMA user_version=1")
    conn.close()
    conn = connect(path)
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    content = conn.execute("SELECT content, delivered FROM history").fetchall()
    conn.close()
    assert version == SCHEMA_VERSION == 10
    assert {"history_live", "history_recent", "seen_messages_ts", "memory_folds_page",
            "sent_messages_ts"} <= indexes  # fmt: skip
    assert {"memory_folds", "sent_messages", "session_bindings"} <= tables
    assert content == [("kept", 1)]


async def test_a_lost_postgresql_connection_is_made_again() -> None:
    with postgres_schema() as url:
        database = Database(url)
        await database.open()
        try:
            pid = await database.run(lambda c: c.execute("SELECT pg_backend_pid()").fetchone()[0])
            with psycopg.connect(SERVER, autocommit=True) as admin:  # a server restart, say
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            with pytest.raises(StoreUnavailable) as lost:  # a failure that passes
                await database.run(lambda c: c.execute("SELECT 1").fetchone())
            assert isinstance(lost.value.__cause__, psycopg.OperationalError)
            again = await database.run(lambda c: c.execute("SELECT pg_backend_pid()").fetchone())
        finally:
            await database.close()
    assert again[0] != pid


SCHEMA_5_USAGE = """CREATE TABLE usage (
    id INTEGER PRIMARY KEY, ts REAL NOT NULL, day TEXT NOT NULL, soul TEXT NOT NULL,
    scope TEXT NOT NULL, session TEXT NOT NULL, user TEXT NOT NULL, source TEXT NOT NULL,
    model TEXT NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
    cache_creation_input_tokens INTEGER NOT NULL, cache_read_input_tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL
)"""
OLD_ROW = (
    'INSERT INTO usage (ts, day, soul, scope, session, "user", source, model, input_tokens, '
    "output_tokens, cache_creation_input_tokens, cache_read_input_tokens, cost_usd) "
    "VALUES (0, '2025-03-10', 'lark', 'shared', 's', '', 'turn', 'm', 10, 2, 3, 4, 0.5)"
)
CACHE = "SELECT cache_creation_input_tokens, cache_read_input_tokens FROM usage ORDER BY id"


def schema_5(target: Path | str) -> None:
    """Take the store at `target` (made by this soulbot) back to schema 5: cache
    columns NOT NULL, one usage row."""
    if isinstance(target, Path):
        conn = sqlite3.connect(target)
        conn.execute("DROP TABLE usage")
        conn.execute(SCHEMA_5_USAGE)
        conn.execute(OLD_ROW)
        conn.execute("PRAGMA user_version=5")
        conn.commit()
        conn.close()
        return
    with psycopg.connect(target, autocommit=True) as raw:
        raw.execute(
            "ALTER TABLE usage ALTER COLUMN cache_creation_input_tokens SET NOT NULL, "
            "ALTER COLUMN cache_read_input_tokens SET NOT NULL"
        )
        raw.execute(OLD_ROW)
        raw.execute("UPDATE soulbot_schema SET version = 5")


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_schema_5_store_keeps_its_usage_and_takes_unknown_cache_figures(
    tmp_path: Path, engine: str
) -> None:
    with contextlib.ExitStack() as stack:
        target: Path | str = tmp_path / "soulbot.db"
        if engine == "postgresql":
            target = stack.enter_context(postgres_schema())
        database = Database(target)
        await database.open()
        await database.close()
        schema_5(target)
        database = Database(target)
        await database.open()
        try:
            insert = OLD_ROW.replace("3, 4, 0.5", "NULL, NULL, 0.5")
            await database.run(lambda c: c.execute(insert))
            rows = await database.run(lambda c: c.execute(CACHE).fetchall())
            indexes = await database.run(
                lambda c: c.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'usage'"
                    if engine == "sqlite"
                    else "SELECT indexname FROM pg_indexes WHERE tablename = 'usage'"
                ).fetchall()
            )
        finally:
            await database.close()
    assert [tuple(row) for row in rows] == [(3, 4), (None, None)]
    assert {"usage_day_soul", "usage_day_user"} <= {name for (name,) in indexes}


SCHEMA_8_HISTORY = """CREATE TABLE history (
    id INTEGER PRIMARY KEY, session TEXT NOT NULL, generation INTEGER NOT NULL,
    role TEXT NOT NULL, kind TEXT NOT NULL, content TEXT NOT NULL, tokens INTEGER NOT NULL,
    reply_to INTEGER, ts REAL NOT NULL, delivered INTEGER NOT NULL DEFAULT 0
)"""
HISTORY_ROW = (
    "INSERT INTO history (session, generation, role, kind, content, tokens, ts, delivered) "
    "VALUES ('s', 0, 'user', 'message', ?, 1, 0, ?)"
)


def test_a_schema_8_history_keeps_its_rows_and_never_gives_an_id_twice(tmp_path: Path) -> None:
    path = tmp_path / "v8.db"
    connect(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE history")
    conn.execute(SCHEMA_8_HISTORY)
    conn.executemany(HISTORY_ROW, [("one", 1), ("two", 0), ("three", 1)])
    conn.execute("DELETE FROM history WHERE content = 'three'")
    conn.execute("PRAGMA user_version=8")
    conn.commit()
    conn.close()
    conn = connect(path)
    rows = conn.execute("SELECT id, content, delivered FROM history ORDER BY id").fetchall()
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    conn.execute("DELETE FROM history WHERE content = 'two'")
    conn.execute(HISTORY_ROW, ("four", 0))
    (after,) = conn.execute("SELECT id FROM history WHERE content = 'four'").fetchone()
    conn.close()
    assert rows == [(1, "one", 1), (2, "two", 0)]
    assert {"history_session", "history_live"} <= indexes
    assert after == 3  # above every id the table held when it was migrated, never 2 again
