"""What the database keeps stays bounded, and what a turn reads does not grow
with it: delivered ids are pruned past their dedupe window, compacted history
rows are never visited by a session's load."""

from __future__ import annotations

import pytest

from bot.chat.history import PRUNE_EVERY, SEEN_WINDOW_S, HistoryStore
from bot.storage.db import Database
from bot.storage.sql import Conn
from tests.engines import raw_sqlite


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    """SQLite's: these count its VM's steps and read its query plans."""
    return sqlite_db


class Clock:
    """A wall clock the test moves."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def seen(db: Database, session: str) -> set[str]:
    rows = await db.run(
        lambda c: c.execute(
            "SELECT message_id FROM seen_messages WHERE session = ?", (session,)
        ).fetchall()
    )
    return {r[0] for r in rows}


async def test_delivered_ids_are_pruned_past_their_window(db: Database) -> None:
    clock = Clock()
    store = HistoryStore(db, clock=clock)
    assert await store.append_message("s", 0, "old", "m-old") is not None
    assert await store.first_delivery("s", "f-old")
    clock.now += SEEN_WINDOW_S - 60
    assert await store.append_message("s", 0, "recent", "m-recent") is not None
    clock.now += 120  # the first two are past the window now, the third is not
    for i in range(PRUNE_EVERY):
        assert await store.first_delivery("t", f"x{i}")
    assert await seen(db, "s") == {"m-recent"}
    # Within its window an id is still refused a second time.
    assert await store.append_message("s", 0, "recent", "m-recent") is None
    assert not await store.first_delivery("s", "m-recent")
    assert len(await seen(db, "t")) == PRUNE_EVERY
    # Only the ids went: the history keeps every message.
    rows = await db.run(lambda c: c.execute("SELECT COUNT(*) FROM history").fetchone()[0])
    assert rows == 2


async def test_a_pruned_id_is_a_new_delivery(db: Database) -> None:
    clock = Clock()
    store = HistoryStore(db, clock=clock)
    assert await store.first_delivery("s", "m1")
    clock.now += SEEN_WINDOW_S + 1
    for i in range(PRUNE_EVERY):
        await store.first_delivery("t", f"x{i}")
    assert await store.first_delivery("s", "m1")


async def _session_with(store: HistoryStore, session: str, compacted: int, live: int) -> None:
    ids = [(await store.append(session, 0, "user", f"message {i}")).id for i in range(compacted)]
    for i in range(live):
        await store.append(session, 0, "user", f"live {i}")
    await store.compact(session, 0, ids, f"the summary of {compacted} rows")


async def _load_cost(db: Database, store: HistoryStore, session: str) -> tuple[int, list[str]]:
    """The SQLite VM instructions one `load` runs, and the statements it ran."""
    steps: list[int] = []
    statements: list[str] = []

    def step() -> int:
        steps.append(1)
        return 0  # go on

    def watch(conn: Conn) -> None:
        raw_sqlite(conn).set_progress_handler(step, 1)
        raw_sqlite(conn).set_trace_callback(statements.append)

    def unwatch(conn: Conn) -> None:
        raw_sqlite(conn).set_progress_handler(None, 1)
        raw_sqlite(conn).set_trace_callback(None)

    await db.run(watch)
    try:
        snapshot = await store.load(session)
    finally:
        await db.run(unwatch)
    assert len(snapshot.entries) == 4
    assert snapshot.summary is not None
    return len(steps), statements


async def test_a_load_never_visits_compacted_rows(db: Database) -> None:
    store = HistoryStore(db)
    await _session_with(store, "big", compacted=3000, live=4)
    await _session_with(store, "small", compacted=0, live=4)
    big, statements = await _load_cost(db, store, "big")
    small, _ = await _load_cost(db, store, "small")
    # The same work whatever lies compacted behind the live rows (3,000 rows
    # visited would cost tens of thousands of instructions).
    assert big <= small + 50, (big, small)
    # And the plan says why: the history is read through its partial index.
    [history] = [s for s in statements if "FROM history" in s]
    plan = await db.run(lambda c: c.execute("EXPLAIN QUERY PLAN " + history).fetchall())
    details = " ".join(row[-1] for row in plan)
    assert "USING INDEX history_live" in details, details


async def test_compaction_never_visits_compacted_rows(db: Database) -> None:
    store = HistoryStore(db)
    await _session_with(store, "big", compacted=2000, live=4)
    statements: list[str] = []
    await db.run(lambda c: raw_sqlite(c).set_trace_callback(statements.append))
    await store.compact("big", 0, [], "a newer summary")
    await db.run(lambda c: raw_sqlite(c).set_trace_callback(None))
    [update] = [s for s in statements if "SET kind = 'old_summary'" in s]
    plan = await db.run(lambda c: c.execute("EXPLAIN QUERY PLAN " + update).fetchall())
    assert "USING INDEX history_live" in " ".join(row[-1] for row in plan)
