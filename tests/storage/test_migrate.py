"""Copying a store between engines (bot/storage/migrate.py): a SQLite store
filled by the real stores, copied to a fresh PostgreSQL schema and read back
there by the same stores; run twice, stopped halfway and run again, into the
wrong database, and back to SQLite."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.chat.access import Access
from bot.chat.chat_places import ChatPlaces
from bot.chat.history import HistoryStore
from bot.chat.reminder_store import NewReminder, ReminderStore
from bot.chat.weblogin import WebAuth
from bot.cli.store import derived
from bot.config.load import parse_config
from bot.config.schema import Config, WebConfig
from bot.errors import BudgetExceeded, SoulbotError
from bot.memory.store import SCOPE_BITS, NewTrace, Postings, TraceStore
from bot.model.usage import CallContext, Ledger, Source, Usage, usage_table
from bot.storage.db import Database, open_conn
from bot.storage.migrate import TABLES, Report, migrate
from bot.storage.sql import Conn
from bot.types import Inbound
from tests.engines import postgres_schema

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC).timestamp()
DAY = 86_400.0
SOUL = "aria"
ANN, BEN = "user:telegram:42", "user:discord:7"
SCOPES = [ANN, BEN, "shared"]
SESSIONS = ("telegram:42", "discord:7")
CONFIG = """
admins: {telegram: [1]}
budget:
  daily_tokens_per_soul: 600
  daily_tokens_per_user: 250
  daily_tokens_per_admin: 300
  daily_tokens_background: 400
