"""Processes that share one PostgreSQL store count as one: two `Database`
objects on one schema stand for two processes (two connections)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.chat.access import Access
from bot.config.load import parse_config
from bot.errors import BudgetExceeded
from bot.model.client import Usage
from bot.model.usage import Ledger
from bot.storage.db import Database
from tests.chat.test_access import code_of, dm
from tests.engines import postgres_schema
from tests.model.test_usage import SONNET, Clock, budget, ctx


@pytest.fixture
async def two() -> AsyncIterator[tuple[Database, Database]]:
    with postgres_schema() as url:
        first, second = Database(url), Database(url)
        await first.open()
        await second.open()
        try:
            yield first, second
        finally:
            await first.close()
            await second.close()


async def test_one_daily_budget_for_every_process(two: tuple[Database, Database]) -> None:
    clock = Clock()
    here, there = (Ledger(db, budget=budget(user=1_000), clock=clock) for db in two)
    await here.check(ctx(), 100)  # loads nothing a later record would miss
    await there.record(ctx(), SONNET, Usage(input_tokens=950))
    with pytest.raises(BudgetExceeded) as refused:
        await here.check(ctx(), 100)  # 950 spent in the other process + 100 > 1,000
    assert refused.value.used == 950
    await here.check(ctx(user="telegram:43"), 100)  # another user's budget is untouched


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


async def test_a_lock_is_held_by_one_process_at_a_time(two: tuple[Database, Database]) -> None:
    here, there = two
    assert await here.try_lock("wiki\0lark\0user:test:ann")
    assert not await there.try_lock("wiki\0lark\0user:test:ann")
    assert await there.try_lock("wiki\0lark\0user:test:bob")  # another wiki's is free
    await here.unlock("wiki\0lark\0user:test:ann")
    assert await there.try_lock("wiki\0lark\0user:test:ann")
