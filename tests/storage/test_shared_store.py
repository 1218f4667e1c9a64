"""Processes that share one PostgreSQL store count as one: two `Database`
objects on one schema stand for two processes (two connections)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from bot.chat.access import Access
from bot.config.load import parse_config
from bot.errors import BudgetExceeded
from bot.model.client import Usage
from bot.model.usage import Ledger
from bot.storage.db import SCHEMA_VERSION, Database
from tests.chat.test_access import code_of, dm
from tests.engines import postgres_schema
from tests.model.test_usage import SONNET, Clock, budget, ctx


async def test_one_daily_budget_for_every_process(two: tuple[Database, Database]) -> None:
    clock = Clock()
    here, there = (Ledger(db, budget=budget(user=1_000), clock=clock) for db in two)
    await here.check(ctx(), 100)  # loads nothing a later record would miss
    await there.record(ctx(), SONNET, Usage(input_tokens=950))
    with pytest.raises(BudgetExceeded) as refused:
        await here.check(ctx(), 100)  # 950 spent in the other process + 100 > 1,000
    assert refused.value.used == 950
    await here.check(ctx(user="telegram:43"), 100)  # another user's budget is untouched


async def test_a_call_never_waits_on_the_total_another_process_has_not_committed(
    two: tuple[Database, Database],
) -> None:
    """Each process adds to budget rows of its own, and a budget's total is
    their sum: a call recorded while another process's transaction holds its
    total uncommitted goes through at once. (With one row a budget it waited
    for the other's commit and disk flush, its whole database thread stopped.)"""
    first, second = two
    clock = Clock()
    here = Ledger(first, budget=budget(user=1_000), instance="a", clock=clock)
    there = Ledger(second, budget=budget(user=1_000), instance="b", clock=clock)
    await first.run(lambda conn: conn.execute("BEGIN"))
    try:
        await here.record(ctx(), SONNET, Usage(input_tokens=300))  # held until COMMIT
        await asyncio.wait_for(there.record(ctx(), SONNET, Usage(input_tokens=200)), timeout=5)
    finally:
        await first.run(lambda conn: conn.execute("COMMIT"))
    with pytest.raises(BudgetExceeded) as refused:
        await there.check(ctx(), 600)  # 300 here + 200 there + 600 > 1,000
    assert refused.value.used == 500


async def test_an_approval_or_a_revocation_holds_in_every_process(
    two: tuple[Database, Database],
) -> None:
    config = parse_config("", "t", {})
    here, there = (Access(db, config, Clock()) for db in two)
    code = code_of((await here.admit(dm("7"))).reply)
    assert not (await there.admit(dm("7"))).admitted  # asked there: the same code
    assert code_of((await there.admit(dm("7"))).reply) == code
    await there.approve(code, "telegram:1")
    assert (await here.admit(dm("7"))).admitted
    assert await here.revoke("telegram", "7", "telegram:1")
    assert not (await there.admit(dm("7"))).admitted


async def test_a_schema_4_store_keeps_the_totals_it_counted() -> None:
    """Schema 4 kept one row a budget; opened by this soulbot, that row is the
    total of a process named '' and still counts."""
    with postgres_schema() as url:
        database = Database(url)
        await database.open()
        await database.close()
        with psycopg.connect(url, autocommit=True) as raw:  # back to schema 4's table
            raw.execute("DROP TABLE budget_totals")
            raw.execute(
                "CREATE TABLE budget_totals (day TEXT NOT NULL, kind TEXT NOT NULL, "
                "who TEXT NOT NULL, tokens BIGINT NOT NULL, PRIMARY KEY (day, kind, who))"
            )
            raw.execute(
                "INSERT INTO budget_totals VALUES ('2025-03-10', 'user', 'telegram:42', 700)"
            )
            raw.execute("UPDATE soulbot_schema SET version = 4")
        database = Database(url)
        await database.open()
        try:
            ledger = Ledger(database, budget=budget(user=1_000), instance="a", clock=Clock())
            await ledger.record(ctx(), SONNET, Usage(input_tokens=100))
            with pytest.raises(BudgetExceeded) as refused:
                await ledger.check(ctx(), 300)  # 700 + 100 + 300 > 1,000
            assert refused.value.used == 800
            version = await database.run(
                lambda conn: conn.execute("SELECT version FROM soulbot_schema").fetchone()[0]
            )
            assert version == SCHEMA_VERSION
        finally:
            await database.close()