"""
# The tables the engines derive from the copied rows (and their own bookkeeping).
NOT_COPIED = {
    "memory_fts",
    "memory_terms",
    "budget_totals",
    "soulbot_schema",
    "sqlite_sequence",
    "memory_erasures",
    "session_leases",  # the turns in flight: none while a store is migrated
    "processes",  # the processes serving it: none while a store is migrated
}


@dataclass
class Clock:
    now: float = NOW

    def __call__(self) -> float:
        return self.now


def config() -> Config:
    return parse_config(CONFIG, "test.yaml", {})


def ctx(user: str, source: Source = "turn", soul: str = SOUL) -> CallContext:
    return CallContext(soul, f"user:{user}" if user else "shared", user or "none", user, source)


def dm(user: str) -> Inbound:
    return Inbound(platform="telegram", chat_id=f"c{user}", user_id=user, user_name=f"N{user}",
                   text="hi", is_dm=True)  # fmt: skip


def code_of(reply: str) -> str:
    return reply.split("Your pairing code is ")[1].split()[0]


@contextlib.asynccontextmanager
async def opened(target: Path | str) -> AsyncIterator[Database]:
    db = Database(target)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


async def fill(target: Path | str, words: tuple[str, str] = ("tea", "pears")) -> None:
    """A few rows of every kind, written by the stores that write them."""
    clock = Clock()
    async with opened(target) as db:
        history = HistoryStore(db, clock)
        for n, session in enumerate(SESSIONS):
            generation = await history.reset(session, ("lark", f"user:test:{n}"))
            first = await history.append_message(
                session, generation, f"I like green {words[0]}", f"m{n}", '{"chat": 1}'
            )
            assert first is not None
            reply = await history.append(
                session, generation, "assistant", f"{words[0]} is lovely", first.id
            )
            await history.record_sent(session, [f"s{n}a", f"s{n}b"], reply.text)
            await history.compact(session, generation, [first.id, reply.id], "likes tea")
            await history.append_message(session, generation, f"and {words[1]}", f"m{n}x")
            await history.set_mood(session, "lark", ("wry", "stormy")[n])
        reminders = ReminderStore(db)
        for n, text in enumerate(("call my sister", "the exam")):
            due = NOW + 3600 * n
            new = NewReminder("lark", "user:telegram:42", "telegram:42", "telegram", "42",
                              dm("42").address(), text, "Europe/Lisbon", due, NOW)  # fmt: skip
            assert await reminders.add(new, max_pending=5) is not None
        await reminders.set_zone("telegram", "42", "Europe/Lisbon", clock)
        await db.run(lambda c: c.execute(
            "INSERT INTO check_ins_sent (platform, user_id, session, entry, ts) "
            "VALUES ('telegram', '42', 'telegram:42', 3, ?)", (NOW,)))  # fmt: skip
        await db.run(lambda c: c.execute(
            "INSERT INTO check_in_optouts (platform, user_id, ts) VALUES ('discord', '7', ?)",
            (NOW,)))  # fmt: skip
        ledger = Ledger(db, budget=config().budget, admins=config().admins, clock=clock)
        for who, source, tokens in [
            ("telegram:42", "turn", 300),
            ("discord:7", "turn", 150),
            ("telegram:1", "turn", 200),  # an admin's
            ("", "compile", 350),
        ]:
            await ledger.record(ctx(who, source), "claude-sonnet-4-6", Usage(tokens - 10, 10))
        await ledger.record_voice(ctx("telegram:42"), "heard", "whisper-1", 12.5, 0.00125)
        await ledger.record_voice(ctx("discord:7"), "spoken", "tts-1", 300, 0.0045)
        clock.now = NOW - DAY  # yesterday's: in the report, in no budget of today
        await ledger.record(ctx("telegram:42"), "claude-haiku-4-5", Usage(900, 100))
        await ledger.record_voice(ctx("telegram:42"), "heard", "whisper-1", 40.0, 0.004)
        clock.now = NOW
        gate = Access(db, config(), clock)
        approved = code_of((await gate.admit(dm("5"))).reply)
        assert await gate.approve(approved, "telegram:1") is not None
        await gate.admit(dm("6"))  # left waiting
        await WebAuth(db, WebConfig(enabled=True), clock).issue_link("cli")  # a sign-in link
        await ChatPlaces(db).note("chat:discord:10", private=False)
        traces = TraceStore(db)
        ids = await traces.add(
            [
                NewTrace(SOUL, ANN, SESSIONS[0], "user", "Ann", f"I like green {words[0]}", NOW),
                NewTrace(SOUL, ANN, SESSIONS[0], "assistant", "Aria", f"{words[0]}!", NOW + 1),
                NewTrace(SOUL, BEN, SESSIONS[1], "user", "Ben", f"{words[1]} please", NOW, ("b",)),
                NewTrace(SOUL, ANN, SESSIONS[0], None, "", f"more {words[1]} and tea", NOW + 2),
            ]
        )
        await traces.index_page(SOUL, ANN, "people/ann", f"Ann likes {words[0]}.\n\nAnd pie.", NOW)
        await traces.record_folds(SOUL, ANN, "people/ann", ids[:2])
        await db.run(
            lambda c: c.execute(
                "INSERT INTO heartbeat_marks (session, entry) VALUES (?, ?)", (SESSIONS[0], 3)
            )
        )


def run(source: Path | str, target: Path | str, **kwargs: Any) -> Report:
    """`migrate` between two stores, as the command runs it."""
    with (
        contextlib.closing(open_conn(source)) as src,
        contextlib.closing(open_conn(target)) as dst,
    ):
        return migrate(src, dst, derived(config(), Clock()), **kwargs)


def quoted(names: tuple[str, ...]) -> str:
    return ", ".join('"' + name + '"' for name in names)


def dump(target: Path | str, derived_too: bool = False) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every copied table (and, with `derived_too`, of the text
    index and the budget totals), sorted."""
    with contextlib.closing(open_conn(target)) as conn:
        tables = {t.name: f"SELECT {quoted(t.columns)} FROM {t.name}" for t in TABLES}
        if derived_too and conn.engine == "postgresql":
            tables["memory_terms"] = "SELECT term, id FROM memory_terms"
            tables["budget_totals"] = "SELECT day, kind, who, tokens FROM budget_totals"
        if derived_too and conn.engine == "sqlite":
            tables["memory_fts"] = "SELECT rowid, text FROM memory_fts('tea OR pears OR pie')"
        return {
            name: sorted([tuple(row) for row in conn.execute(sql)], key=repr)
            for name, sql in tables.items()
        }


@pytest.fixture
async def store(tmp_path: Path) -> Path:
    """A SQLite store filled by the stores."""
    path = tmp_path / "source" / "soulbot.db"
    await fill(path)
    return path


@pytest.fixture
def pg() -> Iterator[str]:
    with postgres_schema() as url:
        yield url


def columns(conn: Conn) -> dict[str, list[str]]:
    """Every table of a store's schema, with its columns in order."""
    if conn.engine == "sqlite":
        names = [
            n
            for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not n.startswith("memory_fts")
        ]
        return {n: [r[1] for r in conn.execute(f"PRAGMA table_info({n})")] for n in names}
    found: dict[str, list[str]] = {}
    for table, column in conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
    ):
        found.setdefault(table, []).append(column)
    return found


