from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from bot.storage.db import Database
from tests.engines import postgres_schema

# httpx (inside the SDKs) honours proxy variables; tests talk to 127.0.0.1 only.
os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> AsyncIterator[Database]:
    """An open SQLite database in tmp_path, closed after the test."""
    database = Database(tmp_path / "soulbot.db")
    await database.open()
    yield database
    await database.close()


@pytest.fixture(params=["sqlite", "postgresql"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """An open store of each engine (the contract every store keeps on both),
    closed after the test: SQLite in tmp_path, PostgreSQL in a schema of its own."""
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            database = Database(tmp_path / "soulbot.db")
        else:
            database = Database(stack.enter_context(postgres_schema()))
        await database.open()
        try:
            yield database
        finally:
            await database.close()


@pytest.fixture
def hold_lock() -> Iterator[Callable[[Path], None]]:
    """`hold(path)` takes the write lock of the SQLite database at `path` until the
    test ends (another process that must write waits past its busy timeout)."""
    held: list[sqlite3.Connection] = []

    def hold(path: Path) -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        held.append(conn)

    yield hold
    for conn in held:
        conn.close()


@pytest.fixture
async def two() -> AsyncIterator[tuple[Database, Database]]:
    """Two processes on one PostgreSQL store: two `Database` objects (two
    connections) on a schema of its own, closed after the test."""
    with postgres_schema() as url:
        first, second = Database(url), Database(url)
        await first.open()
        await second.open()
        try:
            yield first, second
        finally:
            await first.close()
            await second.close()
