"""The trace store on real SQLite: ids, scopes, the index, pages, forget."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.memory.store import SCOPE_BITS, NewTrace, TraceStore, chunk_page
from bot.storage.db import Database
from bot.storage.sql import Conn, PostgresConn
from tests.engines import postgres_schema

T0 = datetime(2026, 10, 14, 9, 30, tzinfo=UTC).timestamp()
ALICE = "user:telegram:1"
BOB = "user:telegram:2"
GROUP = "chat:telegram:-100"


def trace(
    text: str,
    scope: str = ALICE,
    *,
    soul: str = "aria",
    speaker: str | None = "user",
    name: str = "Alice",
    session: str = "telegram:1",
    at: float = T0,
    entities: tuple[str, ...] = (),
) -> NewTrace:
    return NewTrace(soul, scope, session, speaker, name, text, at, entities)


async def found(store: TraceStore, scopes: list[str], word: str, soul: str = "aria") -> list[str]:
    """The texts of the rows of `scopes` that hold `word`."""
    ids = (await store.search(soul, scopes, [word], 100)).ids[word]
    rows = await store.rows(ids)
    assert len(rows) == len(ids), "the index holds a row that is gone"
    return [row.text for row in rows]


async def test_add_keeps_order_fields_and_growing_ids(db: Database) -> None:
    store = TraceStore(db)
    ids = await store.add(
        [
            trace("first", entities=("lisbon",)),
            trace("other scope", BOB),
            trace("second", speaker="assistant", name="Aria"),
        ]
    )
    assert ids[0] < ids[2] and ids[0] >> SCOPE_BITS == ids[2] >> SCOPE_BITS
    assert ids[1] >> SCOPE_BITS != ids[0] >> SCOPE_BITS
    got = await store.after("aria", ALICE, 0)
    assert [(t.id, t.text, t.speaker, t.name, t.entities) for t in got] == [
        (ids[0], "first", "user", "Alice", ("lisbon",)),
        (ids[2], "second", "assistant", "Aria", ()),
    ]
    assert got[0].session == "telegram:1" and got[0].created_at == T0 and got[0].scope == ALICE
    assert [t.text for t in await store.after("aria", ALICE, ids[0])] == ["second"]
    assert [t.text for t in await store.after("aria", ALICE, 0, limit=1)] == ["first"]
    assert await store.after("aria", "user:telegram:404", 0) == []
    assert await store.add([]) == []


async def test_search_reaches_only_the_scopes_asked(db: Database) -> None:
    store = TraceStore(db)
    await store.add([trace("my locker code is zanzibar")])
    await store.add([trace("hello there", BOB, name="Bob", session="telegram:2")])
    await store.add([trace("zanzibar in a group", GROUP, name="Carol")])
    await store.add([trace("zanzibar for another soul", ALICE, soul="other")])
    await store.index_page("aria", "shared", "concepts/places", "Zanzibar is an island.", T0)

    assert await found(store, [BOB, "shared"], "zanzibar") == ["Zanzibar is an island."]
    assert await found(store, [ALICE, "shared"], "zanzibar") == [
        "my locker code is zanzibar",
        "Zanzibar is an island.",
    ]
    assert await found(store, [GROUP], "zanzibar") == ["zanzibar in a group"]
    assert await found(store, ["user:telegram:404"], "zanzibar") == []


async def test_neighbours_never_cross_a_scope(db: Database) -> None:
    store = TraceStore(db)
    await store.add([trace("alice one"), trace("alice two")])
    [bob] = await store.add([trace("bob one", BOB)])
    await store.add([trace("alice three")])
    rows = await store.rows([bob], around=2)
    assert [r.text for r in rows] == ["bob one"]
    [alice_two] = [t.id for t in await store.after("aria", ALICE, 0) if t.text == "alice two"]
    rows = await store.rows([alice_two], around=1)
    assert [r.text for r in rows] == ["alice one", "alice two", "alice three"]


async def test_speaker_name_and_session_are_not_searchable(db: Database) -> None:
    store = TraceStore(db)
    await store.add([trace("I moved to Lisbon", name="Caroline", session="telegram:caroline")])
    await store.add([trace("Welcome back", speaker="assistant", name="Aria")])
    for word in ("caroline", "user", "assistant", "aria", "telegram", "alice"):
        assert await found(store, [ALICE], word) == [], word
    assert await found(store, [ALICE], "lisbon") == ["I moved to Lisbon"]


async def test_search_stems_and_estimates_counts_past_the_limit(db: Database) -> None:
    store = TraceStore(db)
    await store.add([trace(f"tea number {i}") for i in range(30)] + [trace("coffee")])
    postings = await store.search("aria", [ALICE], ["teas", "coffee"], 10)
    assert len(postings.ids["teas"]) == 10
    assert postings.df["teas"] == 30.0  # 10 newest over a third of the scope's ids
    assert postings.df["coffee"] == 1.0
    assert (postings.rows, postings.words) == (31, 30 * 3 + 1)
    newest = await store.rows(postings.ids["teas"][:1])
    assert newest[0].text == "tea number 29"


async def test_scopes_after_follows_the_watermarks(db: Database) -> None:
    store = TraceStore(db)
    [a1] = await store.add([trace("a")])
    [b1] = await store.add([trace("b", BOB)])
    assert await store.scopes_after("aria", {}) == [ALICE, BOB]
    assert await store.scopes_after("aria", {ALICE: a1, BOB: b1}) == []
    assert await store.scopes_after("aria", {ALICE: a1}) == [BOB]
    await store.add([trace("a2")])
    assert await store.scopes_after("aria", {ALICE: a1, BOB: b1}) == [ALICE]
    assert await store.scopes_after("other", {}) == []


async def test_index_page_replaces_the_old_chunks(db: Database) -> None:
    store = TraceStore(db)
    await store.index_page("aria", ALICE, "concepts/notes", "Likes apples.", T0)
    await store.index_page("aria", ALICE, "entities/bob", "Bob likes apples too.", T0)
    await store.index_page("aria", ALICE, "concepts/notes", "Likes pears now.", T0 + 60)
    assert await found(store, [ALICE], "apples") == ["Bob likes apples too."]
    assert await found(store, [ALICE], "pears") == ["Likes pears now."]
    [row] = await store.rows((await store.search("aria", [ALICE], ["pears"], 5)).ids["pears"])
    assert (row.page, row.created_at, row.speaker) == ("concepts/notes", T0 + 60, None)
    postings = await store.search("aria", [ALICE], ["likes"], 5)
    assert (postings.rows, postings.words) == (2, 3 + 4)
    await store.index_page("aria", ALICE, "concepts/notes", "", T0)
    assert await found(store, [ALICE], "pears") == []
    assert await store.count("aria", ALICE) == 0  # chunks are not traces
    assert await store.after("aria", ALICE, 0) == []


async def test_forget_erases_traces_and_chunks_of_the_scope_only(db: Database) -> None:
    store = TraceStore(db)
    old = await store.add([trace("secret one"), trace("secret two")])
    await store.add([trace("secret of bob", BOB)])
    await store.index_page("aria", ALICE, "concepts/notes", "A secret note.", T0)
    assert await store.forget("aria", ALICE) == 2
    assert await found(store, [ALICE], "secret") == []
    assert await found(store, [BOB], "secret") == ["secret of bob"]
    assert await store.count("aria", ALICE) == 0
    assert await store.scopes_after("aria", {BOB: 10**18}) == []
    assert await store.forget("aria", "user:telegram:404") == 0
    [new] = await store.add([trace("fresh start")])
    assert new > max(old)
    assert await found(store, [ALICE], "secret") == []


async def test_folds_are_recorded_once_per_scope_and_page(db: Database) -> None:
    store = TraceStore(db)
    a1, a2, a3 = await store.add([trace("one"), trace("two"), trace("three")])
    [b1] = await store.add([trace("bob's", BOB)])
    await store.record_folds("aria", ALICE, "entities/bob", [a3, a1])
    await store.record_folds("aria", ALICE, "entities/bob", [a1, a2])  # idempotent
    await store.record_folds("aria", BOB, "entities/bob", [b1])  # same id, another wiki
    await store.record_folds("aria", ALICE, "entities/bob", [])
    assert await store.folded_into("aria", ALICE, "entities/bob") == [a1, a2, a3]
    assert await store.folded_into("aria", BOB, "entities/bob") == [b1]
    assert await store.folded_into("aria", ALICE, "concepts/other") == []
    assert await store.folded_into("aria", "user:telegram:404", "entities/bob") == []
    with pytest.raises(ValueError, match="not of scope"):
        await store.record_folds("aria", ALICE, "entities/carol", [a1, b1])
    assert await store.folded_into("aria", ALICE, "entities/carol") == []


async def test_drop_page_takes_its_traces_and_chunks_only(db: Database) -> None:
    store = TraceStore(db)
    a1, a2, a3, a4 = await store.add(
        [trace("lisbon trip"), trace("kept apart"), trace("lisbon again"), trace("lisbon new")]
    )
    [b1] = await store.add([trace("lisbon of bob", BOB)])
    await store.record_folds("aria", ALICE, "concepts/lisbon", [a1, a3])
    await store.record_folds("aria", ALICE, "entities/bob", [a2, a3])
    await store.record_folds("aria", BOB, "concepts/lisbon", [b1])
    await store.index_page("aria", ALICE, "concepts/lisbon", "The lisbon page.", T0)
    await store.index_page("aria", ALICE, "entities/bob", "Bob page.", T0)
    await store.index_page("aria", BOB, "concepts/lisbon", "Bob's lisbon page.", T0)
    dropped = await store.drop_page("aria", ALICE, "concepts/lisbon")
    assert [(t.id, t.text, t.scope, t.name) for t in dropped] == [
        (a1, "lisbon trip", ALICE, "Alice"),
        (a3, "lisbon again", ALICE, "Alice"),
    ]
    assert await found(store, [ALICE], "lisbon") == ["lisbon new"]
    assert [t.id for t in await store.after("aria", ALICE, 0)] == [a2, a4]
    assert await store.folded_into("aria", ALICE, "concepts/lisbon") == []
    assert await store.folded_into("aria", ALICE, "entities/bob") == [a2]
    assert await found(store, [ALICE], "page") == ["Bob page."]
    postings = await store.search("aria", [ALICE], ["kept"], 5)
    assert (postings.rows, postings.words) == (3, 2 + 2 + 2)  # two traces and a chunk
    assert await found(store, [BOB], "lisbon") == ["lisbon of bob", "Bob's lisbon page."]
    assert await store.folded_into("aria", BOB, "concepts/lisbon") == [b1]
    assert await store.drop_page("aria", ALICE, "concepts/lisbon") == []
    assert await store.drop_page("aria", "user:telegram:404", "concepts/lisbon") == []


async def test_forget_erases_the_scopes_folds(db: Database) -> None:
    store = TraceStore(db)
    [a1] = await store.add([trace("one")])
    [b1] = await store.add([trace("bob's", BOB)])
    await store.record_folds("aria", ALICE, "entities/bob", [a1])
    await store.record_folds("aria", BOB, "entities/bob", [b1])
    await store.forget("aria", ALICE)
    assert await store.folded_into("aria", ALICE, "entities/bob") == []
    assert await store.folded_into("aria", BOB, "entities/bob") == [b1]
    [a2] = await store.add([trace("new")])
    assert await store.drop_page("aria", ALICE, "entities/bob") == []
    assert [t.id for t in await store.after("aria", ALICE, 0)] == [a2]


async def test_newest_counts_past_an_id_and_keeps_the_last_few(db: Database) -> None:
    store = TraceStore(db)
    ids = await store.add([trace(f"note {n}") for n in range(5)])
    await store.add([trace("bob's", BOB)])
    await store.index_page("aria", ALICE, "concepts/notes", "A chunk, not a trace.", T0)
    count, latest = await store.newest("aria", ALICE, ids[1], 2)
    assert (count, [t.text for t in latest]) == (3, ["note 3", "note 4"])
    assert latest[0].scope == ALICE and latest[0].id == ids[3]
    assert await store.newest("aria", ALICE, ids[-1], 2) == (0, [])
    assert await store.newest("aria", "user:telegram:404", 0, 2) == (0, [])


async def test_count_and_sessions(db: Database) -> None:
    store = TraceStore(db)
    await store.add([trace("a"), trace("b", session="telegram:9"), trace("c", BOB)])
    await store.add([trace("d", soul="other")])
    await store.index_page("aria", ALICE, "concepts/notes", "a note", T0)
    assert await store.count("aria", ALICE) == 2
    assert await store.count("aria") == 3
    assert await store.count("other") == 1
    assert await store.count("aria", "user:telegram:404") == 0
    assert await store.sessions("aria", ALICE) == ["telegram:1", "telegram:9"]
    assert await store.sessions("aria", "user:telegram:404") == []


async def test_the_index_survives_a_restart(tmp_path: Path) -> None:
    first = Database(tmp_path / "m.db")
    await first.open()
    await TraceStore(first).add([trace("kept across restarts")])
    await first.close()
    again = Database(tmp_path / "m.db")
    await again.open()
    try:
        assert await found(TraceStore(again), [ALICE], "restarts") == ["kept across restarts"]
    finally:
        await again.close()


def test_chunk_page_drops_front_matter_and_keeps_to_the_limit() -> None:
    body = "---\nsummary: a summary\n---\n# Notes\n\nshort one\n\n" + "word " * 50
    chunks = chunk_page(body, limit=60)
    assert chunks[0] == "# Notes\n\nshort one"
    assert all(len(c) <= 60 for c in chunks)
    assert " ".join(" ".join(chunks[1:]).split()) == " ".join(["word"] * 50)
    assert "summary" not in " ".join(chunks)
    assert chunk_page("x" * 130, limit=60) == ["x" * 60, "x" * 60, "x" * 10]
    assert chunk_page("") == []


async def test_a_plan_made_on_a_small_table_still_reads_only_the_scopes_asked_for() -> None:
    """PostgreSQL keeps the plan of a prepared statement until an ANALYZE,
    which autovacuum makes a minute or more after a table has grown. The plan
    of a search's scope lookup, made while `memory_scopes` held a row, must
    read the scopes it names when the table holds hundreds (before the fix:
    every scope of the soul, filtered one by one)."""
    with postgres_schema() as url:
        db = Database(url)
        await db.open()
        try:
            store = TraceStore(db)

            def plan_now(conn: Conn) -> None:  # a generic plan, from the first call
                assert isinstance(conn, PostgresConn)
                conn.raw.prepare_threshold = 0
                conn.execute("SET plan_cache_mode = force_generic_plan")

            def fetched(conn: Conn) -> int:  # rows read through an index so far
                conn.execute("SELECT pg_stat_force_next_flush()")
                return int(
                    conn.execute(
                        "SELECT idx_tup_fetch FROM pg_stat_user_tables "
                        "WHERE relid = 'memory_scopes'::regclass"
                    ).fetchone()[0]
                )

            await db.run(plan_now)
            await store.add([trace("hello there", ALICE)])
            assert await found(store, [ALICE, BOB], "hello") == ["hello there"]
            await store.add([trace(f"note {n}", f"user:telegram:{100 + n}") for n in range(300)])
            before = await db.run(fetched)
            assert await found(store, [ALICE, BOB], "hello") == ["hello there"]
            assert await db.run(fetched) - before <= 4
        finally:
            await db.close()


async def test_said_in_and_delete_traces_take_one_exchange_back(db: Database) -> None:
    store = TraceStore(db)
    early, said, answer = await store.add([
        trace("said before", at=T0 - 60), trace("heron 7788", at=T0),
        trace("noted heron 7788", speaker="assistant", name="Aria", at=T0 + 1),
    ])  # fmt: skip
    [elsewhere] = await store.add([trace("heron 7788", session="telegram:9", at=T0)])
    [bobs] = await store.add([trace("heron 7788", BOB, at=T0)])
    await store.record_folds("aria", ALICE, "entities/alice", [said])
    got = await store.said_in("aria", ALICE, "telegram:1", T0)
    assert [(t.id, pages) for t, pages in got] == [(said, ["entities/alice"]), (answer, [])]
    epoch = await store.erase_epoch("aria", ALICE)
    assert (
        await store.delete_traces("aria", ALICE, [said, answer, bobs]) == 2
    )  # Bob's is not Alice's
    assert await found_texts(store) == ["said before", "heron 7788"]  # the other session's stays
    assert await store.folded_into("aria", ALICE, "entities/alice") == []
    assert await store.erase_epoch("aria", ALICE) == epoch + 1
    assert await found(store, [BOB], "heron") == ["heron 7788"]
    assert early < elsewhere


async def found_texts(store: TraceStore) -> list[str]:
    return [t.text for t in await store.after("aria", ALICE, 0)]
