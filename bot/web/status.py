"""The Usage and Health pages.

Usage: the figures of `/soul usage` and `soulbot usage`, from bot/model/usage.py's
own grouped sums and `usage_table`: tokens and cost a day (bot/model/usage_chart.py's
chart, inline SVG, stacked by source or by soul), per day, soul and source with the
cache-read share, and today's budget headroom (`day_charges`, as the ledger's check
counts it). Health: the adapters (connected, last event), the store (a round trip
now, the oldest queued call), the model's fallback use (the ledger's calls under
`model.fallback`'s name), the nightly run's next time."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from markupsafe import Markup

from bot.app.health import adapter_state
from bot.config.schema import BudgetConfig
from bot.model.usage import (
    SUMS,
    Sums,
    admin_users,
    day_charges,
    grouped,
    report_days,
    usage_table,
    utc_day,
)
from bot.model.usage_chart import ChartBy, render, usage_days
from bot.storage.sql import Conn
from bot.web.server import console_of

MAX_DAYS = 90
CHART_SIZE_PX = (880, 460)


@dataclass(frozen=True)
class UsageRow:
    """One group's figures of the report, as numbers: every kind of token in
    `tokens`; `cache_share` as the report's cache hit column (None: unknown)."""

    key: str
    calls: int
    tokens: int
    cost: float
    cache_share: float | None


def usage_rows(conn: Conn, *, days: int, by: str, now: float) -> list[UsageRow]:
    """The model calls' figures of `usage_table`, per `by`, from its own grouped sums."""
    first, last = report_days(days, now)
    rows = []
    for key, *ns in grouped(conn, by, SUMS, "usage", first, last):
        sums = Sums.of(ns)
        share = sums.hit_share() if sums.known else None
        rows.append(UsageRow(str(key), sums.calls, sums.tokens, sums.cost, share))
    return rows


def inline_svg(svg: bytes) -> Markup:
    """The chart's SVG to put in a page: from its `<svg` element on (no XML
    declaration or doctype). matplotlib wrote it: no text of a person's is in it
    but soul and source names, which it escapes."""
    text = svg.decode("utf-8")
    return Markup(text[text.index("<svg") :])


@dataclass(frozen=True)
class Headroom:
    budget: str
    used: int
    limit: int | None


def _headroom(conn: Conn, now: float, budget: BudgetConfig, admins: frozenset[str],
              souls: list[str]) -> list[Headroom]:  # fmt: skip
    """Today's tokens against each soul's chat budget, each admin's who spent any, and
    the background budget."""
    charges = day_charges(conn, utc_day(now), admins)
    rows = [Headroom(f"soul {soul}", charges.get(("soul", soul), 0), budget.daily_tokens_per_soul)
            for soul in souls]  # fmt: skip
    rows += [Headroom(f"admin {who}", used, budget.daily_tokens_per_admin)
             for (kind, who), used in sorted(charges.items()) if kind == "admin"]  # fmt: skip
    background = sum(used for (kind, _), used in charges.items() if kind == "background")
    rows.append(Headroom("background (every soul)", background, budget.daily_tokens_background))
    return rows


def _days(text: str) -> int:
    """The days a `days=` query asks for: ASCII digits from 1 to MAX_DAYS, else 14."""
    if text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_DAYS:
        return int(text)
    return 14


async def usage_page(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    days = _days(request.query.get("days", ""))
    by: ChartBy = "soul" if request.query.get("by") == "soul" else "source"
    config, now = console.runtime.config, time.time()
    souls = [soul.id for soul in console.runtime.registry.all()]
    admins = admin_users(config.admins)

    def figures(conn: Conn) -> dict[str, Any]:
        return {
            "chart": usage_days(conn, days=days, now=now, by=by),
            "by_day": usage_rows(conn, days=days, by="day", now=now),
            "by_soul": usage_rows(conn, days=days, by="soul", now=now),
            "by_source": usage_rows(conn, days=days, by="source", now=now),
            "table": usage_table(conn, days=days, by="soul", now=now),
            "headroom": _headroom(conn, now, config.budget, admins, souls),
        }

    values = await console.runtime.db.run(figures)
    svg = await asyncio.to_thread(render, values.pop("chart"), "svg", size=CHART_SIZE_PX)
    return console.render(request, "usage.html", days=days, by=by, chart=inline_svg(svg),
                          **values)  # fmt: skip


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
        model_events=list(console.model_events.last), fallbacks=console.model_events.fallbacks,
        next_nightly=console.daemon.next_nightly(), daemon_status=console.daemon.status(),
    )  # fmt: skip
