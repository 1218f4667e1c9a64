"""The two store engines for tests: SQLite in a temporary folder, and a
PostgreSQL schema of its own per test on the server at `SOULBOT_TEST_POSTGRES`
(default: the local server on 127.0.0.1:5432, database `test`, user postgres,
trust auth). Where no server answers, PostgreSQL tests are skipped, saying so;
under CI (`CI` set) they fail instead, so a missing server is never silent."""

from __future__ import annotations

import functools
import os
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from bot.storage.sql import Conn, Cursor, Params, SqliteConn

SERVER = os.environ.get("SOULBOT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@functools.cache
def unreachable() -> str | None:
    """Why the test server cannot be used, or None when it can."""
    try:
        with psycopg.connect(SERVER, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"no PostgreSQL at {SERVER}: {str(exc).strip().splitlines()[0]}"
    return None


def need_postgres() -> None:
    """Skip the test (fail under CI) when the server cannot be used."""
    reason = unreachable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@contextmanager
def scratch_schema(server: str) -> Iterator[str]:
    """A store URL on `server` whose tables live in a new schema, dropped
    afterwards (tests and benchmarks start each store empty this way)."""
    name = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    try:
        yield f"{server}{'&' if '?' in server else '?'}options={quote(f'-csearch_path={name}')}"
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A store URL of a new schema on the test server (skipped without one)."""
    need_postgres()
    with scratch_schema(SERVER) as url:
        yield url


def raw_sqlite(conn: Conn) -> sqlite3.Connection:
    """The sqlite3 connection under a SQLite `Conn` (for SQLite-only checks)."""
    assert isinstance(conn, SqliteConn), conn
    return conn.raw


class Counting:
    """A `Conn` that counts the statements made through it in `count[0]` (a
    test of how many a store call makes, rather than how long it takes)."""

    def __init__(self, conn: Conn, count: list[int]) -> None:
        self._conn, self._count, self.engine = conn, count, conn.engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        self._count[0] += 1
        return self._conn.execute(sql, params)
