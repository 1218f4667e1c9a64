"""The one interface every store writes its SQL against, on either engine.

A store function takes a `Conn` and runs on the database thread
(`Database.run`). Its SQL is the subset SQLite and PostgreSQL share: `?`
placeholders, `INSERT ... ON CONFLICT`, `RETURNING`, double-quoted identifiers
(`"user"`, a reserved word in PostgreSQL). What differs is behind the `Conn`:

- `execute` / `executemany`: SQLite's statements as written; PostgreSQL's with
  `?` turned into psycopg's `%s` (a literal `%` doubled), each statement
  translated once.
- `transaction(lock)`: one atomic unit, committed at the end, rolled back on an
  exception. SQLite's is `BEGIN IMMEDIATE` (the one writer lock of the file).
  PostgreSQL's takes, with `lock`, a transaction advisory lock of that name
  first, so the same unit in two processes runs one after the other (pairing
  codes, budgets).
- `id_set(ids)`: a subquery that yields the ids of a list, for `IN (...)`: one
  parameter whatever the length (SQLite's `json_each`, PostgreSQL's `unnest`).

Outside a transaction each statement commits on its own on both engines.
The engine-specific parts of a store (the text index: bot/memory/textindex.py)
branch on `Conn.engine`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    import psycopg

Engine = Literal["sqlite", "postgresql"]
Params = Sequence[Any]


class Cursor(Protocol):
    """What a statement gives back: its rows, and how many rows it changed."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """A connection of either engine, as the stores use it."""

    engine: Engine

    def execute(self, sql: str, params: Params = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Params]) -> None: ...

    def transaction(self, lock: str | None = None) -> contextlib.AbstractContextManager[None]: ...

    def id_set(self, ids: Iterable[int]) -> tuple[str, Any]: ...

    def close(self) -> None: ...

    def broken(self) -> bool: ...


class SqliteConn:
    """A sqlite3 connection in autocommit mode (`isolation_level=None`)."""

    engine: Engine = "sqlite"

    def __init__(self, raw: sqlite3.Connection) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        return self.raw.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        self.raw.executemany(sql, rows)

    @contextlib.contextmanager
    def transaction(self, lock: str | None = None) -> Iterator[None]:
        """One writer holds the whole file, so `lock` needs nothing more."""
        self.raw.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.raw.execute("ROLLBACK")
            raise
        self.raw.execute("COMMIT")

    def id_set(self, ids: Iterable[int]) -> tuple[str, Any]:
        return "SELECT value FROM json_each(?)", json.dumps(list(ids))

    def close(self) -> None:
        self.raw.close()

    def broken(self) -> bool:
        """A file does not go away: never."""
        return False


def refused_value(exc: BaseException) -> bool:
    """Whether the engine refused a value a statement carried (a string no
    UTF-8 encodes, a NUL in PostgreSQL's `text`): the same row fails again
    whenever it is tried, where a lost connection or a lock would pass later."""
    psycopg = sys.modules.get("psycopg")  # never imported: none of its errors is raised
    refusals: tuple[type[BaseException], ...] = (ValueError, sqlite3.DataError)
    if psycopg is not None:
        refusals += (psycopg.DataError,)
    return isinstance(exc, refusals)


@functools.lru_cache(maxsize=1024)
def to_psycopg(sql: str) -> str:
    """`sql` with `?` placeholders as psycopg's `%s` (and `%` as `%%`). The
    stores' SQL has no `?` or `%` inside a string literal."""
    return sql.replace("%", "%%").replace("?", "%s")


class PostgresConn:
    """A psycopg 3 connection in autocommit mode."""

    engine: Engine = "postgresql"

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        return self.raw.execute(to_psycopg(sql), params)

    def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        with self.raw.cursor() as cursor:
            cursor.executemany(to_psycopg(sql), rows)

    @contextlib.contextmanager
    def transaction(self, lock: str | None = None) -> Iterator[None]:
        with self.raw.transaction():
            if lock is not None:
                self.raw.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
            yield

    def id_set(self, ids: Iterable[int]) -> tuple[str, Any]:
        return "SELECT unnest(?::bigint[])", list(ids)

    def close(self) -> None:
        self.raw.close()

    def broken(self) -> bool:
        """Whether the connection to the server is lost (psycopg's `broken`)."""
        return bool(self.raw.broken)