def test_every_table_and_column_of_both_schemas_is_copied(tmp_path: Path, pg: str) -> None:
    copied = {t.name: list(t.columns) for t in TABLES}
    for target in (tmp_path / "soulbot.db", pg):
        with contextlib.closing(open_conn(target)) as conn:
            schema = columns(conn)
        assert {n: c for n, c in schema.items() if n not in NOT_COPIED} == copied, conn.engine


def found(postings: Postings) -> Postings:
    """`postings` with each term's ids sorted (newest first per scope, and the
    scopes in the order the engine lists them: not the same on both)."""
    ids = {term: sorted(got, reverse=True) for term, got in postings.ids.items()}
    return dataclasses.replace(postings, ids=ids)


async def check_alike(source: Path | str, target: Path | str) -> None:
    """What the stores read on `target` is what they read on `source`."""
    clock = Clock()
    got = []
    for where in (source, target):
        async with opened(where) as db:
            history, traces = HistoryStore(db, clock), TraceStore(db)
            gate = Access(db, config(), clock)
            ledger = Ledger(db, budget=config().budget, admins=config().admins, clock=clock)
            refusals = []
            for who, source_ in [("telegram:42", "turn"), ("discord:7", "turn"),
                                 ("telegram:1", "turn"), ("", "compile"),
                                 ("telegram:9", "turn")]:  # fmt: skip
                for estimate in (40, 120, 220, 360):
                    try:
                        await ledger.check(ctx(who, source_), estimate)  # type: ignore[arg-type]
                        refusals.append(None)
                    except BudgetExceeded as exc:
                        refusals.append((exc.kind, exc.who, exc.used))
            reports = await db.run(
                lambda c: [
                    usage_table(c, days=2, by=by, now=NOW) for by in ("soul", "source", "model")
                ]
            )
            got.append(
                {
                    "snapshots": [await history.load(s) for s in SESSIONS],
                    "unanswered": sorted(await history.unanswered(NOW - DAY)),
                    "sent": [await history.sent_text(s, f"s{n}b") for n, s in enumerate(SESSIONS)],
                    "search": found(await traces.search(SOUL, SCOPES, ["tea", "pears", "pie"], 10)),
                    "traces": await traces.after(SOUL, ANN, 0),
                    "folded": await traces.folded_into(SOUL, ANN, "people/ann"),
                    "approved": await gate.approved(),
                    "pending": await gate.pending(),
                    "reports": reports,
                    "refusals": refusals,
                    "reminders": await ReminderStore(db).pending("telegram", "42"),
                    "zone": await ReminderStore(db).zone("telegram", "42"),
                    "marks": await db.run(
                        lambda c: c.execute("SELECT session, entry FROM heartbeat_marks").fetchall()
                    ),
                }
            )
    on_source, on_target = got
    assert on_target == on_source
    assert on_source["search"].ids["tea"] and on_source["search"].ids["pie"]
    assert on_source["approved"] and on_source["pending"]
    assert None in on_source["refusals"] and {r[0] for r in on_source["refusals"] if r} == {
        "soul",
        "user",
        "admin",
        "background",
    }
    assert "claude-haiku-4-5" in on_source["reports"][2]
    assert "whisper-1" in on_source["reports"][2] and "tts-1" in on_source["reports"][2]


async def test_a_sqlite_store_reads_back_the_same_on_postgresql(store: Path, pg: str) -> None:
    report = run(store, pg)
    assert report.ok and report.added == sum(c.source for c in report.counts) > 30
    assert all(c.source > 0 for c in report.counts)  # every kind of row was there to copy
    await check_alike(store, pg)
    assert dump(pg) == dump(store)


async def test_new_rows_on_the_target_take_ids_past_the_copied_ones(store: Path, pg: str) -> None:
    run(store, pg)
    top = {t: max(r[0] for r in rows) for t, rows in dump(pg).items() if t in ("usage", "history")}
    async with opened(pg) as db:
        entry = await HistoryStore(db).append(SESSIONS[0], 1, "user", "back again")
        ledger = Ledger(db, budget=config().budget, admins=config().admins, clock=Clock())
        await ledger.record(ctx("telegram:42"), "claude-sonnet-4-6", Usage(1, 1))
        traces = TraceStore(db)
        [old_scope, new_scope] = await traces.add(
            [
                NewTrace(SOUL, ANN, SESSIONS[0], "user", "Ann", "oolong now", NOW + 5),
                NewTrace("wren", "shared", "x", None, "", "oolong too", NOW),
            ]
        )
        postings = await traces.search(SOUL, [ANN], ["oolong"], 10)
    assert entry.id == top["history"] + 1
    assert max(r[0] for r in dump(pg)["usage"]) == top["usage"] + 1
    old_ids = [r[0] for r in dump(store)["memory"]]
    assert old_scope == max(i for i in old_ids if i >> SCOPE_BITS == old_scope >> SCOPE_BITS) + 1
    assert new_scope >> SCOPE_BITS == max(i >> SCOPE_BITS for i in old_ids) + 1
    assert postings.ids["oolong"] == [old_scope]


