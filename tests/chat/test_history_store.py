"""The history store's contract on both engines: PostgreSQL writes a message,
its delivered id and its reply address as one statement (SQLite and a prune
as a transaction), loads a session as one, and keeps a reply's ids as one; a
reply is stored, then marked delivered once sent."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from bot.chat.history import HistoryStore
from bot.storage.db import Database
from bot.storage.sql import Conn
from tests.engines import postgres_schema


async def addresses(db: Database) -> dict[str, str]:
    rows = await db.run(
        lambda c: c.execute("SELECT session, inbound FROM reply_addresses").fetchall()
    )
    return {session: inbound for session, inbound in rows}


async def history_texts(db: Database, session: str) -> list[str]:
    rows = await db.run(
        lambda c: c.execute(
            "SELECT content FROM history WHERE session = ? ORDER BY id", (session,)
        ).fetchall()
    )
    return [text for (text,) in rows]


async def test_a_delivered_id_is_stored_once_with_its_address(db: Database) -> None:
    store = HistoryStore(db)
    first = await store.append_message("s", 0, "one", "m1", '{"chat": 1}')  # prunes first
    second = await store.append_message("s", 0, "two", "m2", '{"chat": 2}')
    assert first is not None and second is not None and second.id > first.id
    assert (second.role, second.text, second.reply_to) == ("user", "two", None)
    # Delivered again: nothing stored, the address left as it was.
    assert await store.append_message("s", 0, "two again", "m2", '{"chat": 3}') is None
    assert await store.append_message("s", 0, "one again", "m1", '{"chat": 4}') is None
    assert await history_texts(db, "s") == ["one", "two"]
    assert await addresses(db) == {"s": '{"chat": 2}'}


async def test_a_message_without_an_id_or_an_address(db: Database) -> None:
    store = HistoryStore(db)
    assert await store.append_message("s", 0, "first", "m1") is not None
    assert await store.append_message("s", 0, "no id", "") is not None
    assert await store.append_message("s", 0, "no id", "") is not None  # never a duplicate
    assert await store.append_message("t", 0, "addressed", "", '{"chat": 5}') is not None
    assert await history_texts(db, "s") == ["first", "no id", "no id"]
    assert await addresses(db) == {"t": '{"chat": 5}'}


async def test_a_load_reads_the_current_generation_only(db: Database) -> None:
    store = HistoryStore(db)
    empty = await store.load("new")
    assert (empty.generation, empty.summary, empty.entries) == (0, None, [])
    old = await store.append_message("s", 0, "before the reset", "m1")
    assert old is not None
    assert await store.reset("s") == 1
    reset = await store.load("s")
    assert (reset.generation, reset.summary, reset.entries) == (1, None, [])
    asked = await store.append_message("s", 1, "after the reset", "m2")
    assert asked is not None
    answer = await store.append("s", 1, "assistant", "an answer", reply_to=asked.id)
    await store.compact("s", 1, [asked.id], "what was said")
    later = await store.load("s")
    assert (later.generation, later.summary, later.entries) == (1, "what was said", [answer])


async def test_a_reply_sent_as_repeated_ids_is_kept_once_each(db: Database) -> None:
    store = HistoryStore(db)
    await store.record_sent("s", ["a", "b", "a"], "the reply")
    await store.record_sent("s", ["b"], "edited")
    assert [await store.sent_text("s", i) for i in ("a", "b", "c")] == ["the reply", "edited", None]


async def test_a_reply_is_stored_undelivered_until_it_is_sent(db: Database) -> None:
    store = HistoryStore(db)
    asked = await store.append_message("s", 0, "are you there?", "m1", '{"chat": 1}')
    assert asked is not None
    reply = await store.append("s", 0, "assistant", "I am.", asked.id, delivered=False)
    assert not reply.delivered
    assert [e.delivered for e in (await store.load("s")).entries] == [True, False]
    assert await store.unanswered(0.0) == [("s", '{"chat": 1}')]  # stored is not delivered
    await store.delivered("s", reply.id, ["41", "42"], "I am.")
    assert [e.delivered for e in (await store.load("s")).entries] == [True, True]
    assert await store.unanswered(0.0) == []
    assert await store.sent_text("s", "42") == "I am."


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_reply_stored_before_schema_7_counts_as_delivered(
    engine: str, tmp_path: Path
) -> None:
    with contextlib.ExitStack() as stack:
        target = tmp_path / "soulbot.db" if engine == "sqlite" else stack.enter_context(
            postgres_schema()
        )  # fmt: skip
        database = Database(target)
        await database.open()
        store = HistoryStore(database)
        asked = await store.append_message("s", 0, "hello", "m1", '{"chat": 1}')
        assert asked is not None

        def back_to_schema_5(conn: Conn) -> None:
            conn.execute("ALTER TABLE history DROP COLUMN delivered")
            conn.execute(
                "INSERT INTO history (session, generation, role, kind, content, tokens, "
                "reply_to, ts) VALUES ('s', 0, 'assistant', 'message', 'hi', 1, ?, 0)",
                (asked.id,),
            )
            if conn.engine == "sqlite":
                conn.execute("PRAGMA user_version = 5")
            else:
                conn.execute("UPDATE soulbot_schema SET version = 5")

        await database.run(back_to_schema_5)
        await database.close()
        database = Database(target)
        await database.open()
        try:
            store = HistoryStore(database)
            entries = (await store.load("s")).entries
            assert [(e.text, e.delivered) for e in entries] == [("hello", True), ("hi", True)]
            assert await store.unanswered(0.0) == []  # answered before the upgrade
        finally:
            await database.close()


async def test_an_id_after_an_erase_is_above_every_id_before_it(db: Database) -> None:
    store = HistoryStore(db)
    await store.append_message("keep", 0, "kept", "")
    erased = [await store.append_message("gone", 0, f"m{i}", "") for i in range(3)]
    await store.erase(["gone"])
    after = await store.append_message("gone", 0, "again", "")
    assert after is not None and all(e is not None and after.id > e.id for e in erased)


async def test_a_mood_is_kept_under_its_soul_until_a_reset_or_an_erase(db: Database) -> None:
    store = HistoryStore(db)
    assert await store.reset("s", ("marlow", "user:t:1")) == 1
    await store.set_mood("s", "marlow", "wry")
    await store.set_mood("s", "marlow", "stormy")  # the newest wins
    assert (await store.load("s")).mood == "stormy"
    assert await store.mood("s", "marlow") == "stormy"
    assert await store.mood("s", "lark") is None  # another soul's: none
    await store.bind("s", ("lark", "user:t:1"))
    assert (await store.load("s")).mood is None  # said under marlow, not the binding's soul
    await store.bind("s", ("marlow", "user:t:1"))
    await store.set_mood("s", "marlow", None)  # back to the default
    assert (await store.load("s")).mood is None
    await store.set_mood("s", "marlow", "wry")
    await store.set_mood("t", "marlow", "calm")
    assert await store.reset("s", ("marlow", "user:t:1")) == 2
    assert (await store.load("s")).mood is None
    await store.set_mood("s", "marlow", "wry")
    await store.erase(["s"])
    assert await store.mood("s", "marlow") is None
    assert await store.mood("t", "marlow") == "calm"  # another session's stays


async def test_a_reply_is_found_by_its_ids_and_taken_back(db: Database) -> None:
    store = HistoryStore(db)
    asked = await store.append_message("s", 0, "question", "m1", '{"chat": 1}')
    assert asked is not None
    reply = await store.append("s", 0, "assistant", "the answer", asked.id, delivered=False)
    await store.delivered("s", reply.id, ["100", "99", "1000"], "the answer")
    await store.record_sent("s", ["7"], "an older reply")
    assert await store.reply_ids("s", "the answer", reply.ts) == ["99", "100", "1000"]
    assert await store.reply_ids("s", "the answer", reply.ts + 3600) == []
    assert await store.reply_address("s") == ('{"chat": 1}', None)  # no message id in it
    row = await store.append_message("u", 0, "q", "m7", '{"message_id": "m7"}')
    assert row is not None and await store.reply_address("u") == ('{"message_id": "m7"}', row.ts)
    assert await store.reply_address("t") is None
    await store.take_back("s", [asked.id, reply.id], ["99", "100", "1000"])
    assert await history_texts(db, "s") == []
    assert await store.sent_text("s", "100") is None
    assert await store.sent_text("s", "7") == "an older reply"
