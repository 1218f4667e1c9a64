"""The usage ledger, prices and the daily token budgets (docs/conversations.md)."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot import prompts
from bot.config.schema import AdminsConfig, BudgetConfig, Price
from bot.errors import BudgetExceeded
from bot.model.usage import (
    DEFAULT_PRICES,
    UNKNOWN,
    CallContext,
    Ledger,
    Source,
    Usage,
    day_totals,
    price_for,
    usage_table,
)
from bot.storage.db import Database, open_conn
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import capture_logs, make_config, running

NOON = datetime(2025, 3, 10, 12, 0, tzinfo=UTC).timestamp()
DAY = 86_400.0
SONNET = "claude-sonnet-4-5-20250929"
NO_LIMITS = BudgetConfig(
    daily_tokens_per_soul=None,
    daily_tokens_per_user=None,
    daily_tokens_per_admin=None,
    daily_tokens_background=None,
)
ADMINS = AdminsConfig(telegram=(1,), discord=(7,))


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def ctx(
    user: str = "telegram:42", soul: str = "aria", source: Source = "turn", session: str = ""
) -> CallContext:
    return CallContext(
        soul=soul,
        scope=f"user:{user}" if user else "shared",
        session=session or user or "console:local",
        user=user,
        source=source,
    )


def budget(
    soul: int | None = None,
    user: int | None = None,
    admin: int | None = None,
    background: int | None = None,
) -> BudgetConfig:
    return BudgetConfig(
        daily_tokens_per_soul=soul,
        daily_tokens_per_user=user,
        daily_tokens_per_admin=admin,
        daily_tokens_background=background,
    )


async def rows(db: Database) -> list[dict[str, Any]]:
    def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
        cursor = conn.execute("SELECT * FROM usage ORDER BY id")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor]

    return await db.run(read)


# -- prices -------------------------------------------------------------------


def test_price_for_exact_key() -> None:
    opus = price_for("claude-opus-4-1")
    assert opus == DEFAULT_PRICES["claude-opus-4-1"]
    assert opus is not None and (opus.input, opus.output) == (15, 75)
    assert price_for("claude-opus-4-6") == DEFAULT_PRICES["claude-opus-4-6"]


@pytest.mark.parametrize(
    ("model", "input_usd", "output_usd"),
    [
        ("claude-sonnet-4-5", 3, 15),
        ("claude-sonnet-4-6", 3, 15),
        ("claude-opus-4-5", 5, 25),  # the longer key wins over claude-opus-4
        ("claude-sonnet-4-5-20250929", 3, 15),
        ("claude-opus-4-20250514", 15, 75),
        ("claude-opus-4-1-20250805", 15, 75),
        ("claude-opus-4-5-20251101", 5, 25),
        ("claude-opus-4-7", 5, 25),  # not the $15 of claude-opus-4
        ("claude-haiku-4-5-20251001", 1, 5),
        ("claude-3-5-haiku-20241022", 0.80, 4),
    ],
)
def test_price_for_prefix_and_date_suffix(model: str, input_usd: float, output_usd: float) -> None:
    price = price_for(model)
    assert price is not None
    assert (price.input, price.output) == (input_usd, output_usd)


def test_default_cache_prices_follow_input_price() -> None:
    for name, price in DEFAULT_PRICES.items():
        assert price.cache_write == pytest.approx(1.25 * price.input), name
        assert price.cache_read == pytest.approx(0.1 * price.input), name


def test_price_for_override_wins() -> None:
    mine = Price(input=1, output=2, cache_write=3, cache_read=4)
    assert price_for("claude-sonnet-4-6", {"claude-sonnet-4-6": mine}) == mine
    assert price_for("claude-sonnet-4-6-20260101", {"claude-sonnet-4": mine}) == mine
    # An override family covers a model the defaults know more precisely.
    assert price_for("claude-opus-4-5-20251101", {"claude-opus-4": mine}) == mine
    assert price_for("claude-opus-4-5", {"claude-opus-4": mine}) == mine
    # ...and leaves other models to the defaults.
    assert (
        price_for("claude-haiku-4-5", {"claude-opus-4": mine}) == DEFAULT_PRICES["claude-haiku-4-5"]
    )
    assert price_for("my-gateway-model", {"my-gateway-model": mine}) == mine


@pytest.mark.parametrize("model", ["gpt-4o", "claude-3-opus-20240229", "", "sonnet"])
def test_price_for_unknown_is_none(model: str) -> None:
    assert price_for(model) is None


def test_usage_total_and_cost() -> None:
    usage = Usage(
        input_tokens=2_000,
        output_tokens=500,
        cache_creation_input_tokens=1_000,
        cache_read_input_tokens=10_000,
    )
    assert usage.total == 13_500
    price = Price(input=3, output=15, cache_write=3.75, cache_read=0.3)
    # 2000*3 + 500*15 + 1000*3.75 + 10000*0.3 = 20250 per million
    assert usage.cost(price) == pytest.approx(0.02025)
    million = Usage(1_000_000, 1_000_000, 1_000_000, 1_000_000)
    assert million.cost(price) == pytest.approx(3 + 15 + 3.75 + 0.3)
    assert Usage().total == 0
    assert Usage().cost(price) == 0


def test_usage_rejects_negative_counts() -> None:
    with pytest.raises(ValueError, match="negative"):
        Usage(output_tokens=-1)


# -- the ledger ---------------------------------------------------------------


async def test_record_writes_a_row_and_logs_llm_usage(db: Database) -> None:
    ledger = Ledger(db, budget=NO_LIMITS, clock=Clock(NOON))
    usage = Usage(2_000, 500, 1_000, 10_000)
    call = ctx(source="heartbeat", session="telegram:-100:7")
    with capture_logs() as logs:
        cost = await ledger.record(call, SONNET, usage)

    assert cost == pytest.approx(0.02025)
    [row] = await rows(db)
    assert row.pop("id") == 1
    expected = {
        "soul": "aria",
        "scope": "user:telegram:42",
        "session": "telegram:-100:7",
        "user": "telegram:42",
        "source": "heartbeat",
        "model": SONNET,
        "input_tokens": 2_000,
        "output_tokens": 500,
        "cache_creation_input_tokens": 1_000,
        "cache_read_input_tokens": 10_000,
        "cost_usd": pytest.approx(0.02025),
    }
    assert row == {"ts": NOON, "day": "2025-03-10", **expected}
    [line] = [e for e in logs if e["event"] == "llm.usage"]
    assert line == {"event": "llm.usage", "log_level": "info", **expected}


async def test_record_day_is_the_utc_date(db: Database) -> None:
    late = datetime(2025, 3, 10, 23, 59, 59, tzinfo=UTC).timestamp()
    ledger = Ledger(db, budget=NO_LIMITS, clock=Clock(late))
    await ledger.record(ctx(), SONNET, Usage(1))
    ledger = Ledger(db, budget=NO_LIMITS, clock=Clock(late + 2))
    await ledger.record(ctx(), SONNET, Usage(1))
    assert [r["day"] for r in await rows(db)] == ["2025-03-10", "2025-03-11"]


async def test_record_uses_configured_prices(db: Database) -> None:
    mine = Price(input=100, output=0, cache_write=0, cache_read=0)
    ledger = Ledger(db, prices={"claude-sonnet-4": mine}, budget=NO_LIMITS, clock=Clock())
    assert await ledger.record(ctx(), SONNET, Usage(input_tokens=10_000)) == pytest.approx(1.0)
    [row] = await rows(db)
    assert row["cost_usd"] == pytest.approx(1.0)


async def test_unknown_model_warns_once_per_model(db: Database) -> None:
    ledger = Ledger(db, budget=NO_LIMITS, clock=Clock())
    with capture_logs() as logs:
        first = await ledger.record(ctx(), "mystery-1", Usage(100, 10))
        second = await ledger.record(ctx(), "mystery-1", Usage(100, 10))
        await ledger.record(ctx(), "mystery-2", Usage(1))
    assert first == second == 0.0
    warnings = [e for e in logs if e["event"] == "llm.price_unknown"]
    assert [(w["model"], w["log_level"]) for w in warnings] == [
        ("mystery-1", "warning"),
        ("mystery-2", "warning"),
    ]
    assert [r["cost_usd"] for r in await rows(db)] == [0.0, 0.0, 0.0]
    assert len([e for e in logs if e["event"] == "llm.usage"]) == 3


# -- budgets ------------------------------------------------------------------


async def test_under_the_limit_passes(db: Database) -> None:
    ledger = Ledger(db, budget=budget(soul=1_000, user=500), clock=Clock())
    await ledger.record(ctx(), SONNET, Usage(300))
    with capture_logs() as logs:
        await ledger.check(ctx(), 200)  # exactly at the user limit is allowed
        await ledger.check(ctx(), 0)
    assert not [e for e in logs if e["event"] == "budget.refused"]


async def test_soul_limit_refuses(db: Database) -> None:
    ledger = Ledger(db, budget=budget(soul=1_000), clock=Clock())
    await ledger.record(ctx("telegram:1"), SONNET, Usage(600, 100, 100, 100))
    await ledger.check(ctx("telegram:2"), 100)
    with capture_logs() as logs, pytest.raises(BudgetExceeded) as caught:
        await ledger.check(ctx("telegram:2", session="telegram:-5"), 101)
    assert (caught.value.kind, caught.value.who) == ("soul", "aria")
    assert (caught.value.limit, caught.value.used) == (1_000, 900)
    assert logs == [
        {
            "event": "budget.refused",
            "log_level": "warning",
            "kind": "soul",
            "who": "aria",
            "limit": 1_000,
            "used": 900,
            "estimated": 101,
            "soul": "aria",
            "session": "telegram:-5",
        }
    ]
    # Another soul has its own budget.
    await ledger.check(ctx("telegram:2", soul="twinkle"), 1_000)


async def test_user_limit_refuses_that_user_only(db: Database) -> None:
    ledger = Ledger(db, budget=budget(user=500), clock=Clock())
    await ledger.record(ctx("telegram:42"), SONNET, Usage(400, 50))
    with capture_logs() as logs, pytest.raises(BudgetExceeded) as caught:
        await ledger.check(ctx("telegram:42"), 51)
    assert (caught.value.kind, caught.value.who, caught.value.used) == ("user", "telegram:42", 450)
    assert [(e["event"], e["kind"], e["who"]) for e in logs] == [
        ("budget.refused", "user", "telegram:42")
    ]
    await ledger.check(ctx("telegram:43"), 500)
    await ledger.check(ctx("discord:42"), 500)


async def test_soul_limit_is_checked_before_user_limit(db: Database) -> None:
    ledger = Ledger(db, budget=budget(soul=100, user=100), clock=Clock())
    with pytest.raises(BudgetExceeded) as caught:
        await ledger.check(ctx(), 101)
    assert caught.value.kind == "soul"


async def test_background_work_has_its_own_budget(db: Database) -> None:
    ledger = Ledger(db, budget=budget(soul=1_000, user=100, background=1_000), clock=Clock())
    for source in ("compile", "heartbeat", "compact"):
        call = ctx(user="" if source == "compile" else "telegram:42", source=source)
        await ledger.check(call, 300)  # neither the soul's nor the user's limit applies
        await ledger.record(call, SONNET, Usage(300))
    # 900 background tokens today: the chat budgets are untouched...
    await ledger.check(ctx("telegram:42"), 100)
    await ledger.check(ctx("telegram:43", soul="twinkle"), 100)
    # ...and the background budget is every soul's together.
    with capture_logs() as logs, pytest.raises(BudgetExceeded) as caught:
        await ledger.check(ctx(user="", soul="twinkle", source="compile"), 101)
    assert (caught.value.kind, caught.value.who) == ("background", "every soul")
    assert (caught.value.limit, caught.value.used) == (1_000, 900)
    assert [(e["event"], e["kind"], e["soul"]) for e in logs] == [
        ("budget.refused", "background", "twinkle")
    ]


async def test_chat_turns_do_not_spend_the_background_budget(db: Database) -> None:
    ledger = Ledger(db, budget=budget(soul=1_000, background=100), clock=Clock())
    await ledger.record(ctx("telegram:42"), SONNET, Usage(900))
    await ledger.check(ctx(user="", source="compile"), 100)
    with pytest.raises(BudgetExceeded) as caught:
        await ledger.check(ctx("telegram:43"), 101)
    assert (caught.value.kind, caught.value.used) == ("soul", 900)


async def test_an_admin_is_never_refused_by_the_soul_or_user_budget(db: Database) -> None:
    ledger = Ledger(db, budget=budget(soul=1_000, user=100), admins=ADMINS, clock=Clock())
    await ledger.record(ctx("telegram:5"), SONNET, Usage(1_000))  # the soul's day is spent
    with pytest.raises(BudgetExceeded):
        await ledger.check(ctx("telegram:6"), 1)
    for admin in ("telegram:1", "discord:7", "console:ann"):
        await ledger.check(ctx(admin), 50_000)
        await ledger.record(ctx(admin), SONNET, Usage(50_000))
    # An id is an admin's on its own platform only; a group is charged, not its speaker.
    for other in ("discord:1", "telegram:7", "telegram:chat:1"):
        with pytest.raises(BudgetExceeded) as caught:
            await ledger.check(ctx(other), 1)
        assert caught.value.kind == "soul"


async def test_an_admin_has_a_cap_of_their_own(db: Database) -> None:
    ledger = Ledger(db, budget=budget(soul=1_000, admin=500), admins=ADMINS, clock=Clock())
    await ledger.record(ctx("telegram:1"), SONNET, Usage(400))
    await ledger.check(ctx("telegram:1"), 100)
    with capture_logs() as logs, pytest.raises(BudgetExceeded) as caught:
        await ledger.check(ctx("telegram:1"), 101)
    assert (caught.value.kind, caught.value.who) == ("admin", "telegram:1")
    assert (caught.value.limit, caught.value.used) == (500, 400)
    assert [(e["event"], e["kind"]) for e in logs] == [("budget.refused", "admin")]
    await ledger.check(ctx("discord:7"), 500)  # each admin has their own
    await ledger.check(ctx("telegram:5"), 1_000)  # the admin's tokens are not the soul's


async def test_an_admins_background_work_is_background(db: Database) -> None:
    ledger = Ledger(db, budget=budget(admin=100, background=1_000), admins=ADMINS, clock=Clock())
    await ledger.record(ctx("telegram:1", source="compact"), SONNET, Usage(900))
    await ledger.check(ctx("telegram:1"), 100)
    with pytest.raises(BudgetExceeded) as caught:
        await ledger.check(ctx("telegram:1", source="heartbeat"), 101)
    assert caught.value.kind == "background"


async def test_no_limits_never_refuse(db: Database) -> None:
    ledger = Ledger(db, budget=NO_LIMITS, clock=Clock())
    await ledger.record(ctx(), SONNET, Usage(10**9, 10**9))
    await ledger.check(ctx(), 10**12)
    await ledger.check(ctx(user=""), 10**12)


async def test_record_after_check_updates_the_totals(db: Database) -> None:
    ledger = Ledger(db, budget=budget(soul=1_000), clock=Clock())
    await ledger.check(ctx(), 0)  # loads today's totals (none yet)
    await ledger.record(ctx(), SONNET, Usage(500, 100, 200, 100))
    await ledger.check(ctx(), 100)
    with pytest.raises(BudgetExceeded) as caught:
        await ledger.check(ctx(), 101)
    assert caught.value.used == 900


@pytest.mark.parametrize("check_first", [True, False])
async def test_concurrent_check_and_record_count_once(db: Database, check_first: bool) -> None:
    ledger = Ledger(db, budget=budget(soul=1_000, user=1_000), clock=Clock())
    await ledger.record(ctx(), SONNET, Usage(300))
    record = ledger.record(ctx(), SONNET, Usage(400))
    check = ledger.check(ctx(), 0)
    await asyncio.gather(*((check, record) if check_first else (record, check)))
    await ledger.check(ctx(), 300)
    with pytest.raises(BudgetExceeded) as caught:
        await ledger.check(ctx(), 301)
    assert caught.value.used == 700


async def test_each_budgets_totals_survive_a_restart(db: Database) -> None:
    limits = budget(soul=1_000, user=1_000, admin=1_000, background=1_000)
    first = Ledger(db, budget=limits, admins=ADMINS, clock=Clock())
    await first.record(ctx("telegram:5"), SONNET, Usage(100))
    await first.record(ctx("telegram:1"), SONNET, Usage(200))
    await first.record(ctx(user="", source="compile"), SONNET, Usage(300))
    await first.record(ctx("telegram:5", source="heartbeat"), SONNET, Usage(400))

    again = Ledger(db, budget=limits, admins=ADMINS, clock=Clock())
    for call, used in (
        (ctx("telegram:6"), 100),
        (ctx("telegram:1"), 200),
        (ctx(user="", source="compact"), 700),
    ):
        with pytest.raises(BudgetExceeded) as caught:
            await again.check(call, 1_001 - used)
        assert caught.value.used == used


async def test_totals_survive_a_restart(db: Database) -> None:
    clock = Clock()
    first = Ledger(db, budget=budget(soul=1_000, user=500), clock=clock)
    await first.check(ctx(), 0)
    await first.record(ctx("telegram:1"), SONNET, Usage(300))
    await first.record(ctx("telegram:2"), SONNET, Usage(450))

    again = Ledger(db, budget=budget(soul=1_000, user=500), clock=clock)
    with pytest.raises(BudgetExceeded) as soul:
        await again.check(ctx("telegram:3"), 251)
    assert (soul.value.kind, soul.value.used) == ("soul", 750)
    with pytest.raises(BudgetExceeded) as user:
        await again.check(ctx("telegram:2"), 51)
    assert (user.value.kind, user.value.used) == ("user", 450)
    await again.check(ctx("telegram:3"), 250)


async def test_the_day_rolls_over_at_utc_midnight(db: Database) -> None:
    clock = Clock(datetime(2025, 3, 10, 23, 59, tzinfo=UTC).timestamp())
    ledger = Ledger(db, budget=budget(soul=1_000, user=500), clock=clock)
    await ledger.record(ctx(), SONNET, Usage(500))
    with pytest.raises(BudgetExceeded):
        await ledger.check(ctx(), 1)

    clock.now += 120  # 00:01 the next day
    await ledger.check(ctx(), 500)
    await ledger.record(ctx(), SONNET, Usage(450))
    with pytest.raises(BudgetExceeded) as caught:
        await ledger.check(ctx(), 51)
    assert (caught.value.kind, caught.value.used) == ("user", 450)
    # A restart on the new day sees the new day only.
    restarted = Ledger(db, budget=budget(soul=1_000, user=500), clock=clock)
    await restarted.check(ctx(), 50)
    with pytest.raises(BudgetExceeded):
        await restarted.check(ctx(), 51)


async def test_a_clock_set_back_does_not_count_tomorrow_today(db: Database) -> None:
    clock = Clock()
    ledger = Ledger(db, budget=budget(soul=1_000), clock=clock)
    await ledger.check(ctx(), 0)  # loads 2025-03-10
    clock.now += DAY
    await ledger.record(ctx(), SONNET, Usage(900))  # a 2025-03-11 row
    clock.now -= DAY  # the clock is corrected back to 2025-03-10
    await ledger.check(ctx(), 1_000)


# -- the report ---------------------------------------------------------------


def parse(report: str) -> dict[str, list[str]]:
    """Report rows by their first cell (the title, header and rules left out)."""
    _title, _header, _rule, *body = report.splitlines()
    return {line.split()[0]: line.split()[1:] for line in body if not line.startswith("-")}


async def fill(db: Database) -> None:
    """Two souls, three sources, two models, over three days (today = 2025-03-10)."""
    clock = Clock()
    ledger = Ledger(db, budget=NO_LIMITS, clock=clock)
    haiku = "claude-haiku-4-5"
    clock.now = NOON
    await ledger.record(ctx(soul="aria"), SONNET, Usage(1_000, 500, 2_000, 1_000))
    await ledger.record(ctx(soul="aria"), SONNET, Usage(1_000, 500, 0, 2_000))
    await ledger.record(ctx(user="", soul="aria", source="compile"), haiku, Usage(10_000, 2_000))
    clock.now = NOON - DAY
    await ledger.record(ctx(soul="twinkle", source="heartbeat"), haiku, Usage(500, 100))
    clock.now = NOON - 3 * DAY
    await ledger.record(ctx(soul="twinkle"), SONNET, Usage(1_000_000, 1_000))


async def report(db: Database, *, days: int, by: str, now: float = NOON) -> str:
    return await db.run(lambda conn: usage_table(conn, days=days, by=by, now=now))


async def test_usage_table_by_soul(db: Database) -> None:
    await fill(db)
    text = await report(db, days=2, by="soul")
    lines = text.splitlines()
    assert lines[0] == "Usage by soul, 2025-03-09 to 2025-03-10 UTC"
    assert re.split(r"\s{2,}", lines[1].strip()) == [
        "soul", "calls", "input", "output", "cache write", "cache read", "cache hit", "cost USD"
    ]  # fmt: skip
    assert len({len(line) for line in lines[1:]}) == 1, "columns are aligned"
    table = parse(text)
    # aria: input 12,000, cache write 2,000, cache read 3,000 -> 3000/17000 = 17.6%
    # cost: sonnet 2000*3 + 1000*15 + 2000*3.75 + 3000*0.3 = 29,400 ; haiku 10000*1 + 2000*5
    assert table["aria"] == ["3", "12,000", "3,000", "2,000", "3,000", "17.6%", "0.0494"]
    assert table["twinkle"] == ["1", "500", "100", "0", "0", "0.0%", "0.0010"]
    assert table["TOTAL"] == ["4", "12,500", "3,100", "2,000", "3,000", "17.1%", "0.0504"]
    assert list(table) == ["aria", "twinkle", "TOTAL", "chat", "background"]  # dearest first


async def test_usage_table_splits_the_total_into_chat_and_background(db: Database) -> None:
    await fill(db)
    lines = (await report(db, days=2, by="soul")).splitlines()
    assert lines[-3].startswith("TOTAL ")
    assert lines[-2].startswith("  chat ") and lines[-1].startswith("  background ")
    table = parse("\n".join(lines))
    # chat: aria's two turns; background: aria's compile (haiku) and twinkle's heartbeat
    assert table["chat"] == ["2", "2,000", "1,000", "2,000", "3,000", "42.9%", "0.0294"]
    assert table["background"] == ["2", "10,500", "2,100", "0", "0", "0.0%", "0.0210"]
    # A family with nothing in the window still has its row.
    only_chat = parse(await report(db, days=4, by="model", now=NOON - 3 * DAY))
    assert only_chat["background"] == ["0", "0", "0", "0", "0", "-", "0.0000"]
    assert only_chat["chat"] == only_chat["TOTAL"]


async def test_usage_table_shows_what_ambient_mode_costs_under_chat(db: Database) -> None:
    await fill(db)
    assert "ambient" not in await report(db, days=2, by="soul")  # no such calls: no row
    ledger = Ledger(db, budget=NO_LIMITS, clock=Clock())
    await ledger.record(ctx(soul="aria", source="ambient"), "claude-haiku-4-5", Usage(300, 20))
    await ledger.record(ctx(soul="aria", source="ambient_reply"), SONNET, Usage(1_000, 100))
    lines = (await report(db, days=2, by="soul")).splitlines()
    assert [line.split()[0] for line in lines[-4:]] == ["TOTAL", "chat", "ambient", "background"]
    assert lines[-2].startswith("    ambient ")
    table = parse("\n".join(lines))
    assert table["ambient"][:3] == ["2", "1,300", "120"]  # the gate's call and the reply's
    assert table["chat"][:2] == ["4", "3,300"]  # ambient's calls are chat's too
    by_source = (await report(db, days=2, by="source")).splitlines()
    sources = sorted(line.split()[:2] for line in by_source if line.startswith("ambient"))
    assert sources == [["ambient", "1"], ["ambient_reply", "1"]]  # a row of each source


@pytest.mark.parametrize(
    ("by", "keys"),
    [
        ("source", {"turn": "2", "compile": "1", "heartbeat": "1"}),
        ("day", {"2025-03-09": "1", "2025-03-10": "3"}),
        ("model", {SONNET: "2", "claude-haiku-4-5": "2"}),
    ],
)
async def test_usage_table_by_each_key(db: Database, by: str, keys: dict[str, str]) -> None:
    await fill(db)
    text = await report(db, days=2, by=by)
    assert text.splitlines()[1].split()[0] == by
    table = parse(text)
    totals = ("TOTAL", "chat", "background")
    assert {key: cells[0] for key, cells in table.items() if key not in totals} == keys
    assert table["TOTAL"][:2] == ["4", "12,500"]
    if by == "day":
        assert list(table) == ["2025-03-09", "2025-03-10", *totals]


async def test_usage_table_days_window(db: Database) -> None:
    await fill(db)
    assert parse(await report(db, days=1, by="day")).keys() == {
        "2025-03-10", "TOTAL", "chat", "background"
    }  # fmt: skip
    assert parse(await report(db, days=3, by="day"))["TOTAL"][0] == "4"
    wide = parse(await report(db, days=4, by="day"))
    assert wide["TOTAL"][:2] == ["5", "1,012,500"]
    assert wide["2025-03-07"][-1] == "3.0150"
    # Rows after `now` are not in the window either.
    early = parse(await report(db, days=1, by="soul", now=NOON - DAY))
    assert early["TOTAL"][0] == "1"


async def test_usage_table_empty(db: Database) -> None:
    text = await report(db, days=7, by="soul")
    assert text == "No usage recorded in the last 7 day(s) (2025-03-04 to 2025-03-10 UTC)."
    await fill(db)
    old = await report(db, days=1, by="soul", now=NOON + 30 * DAY)
    assert old.startswith("No usage recorded") and "\n" not in old


async def test_usage_table_through_a_plain_connection(db: Database, tmp_path: Path) -> None:
    await fill(db)
    conn = open_conn(db.target)
    try:
        text = usage_table(conn, days=30, by="model", now=NOON)
    finally:
        conn.close()
    assert parse(text)["TOTAL"][0] == "5"


@pytest.mark.parametrize("by", ["user", "soul; DROP TABLE usage", ""])
def test_usage_table_bad_group_raises(tmp_path: Path, by: str) -> None:
    conn = open_conn(tmp_path / "soulbot.db")
    try:
        with pytest.raises(ValueError, match="soul, source, day, model"):
            usage_table(conn, days=7, by=by, now=NOON)
    finally:
        conn.close()


def test_usage_table_bad_days_raises(tmp_path: Path) -> None:
    conn = open_conn(tmp_path / "soulbot.db")
    try:
        with pytest.raises(ValueError, match="days"):
            usage_table(conn, days=0, by="soul", now=NOON)
    finally:
        conn.close()


# -- cache figures a server did not report (docs/model-servers.md) ----------


def test_an_unknown_cache_figure_is_unknown_until_a_known_one_joins() -> None:
    unknown = Usage(100, 10, None, None)
    assert (unknown + unknown).cache_read_input_tokens is None
    assert (unknown + Usage(1, 1, 5, 7)) == Usage(101, 11, 5, 7)
    assert unknown.total == 110  # counted as no token, by the budgets and the cost
    assert unknown.cost(Price(input=1, output=1, cache_write=9, cache_read=9)) == 110 / 1e6


async def test_unknown_cache_figures_are_null_charged_as_none_and_reported_unknown(
    db: Database,
) -> None:
    ledger = Ledger(db, budget=budget(user=1_000), clock=Clock())
    await ledger.record(ctx(), SONNET, Usage(300, 50, None, None))
    await ledger.record(ctx(), SONNET, Usage(100, 50, None, None))
    rows = await db.run(
        lambda c: c.execute(
            "SELECT cache_creation_input_tokens, cache_read_input_tokens FROM usage"
        ).fetchall()
    )
    assert [tuple(row) for row in rows] == [(None, None), (None, None)]
    assert await db.run(lambda c: day_totals(c, NOON)) == (500, pytest.approx(0.0027))
    with pytest.raises(BudgetExceeded) as refused:
        await ledger.check(ctx(), 501)
    assert refused.value.used == 500
    text = await report(db, days=1, by="soul")
    assert parse(text)["aria"] == ["2", "400", "100", UNKNOWN, UNKNOWN, UNKNOWN, "0.0027"]
    assert text.splitlines()[-1] == (
        "Cache figures of 2 call(s) are unknown: their model server reported none."
    )


async def test_a_report_with_some_unknown_cache_figures_marks_the_known_part(
    db: Database,
) -> None:
    ledger = Ledger(db, budget=NO_LIMITS, clock=Clock())
    await ledger.record(ctx(soul="aria"), SONNET, Usage(1_000, 10, 1_000, 2_000))
    await ledger.record(ctx(soul="aria"), "llama3", Usage(5_000, 10, None, None))
    await ledger.record(ctx(soul="twinkle"), SONNET, Usage(1_000, 10, 0, 0))
    text = await report(db, days=1, by="soul")
    table = parse(text)
    # aria: the hit share is the known call's: 2000 / (1000 + 1000 + 2000)
    assert table["aria"][3:6] == ["1,000*", "2,000*", "50.0%*"]
    assert table["twinkle"][3:6] == ["0", "0", "0.0%"]
    assert table["TOTAL"][3:6] == ["1,000*", "2,000*", "40.0%*"]
    assert table["chat"][3:6] == table["TOTAL"][3:6]
    assert table["background"][3:6] == ["0", "0", "-"]  # no call: nothing unknown
    assert text.splitlines()[-1] == (
        "Cache figures of 1 call(s) are unknown: their model server reported none"
        " (*: of the other calls only)."
    )


# -- through the runtime ------------------------------------------------------

SPENT = "admins: {telegram: [1]}\nadapters: {telegram: {dm_policy: open}}\n"


async def test_the_runtime_charges_admins_and_background_apart(tmp_path: Path) -> None:
    """A soul whose chat budget is spent still answers its admin in a DM, and
    compiles its wikis; a group's turn is the group's, whoever speaks."""
    async with FakeAnthropic() as fake:
        limits = "budget: {daily_tokens_per_soul: 10}\n"
        config = make_config(tmp_path, fake.url, SPENT + limits)
        async with running(config, "telegram") as (runtime, platform):
            await platform.say("hello", user="5")
            await platform.say("hello", user="1")
            await platform.say("hello", user="1", chat="-100", dm=False, mention=True)
            replies = await platform.replies(3)
            await runtime.memory.drain(5)
            result = await runtime.memory.compile_one("lark", "user:telegram:1")
    by_chat = {r.chat_id: r.text for r in replies}
    assert by_chat["5"] == prompts.DAILY_LIMIT
    assert by_chat["1"].endswith("hello") and by_chat["1"] != prompts.DAILY_LIMIT
    assert by_chat["-100"] == prompts.DAILY_LIMIT
    assert result.traces > 0


# -- voice --------------------------------------------------------------------


async def test_record_voice_writes_a_row_and_logs_voice_usage(db: Database) -> None:
    ledger = Ledger(db, budget=NO_LIMITS, clock=Clock(NOON))
    with capture_logs() as logs:
        await ledger.record_voice(ctx(), "heard", "whisper-1", 12.5, 0.00125)
    [row] = await db.run(
        lambda conn: conn.execute(
            'SELECT ts, day, soul, scope, session, "user", source, kind, model, amount, cost_usd'
            " FROM voice_usage"
        ).fetchall()
    )
    expected = ("aria", "user:telegram:42", "telegram:42", "telegram:42", "turn", "heard")
    assert tuple(row) == (NOON, "2025-03-10", *expected, "whisper-1", 12.5, 0.00125)
    [line] = [e for e in logs if e["event"] == "voice.usage"]
    assert line["kind"] == "heard" and line["amount"] == 12.5 and line["cost_usd"] == 0.00125
    assert await rows(db) == []  # no model call, no token row


async def test_voice_counts_no_token_against_the_budgets(db: Database) -> None:
    ledger = Ledger(db, budget=budget(soul=100, user=100), clock=Clock(NOON))
    await ledger.check(ctx(), 100)
    await ledger.record_voice(ctx(), "heard", "whisper-1", 600.0, 0.06)
    await ledger.check(ctx(), 100)


async def fill_voice(db: Database) -> None:
    """Voice rows of two souls over two days, beside `fill`'s model calls."""
    clock = Clock()
    ledger = Ledger(db, budget=NO_LIMITS, clock=clock)
    await ledger.record_voice(ctx(soul="aria"), "heard", "whisper-1", 30.0, 0.003)
    await ledger.record_voice(ctx(soul="aria"), "heard", "whisper-1", 12.5, 0.00125)
    await ledger.record_voice(ctx(soul="aria"), "spoken", "tts-1", 1_200, 0.018)
    clock.now = NOON - DAY
    await ledger.record_voice(ctx(soul="twinkle"), "spoken", "eleven", 100, 0.018)


