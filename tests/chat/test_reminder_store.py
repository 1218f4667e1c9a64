"""The reminder store's contract on both engines: the pending limit, the due
rows, one claim among several claimants (two connections at once), an expired
claim taken again, a person's reminders and zone forgotten."""

from __future__ import annotations

import asyncio

from bot.chat.reminder_store import NewReminder, ReminderStore
from bot.storage.db import Database

NOW = 1_800_000_000.0


def new(
    text: str, due: float, user: str = "42", session: str = "telegram:42", scope: str = ""
) -> NewReminder:
    return NewReminder("lark", scope or f"user:telegram:{user}", session, "telegram", user, "{}",
                       text, "UTC", due, NOW)  # fmt: skip


async def test_the_pending_limit_and_the_due_rows(db: Database) -> None:
    store = ReminderStore(db)
    first = await store.add(new("one", NOW + 10), max_pending=2)
    await store.add(new("two", NOW + 5), max_pending=2)
    refused = await store.add(new("three", NOW + 1), max_pending=2)
    other = await store.add(new("hers", NOW + 1, user="7"), max_pending=2)
    assert first is not None and other is not None and refused is None
    assert [r.text for r in await store.pending("telegram", "42")] == ["two", "one"]
    assert [r.text for r in await store.due(NOW + 6)] == ["hers", "two"]
    assert await store.counts() == (3, 2)


async def test_one_claimant_wins_and_an_expired_claim_is_taken_again(db: Database) -> None:
    store = ReminderStore(db)
    stored = await store.add(new("one", NOW), max_pending=5)
    assert stored is not None
    # Several claims at once (on PostgreSQL, the database thread's one connection
    # runs them one after another, as two processes' statements would be).
    wins = await asyncio.gather(*(store.claim(stored.id, f"p{n}", NOW, 300) for n in range(4)))
    assert sorted(wins) == [False, False, False, True]
    assert await store.due(NOW + 1) == []  # claimed: not due for anyone else
    assert await store.claim(stored.id, "late", NOW + 301, 300)  # the claim expired
    await store.done(stored.id, "p0")  # not the holder's: nothing goes
    assert len(await store.pending("telegram", "42")) == 1
    await store.done(stored.id, "late")
    assert await store.pending("telegram", "42") == []


async def test_forgetting_a_person_and_their_sessions(db: Database) -> None:
    store = ReminderStore(db)
    await store.add(new("mine", NOW), max_pending=5)
    await store.add(new("in a group", NOW, session="telegram:-100"), max_pending=5)
    await store.add(new("hers", NOW, user="7", session="telegram:-100"), max_pending=5)
    await store.set_zone("telegram", "42", "Europe/Lisbon", lambda: NOW)
    await store.set_zone("telegram", "42", "Asia/Tokyo", lambda: NOW)
    assert await store.zone("telegram", "42") == "Asia/Tokyo"
    assert await store.forget_person("telegram", "42") == 2
    assert await store.zone("telegram", "42") is None
    assert [r.text for r in await store.pending("telegram", "7")] == ["hers"]
    await store.forget_sessions(["telegram:-100"])
    assert await store.counts() == (0, 0)


async def test_forgetting_a_person_in_one_scope_takes_every_conversation_of_it(
    db: Database,
) -> None:
    store = ReminderStore(db)
    server = "guild:discord:9:per-member"
    await store.add(new("here", NOW, session="discord:1", scope=server), max_pending=5)
    await store.add(new("next door", NOW, session="discord:2", scope=server), max_pending=5)
    await store.add(new("in private", NOW), max_pending=5)
    await store.add(new("hers", NOW, user="7", session="discord:1", scope=server), max_pending=5)
    assert await store.forget_person_in("telegram", "42", server) == 2
    assert [r.text for r in await store.pending("telegram", "42")] == ["in private"]
    assert [r.text for r in await store.pending("telegram", "7")] == ["hers"]
