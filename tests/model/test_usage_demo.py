"""The demo model of the no-key trial (`make fake` reports the model "demo") is free."""

from __future__ import annotations

import sqlite3

import pytest

from bot.config.schema import BudgetConfig, Price
from bot.model.usage import DEFAULT_PRICES, CallContext, Ledger, Usage, price_for, usage_table
from bot.storage.db import Database
from tests.fakes.demo import DEMO_MODEL
from tests.kit import capture_logs

NOW = 1_767_268_800.0  # 2026-01-01 12:00 UTC
NO_LIMITS = BudgetConfig(
    daily_tokens_per_soul=None,
    daily_tokens_per_user=None,
    daily_tokens_per_admin=None,
    daily_tokens_background=None,
)
FREE = Price(input=0, output=0, cache_write=0, cache_read=0)
MANY = Usage(
    input_tokens=1_000_000,
    output_tokens=1_000_000,
    cache_creation_input_tokens=1_000_000,
    cache_read_input_tokens=1_000_000,
)


@pytest.mark.parametrize("model", [DEMO_MODEL, "demo", "demo-2", "demo-large-20260101"])
def test_the_demo_model_is_priced_at_zero(model: str) -> None:
    assert DEFAULT_PRICES["demo"] == FREE
    assert price_for(model) == FREE
    assert MANY.cost(FREE) == 0.0


def test_a_configured_price_for_demo_still_wins() -> None:
    mine = Price(input=1, output=2, cache_write=3, cache_read=4)
    assert price_for("demo", {"demo": mine}) == mine
    assert price_for("claude-sonnet-4-6") != FREE  # the real models keep their prices


async def test_demo_tokens_cost_nothing_in_the_ledger_and_the_report(db: Database) -> None:
    ledger = Ledger(db, budget=NO_LIMITS, clock=lambda: NOW)
    ctx = CallContext("lark", "shared", "console:ann", "console:ann", "turn")
    with capture_logs() as logs:
        cost = await ledger.record(ctx, DEMO_MODEL, MANY)
        await ledger.record(ctx, "claude-sonnet-4-6", Usage(input_tokens=1_000_000))
    assert cost == 0.0
    assert not [e for e in logs if e["event"] == "llm.price_unknown"]

    def report(conn: sqlite3.Connection) -> str:
        return usage_table(conn, days=1, by="model", now=NOW)

    table = (await db.run(report)).split("\n")
    [demo] = [line for line in table if line.startswith("demo ")]
    [sonnet] = [line for line in table if line.startswith("claude-sonnet-4-6 ")]
    assert demo.endswith(" 0.0000") and "4,000,000" not in demo  # the tokens are counted
    assert "1,000,000" in demo and sonnet.endswith(" 3.0000")
