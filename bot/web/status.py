"""The Usage and Health pages.

Usage: the figures of `/soul usage` and `soulbot usage` (bot/model/usage.py's
`usage_rows`, `usage_table`): tokens and cost per day (drawn as bars), per soul
and per source, the cache-read share, and today's budget headroom (`day_charges`,
as the ledger's check counts it). Health: the adapters (connected, last event),
the store (a round trip now, the oldest queued call), the model's fallback use
(the ledger's calls under `model.fallback`'s name), the nightly run's next time."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from bot.app.health import adapter_state
from bot.config.schema import BudgetConfig
from bot.model.usage import UsageRow, admin_users, day_charges, usage_rows, usage_table, utc_day
from bot.storage.sql import Conn
from bot.web.server import console_of

MAX_DAYS = 90
CHART_W, CHART_H = 640, 200  # the daily chart's drawing, in SVG units


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    row: UsageRow


def day_bars(rows: list[UsageRow], days: int, now: float) -> list[Bar]:
    """A bar for each of the last `days` UTC days, as tall as its tokens against
    the largest day's (a day without calls: an empty bar)."""
    by_day = {row.key: row for row in rows}
    today = datetime.fromtimestamp(now, UTC).date()
    span = [(today - timedelta(days=back)).isoformat() for back in range(days - 1, -1, -1)]
    top = max((row.tokens for row in rows), default=0) or 1
    step = CHART_W / len(span)
    bars = []
    for i, day in enumerate(span):
        row = by_day.get(day) or UsageRow(day, 0, 0, 0.0, None)
        height = (CHART_H - 20) * row.tokens / top
        bars.append(Bar(i * step + 1, CHART_H - 20 - height, max(step - 2, 1), height, row))
    return bars


@dataclass(frozen=True)
class Headroom:
    budget: str
    used: int
    limit: int | None


def _headroom(conn: Conn, now: float, budget: BudgetConfig, admins: frozenset[str],
              souls: list[str]) -> list[Headroom]:  # fmt: skip
    """Today's tokens against each soul's chat budget and the background budget."""
    charges = day_charges(conn, utc_day(now), admins)
    rows = [Headroom(f"soul {soul}", charges.get(("soul", soul), 0), budget.daily_tokens_per_soul)
            for soul in souls]  # fmt: skip
    background = sum(used for (kind, _), used in charges.items() if kind == "background")
    rows.append(Headroom("background (every soul)", background, budget.daily_tokens_background))
    return rows


async def usage_page(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    text = request.query.get("days", "14")
    days = int(text) if text.isdigit() and 1 <= int(text) <= MAX_DAYS else 14
    config, now = console.runtime.config, time.time()
    souls = [soul.id for soul in console.runtime.registry.all()]
    admins = admin_users(config.admins)

    def figures(conn: Conn) -> dict[str, Any]:
        return {
            "by_day": usage_rows(conn, days=days, by="day", now=now),
            "by_soul": usage_rows(conn, days=days, by="soul", now=now),
            "by_source": usage_rows(conn, days=days, by="source", now=now),
            "table": usage_table(conn, days=days, by="soul", now=now),
            "headroom": _headroom(conn, now, config.budget, admins, souls),
        }

    values = await console.runtime.db.run(figures)
    bars = day_bars(values["by_day"], days, now)
    return console.render(request, "usage.html", days=days, bars=bars, chart_w=CHART_W,
                          chart_h=CHART_H, **values)  # fmt: skip


async def health_page(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    runtime, now = console.runtime, time.time()
    started = time.monotonic()
    await runtime.db.run(lambda conn: conn.execute("SELECT 1").fetchone())
    latency_ms = (time.monotonic() - started) * 1000
    fallback = runtime.config.model.fallback
    calls = []
    if fallback is not None:
        rows = await runtime.db.run(lambda conn: usage_rows(conn, days=1, by="model", now=now))
        calls = [row for row in rows if row.key == fallback]
    adapters = sorted(adapter_state(runtime.adapters).items())
    return console.render(
        request, "health.html", adapters=adapters, now=now, latency_ms=latency_ms,
        waiting_s=runtime.db.waiting_s(), fallback=fallback, fallback_calls=calls,
        next_nightly=console.daemon.next_nightly(), daemon_status=console.daemon.status(),
    )  # fmt: skip