async def test_a_second_run_copies_nothing(store: Path, pg: str) -> None:
    run(store, pg)
    first = dump(pg, derived_too=True)
    again = run(store, pg)
    assert again.ok and again.added == 0
    assert [c.before for c in again.counts] == [c.target for c in again.counts]
    assert dump(pg, derived_too=True) == first


class Stop(Exception):
    pass


class StopAfter:
    """A progress hook that stops the copy after `batches` batches, as a kill would."""

    def __init__(self, batches: int) -> None:
        self.left = batches
        self.total = 0

    def start(self, total: int) -> None:
        self.total = total

    def advance(self, table: str, rows: int) -> None:
        self.left -= 1
        if self.left == 0:
            raise Stop(table)


# Two rows a batch: usage's 5 rows are 3 batches, voice_usage's 3 the 4th and 5th, memory's
# 5 are the 22nd to 24th, the 25th the folds (then the web sign-in link), before the budget totals.
@pytest.mark.parametrize(
    ("batches", "table"),
    [(3, "usage"), (5, "voice_usage"), (23, "memory"), (25, "memory_folds")],
)
async def test_a_stopped_copy_run_again_ends_as_one_run_does(
    store: Path, pg: str, batches: int, table: str
) -> None:
    with postgres_schema() as whole:
        run(store, whole, batch_rows=2)
        hook = StopAfter(batches)
        with pytest.raises(Stop, match=table):
            run(store, pg, batch_rows=2, progress=hook)
        part = dump(pg, derived_too=True)
        assert 0 < sum(len(part[t.name]) for t in TABLES) <= hook.total
        assert not part["budget_totals"]  # filled last
        resumed = run(store, pg, batch_rows=2)
        assert resumed.ok and resumed.added == hook.total - sum(c.before for c in resumed.counts)
        assert dump(pg, derived_too=True) == dump(whole, derived_too=True)
    await check_alike(store, pg)


async def test_a_target_holding_another_store_is_refused(
    store: Path, pg: str, tmp_path: Path
) -> None:
    other = tmp_path / "other" / "soulbot.db"
    await fill(other, ("coffee", "plums"))
    run(other, pg)
    before = dump(pg, derived_too=True)
    with pytest.raises(
        SoulbotError, match=r"another store: its history row \(1\) differs from the source.s"
    ):
        run(store, pg)
    assert dump(pg, derived_too=True) == before


async def test_a_target_with_rows_past_the_source_is_refused(store: Path, pg: str) -> None:
    run(store, pg)
    async with opened(pg) as db:
        await HistoryStore(db).append(SESSIONS[0], 1, "user", "written on the target")
    with pytest.raises(SoulbotError, match=r"its history row \(\d+\) is not in the source"):
        run(store, pg)


def test_the_source_itself_is_refused(store: Path, pg: str, tmp_path: Path) -> None:
    link = tmp_path / "link.db"
    link.symlink_to(store)
    with pytest.raises(SoulbotError, match="the source and the target are the same store"):
        run(store, link)
    with pytest.raises(SoulbotError, match="the source and the target are the same store"):
        run(pg, pg)


async def test_postgresql_back_to_sqlite_gives_the_store_back(
    store: Path, pg: str, tmp_path: Path
) -> None:
    run(store, pg)
    back = tmp_path / "back" / "soulbot.db"
    report = run(pg, back, batch_rows=3)
    assert report.ok and report.added == sum(c.source for c in report.counts)
    assert dump(back, derived_too=True) == dump(store, derived_too=True)  # FTS5 rebuilt
    await check_alike(store, back)


async def test_an_older_sqlite_file_is_brought_up_to_date_first(store: Path, pg: str) -> None:
    conn = sqlite3.connect(store)
    conn.execute("DROP TABLE sent_messages")
    conn.execute("PRAGMA user_version = 3")
    conn.close()
    report = run(store, pg)
    assert report.ok and {c.table: c.source for c in report.counts}["sent_messages"] == 0


def test_a_batch_below_one_row_is_refused(store: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch_rows must be 1 or more"):
        run(store, tmp_path / "t.db", batch_rows=0)