def voice_part(report: str) -> dict[str, list[str]]:
    """The voice table's rows of a report, by their first cell."""
    part = report.split("\nVoice\n", 1)[1]
    return parse("title\n" + part)


async def test_usage_table_shows_seconds_heard_and_characters_spoken(db: Database) -> None:
    await fill(db)
    await fill_voice(db)
    text = await report(db, days=2, by="soul")
    assert parse(text.split("\n\nVoice\n")[0])["TOTAL"][0] == "4"  # the token table as it was
    header = text.split("\nVoice\n", 1)[1].splitlines()[0]
    assert re.split(r"\s{2,}", header.strip()) == [
        "soul", "seconds heard", "heard USD", "characters spoken", "spoken USD"
    ]  # fmt: skip
    voice = voice_part(text)
    assert voice["aria"] == ["42.5", "0.0043", "1,200", "0.0180"]
    assert voice["twinkle"] == ["0.0", "0.0000", "100", "0.0180"]
    assert voice["TOTAL"] == ["42.5", "0.0043", "1,300", "0.0360"]
    assert list(voice_part(await report(db, days=1, by="model"))) == ["tts-1", "whisper-1", "TOTAL"]


async def test_a_report_of_voice_only_says_no_model_calls(db: Database) -> None:
    await fill_voice(db)
    text = await report(db, days=1, by="day")
    assert text.splitlines()[:3] == ["Usage by day, 2025-03-10 UTC", "No model calls.", ""]
    assert voice_part(text)["2025-03-10"] == ["42.5", "0.0043", "1,200", "0.0180"]
