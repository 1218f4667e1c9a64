"""Copying a whole store from one engine to the other (`soulbot store migrate`).

Every table of the schema (`TABLES`) is copied in primary key order, in
batches; each batch is one transaction on the target, its rows inserted with
`ON CONFLICT DO NOTHING`. So a copy run twice adds nothing the second time,
and one stopped halfway (killed, a lost connection) goes on from where it
stopped when run again: a table keyed by an integer id resumes after the
target's highest id, the others (small: sessions, pairing, delivered ids) are
read again from their start and their rows already there are skipped. The
`memory` ids are kept as they are: they encode the scope (bot/memory/store.py).

What the target derives from the rows is rebuilt there, not copied: the text
index of each batch of `memory` rows, in that batch's transaction (FTS5's
`memory_fts`, or PostgreSQL's `memory_terms`); on PostgreSQL the identity
sequences of `usage`, `voice_usage`, `history`, `memory_scopes`, `reminders`
and `check_ins_sent`, set past the highest id copied, and today's
`budget_totals`, from the usage rows. How a text is indexed and how a call is
charged belong to other rooms (memory, model), which this one may not import:
the caller hands them in as `Derived`.

Before a row is written, `migrate` refuses a target that is the source itself
and one that holds another store: it compares the first and the last row of
each table, by key, on both sides. It compares no more than these, and it does
not keep the source still: the daemon must be stopped meanwhile (a row it
changes after its batch was copied is not copied again). At the end it counts
the rows of each table on both sides (`Report`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bot.errors import SoulbotError
from bot.storage.sql import Conn

BATCH_ROWS = 5000


@dataclass(frozen=True)
class Table:
    """A table as the copy reads and writes it: its columns and primary key.
    `identity`: PostgreSQL numbers new rows from a sequence (set past the copied
    ids). `indexed`: its `text` column is in the text index."""

    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    identity: bool = False
    indexed: bool = False

    @property
    def serial(self) -> bool:
        """Whether the key is an integer id (the copy resumes after the target's highest)."""
        return self.key == ("id",)


TABLES: tuple[Table, ...] = (
    Table(
        "usage",
        (
            "id",
            "ts",
            "day",
            "soul",
            "scope",
            "session",
            "user",
            "source",
            "model",
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "cost_usd",
        ),
        ("id",),
        identity=True,
    ),
    Table(
        "voice_usage",
        (
            "id",
            "ts",
            "day",
            "soul",
            "scope",
            "session",
            "user",
            "source",
            "kind",
            "model",
            "amount",
            "cost_usd",
        ),
        ("id",),
        identity=True,
    ),
    Table(
        "history",
        (
            "id",
            "session",
            "generation",
            "role",
            "kind",
            "content",
            "tokens",
            "reply_to",
            "ts",
            "delivered",
        ),
        ("id",),
        identity=True,
    ),
    Table("sessions", ("session", "generation"), ("session",)),
    Table("session_bindings", ("session", "soul", "scope"), ("session",)),
    Table("session_moods", ("session", "soul", "mood", "ts"), ("session",)),
    Table("reply_addresses", ("session", "inbound"), ("session",)),
    Table("seen_messages", ("session", "message_id", "ts"), ("session", "message_id")),
    Table("sent_messages", ("session", "message_id", "text", "ts"), ("session", "message_id")),
    Table(
        "paired_users",
        ("platform", "user_id", "approved_at", "approved_by"),
        ("platform", "user_id"),
    ),
    Table(
        "pairing_codes",
        ("code", "platform", "user_id", "user_name", "chat_id", "expires"),
        ("code",),
    ),
    Table("heartbeat_marks", ("session", "entry"), ("session",)),
    Table(
        "memory_scopes",
        ("id", "soul", "scope", "next_seq", "rows", "words", "last_trace"),
        ("id",),
        identity=True,
    ),
    Table(
        "memory",
        ("id", "session", "speaker", "name", "page", "text", "created_at", "entities", "words"),
        ("id",),
        indexed=True,
    ),
    Table("memory_folds", ("trace", "page"), ("trace", "page")),
    Table(
        "reminders",
        (
            "id",
            "soul",
            "scope",
            "session",
            "platform",
            "user_id",
            "address",
            "text",
            "zone",
            "due",
            "created",
            "claimed_by",
            "claimed_until",
            "kind",
        ),
        ("id",),
        identity=True,
    ),
    Table("person_zones", ("platform", "user_id", "zone", "ts"), ("platform", "user_id")),
    Table(
        "check_ins_sent",
        ("id", "platform", "user_id", "session", "entry", "ts"),
        ("id",),
        identity=True,
    ),
    Table("check_in_optouts", ("platform", "user_id", "ts"), ("platform", "user_id")),
    Table("web_tokens", ("hash", "kind", "admin", "csrf", "expires"), ("hash",)),
    Table("chat_places", ("scope", "private"), ("scope",)),
)
"""Every table of the schema, in the order they are copied; the text index
and `budget_totals` are derived, not copied."""

Index = Callable[[Conn, Sequence[tuple[int, str]]], None]
"""Index the text of new `memory` rows (id, text), as bot.memory.textindex.index does."""
Budgets = Callable[[Conn], tuple[str, Mapping[tuple[str, str], int]]]
"""Today's UTC day (YYYY-MM-DD) and the tokens each budget (kind, who) has
used that day, from the `usage` rows of `conn`, charged as the Ledger charges them."""


@dataclass(frozen=True)
class Derived:
    """How the target rebuilds what it derives from the copied rows."""

    index: Index
    budgets: Budgets


class Progress(Protocol):
    """Told how far a copy is: the rows of the source in all, then the rows
    handled table by table (copied, or found on the target already)."""

    def start(self, total: int) -> None: ...

    def advance(self, table: str, rows: int) -> None: ...


@dataclass(frozen=True)
class Count:
    """One table's rows: on the source, on the target before the copy and after."""

    table: str
    source: int
    before: int
    target: int

    @property
    def ok(self) -> bool:
        """Whether the target holds as many rows as the source."""
        return self.source == self.target


@dataclass(frozen=True)
class Report:
    """What a copy did, table by table (in `TABLES` order)."""

    counts: list[Count]

    @property
    def ok(self) -> bool:
        """Whether every table holds as many rows on both sides."""
        return all(count.ok for count in self.counts)

    @property
    def added(self) -> int:
        """The rows this run wrote to the target."""
        return sum(count.target - count.before for count in self.counts)


def _quoted(column: str) -> str:
    return f'"{column}"'


def row_counts(conn: Conn) -> dict[str, int]:
    """The rows of each table of `TABLES`."""
    return {
        table.name: int(conn.execute(f"SELECT COUNT(*) FROM {table.name}").fetchone()[0])
        for table in TABLES
    }


def _identity(conn: Conn) -> tuple[Any, ...]:
    """What tells one database from another: a SQLite file's real path; a
    PostgreSQL server (its port and start time), database and schema."""
    if conn.engine == "sqlite":
        files = {name: file for _, name, file in conn.execute("PRAGMA database_list")}
        return ("sqlite", str(Path(files["main"]).resolve()))
    found = conn.execute(
        "SELECT current_setting('port'), pg_postmaster_start_time(), current_database(), "
        "current_schema()"
    ).fetchone()
    return ("postgresql", *found)


def _row(conn: Conn, table: Table, key: Sequence[Any]) -> tuple[Any, ...] | None:
    """The row of `table` with primary key `key`, or None."""
    where = " AND ".join(f"{_quoted(c)} = ?" for c in table.key)
    row = conn.execute(
        f"SELECT {', '.join(map(_quoted, table.columns))} FROM {table.name} WHERE {where}", key
    ).fetchone()
    return None if row is None else tuple(row)


def _ends(conn: Conn, table: Table) -> list[tuple[Any, ...]]:
    """The keys of the first and the last row of `table` (none when it is empty)."""
    keys = []
    for direction in ("ASC", "DESC"):
        order = ", ".join(f"{_quoted(c)} {direction}" for c in table.key)
        row = conn.execute(
            f"SELECT {', '.join(map(_quoted, table.key))} FROM {table.name} "
            f"ORDER BY {order} LIMIT 1"
        ).fetchone()
        if row is not None:
            keys.append(tuple(row))
    return keys


def check_targets(source: Conn, target: Conn) -> None:
    """Refuse a target that is the source, or that holds another store: for
    each table, the first and the last row by key of either side must be on
    the target as on the source, or not on the target at all (not copied yet).
    Raises SoulbotError saying which table and key differ."""
    if _identity(source) == _identity(target):
        raise SoulbotError("the source and the target are the same store")
    advice = "migrate into an empty database (or one an earlier migrate of this source filled)"
    for table in TABLES:
        for key in dict.fromkeys([*_ends(source, table), *_ends(target, table)]):
            there = _row(target, table, key)
            if there is None:
                continue
            here = _row(source, table, key)
            what = "differs from the source's" if here is not None else "is not in the source"
            if here != there:
                shown = ", ".join(map(repr, key))
                raise SoulbotError(
                    f"the target holds another store: its {table.name} row ({shown}) {what}; "
                    f"{advice}"
                )


def _texts_to_index(
    target: Conn, table: Table, rows: Sequence[Sequence[Any]]
) -> list[tuple[int, str]]:
    """The (id, text) of those of `rows` the target does not hold yet."""
    id_at, text_at = table.columns.index("id"), table.columns.index("text")
    listed, param = target.id_set(int(row[id_at]) for row in rows)
    there = {
        int(i)
        for (i,) in target.execute(f"SELECT id FROM {table.name} WHERE id IN ({listed})", (param,))
    }
    return [(int(row[id_at]), str(row[text_at])) for row in rows if int(row[id_at]) not in there]


def _copy(
    source: Conn,
    target: Conn,
    table: Table,
    derived: Derived,
    batch_rows: int,
    progress: Progress | None,
) -> None:
    """Copy the rows of `table` the target lacks, a batch a transaction."""
    columns = ", ".join(map(_quoted, table.columns))
    order = ", ".join(map(_quoted, table.key))
    marks = ", ".join("?" * len(table.columns))
    insert = f"INSERT INTO {table.name} ({columns}) VALUES ({marks}) ON CONFLICT DO NOTHING"
    key_at = [table.columns.index(c) for c in table.key]
    after: tuple[Any, ...] | None = None
    if table.serial:
        (top,) = target.execute(f"SELECT MAX(id) FROM {table.name}").fetchone()
        if top is not None:
            after = (top,)
            (done,) = source.execute(
                f"SELECT COUNT(*) FROM {table.name} WHERE id <= ?", after
            ).fetchone()
            if progress is not None and done:
                progress.advance(table.name, int(done))
    while True:
        where = "" if after is None else f" WHERE ({order}) > ({', '.join('?' * len(after))})"
        rows = source.execute(
            f"SELECT {columns} FROM {table.name}{where} ORDER BY {order} LIMIT ?",
            (*(after or ()), batch_rows),
        ).fetchall()
        if not rows:
            return
        with target.transaction():
            fresh = _texts_to_index(target, table, rows) if table.indexed else []
            target.executemany(insert, rows)
            if fresh:
                derived.index(target, fresh)
        after = tuple(rows[-1][i] for i in key_at)
        if progress is not None:
            progress.advance(table.name, len(rows))
        if len(rows) < batch_rows:
            return


def _restart_identity(target: Conn, table: Table) -> None:
    """Set PostgreSQL's identity sequence of `table` to its highest id, so the
    next row it numbers comes after every copied one."""
    target.execute(
        f"SELECT setval(pg_get_serial_sequence(?, 'id'), MAX(id)) FROM {table.name} "
        "HAVING MAX(id) IS NOT NULL",
        (table.name,),
    )


def _fill_budgets(target: Conn, derived: Derived) -> None:
    """Replace today's `budget_totals` rows (PostgreSQL) by the totals of the
    usage rows of today on the target."""
    day, totals = derived.budgets(target)
    with target.transaction():
        target.execute("DELETE FROM budget_totals WHERE day = ?", (day,))
        target.executemany(
            "INSERT INTO budget_totals (day, kind, who, tokens) VALUES (?, ?, ?, ?)",
            [(day, kind, who, tokens) for (kind, who), tokens in totals.items()],
        )


def migrate(
    source: Conn,
    target: Conn,
    derived: Derived,
    *,
    batch_rows: int = BATCH_ROWS,
    progress: Progress | None = None,
) -> Report:
    """Copy every row of `source` the `target` lacks (both with their schema
    in place: `open_conn`), rebuild what the target derives from them, and
    count the rows of each table on both sides. Writes nothing to `source`.

    Raises SoulbotError, before any row is written, for a target that is the
    source or holds another store (`check_targets`); ValueError for a
    `batch_rows` below 1; the engines' errors (sqlite3.Error, psycopg.Error)
    when a statement fails: the batches committed before stay, and running it
    again goes on from there.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be 1 or more, not {batch_rows}")
    check_targets(source, target)
    sources, before = row_counts(source), row_counts(target)
    if progress is not None:
        progress.start(sum(sources.values()))
    shared = target.engine == "postgresql"
    for table in TABLES:
        _copy(source, target, table, derived, batch_rows, progress)
        if table.identity and shared:
            _restart_identity(target, table)
    if shared:
        _fill_budgets(target, derived)
    after = row_counts(target)
    return Report([Count(t.name, sources[t.name], before[t.name], after[t.name]) for t in TABLES])
