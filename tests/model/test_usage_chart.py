"""The usage chart (bot/model/usage_chart.py): the ledger's figures per day, and
the figure drawn from them as SVG and PNG."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET

import pytest
from matplotlib.image import imread

from bot import prompts
from bot.model.usage import Ledger, Usage
from bot.model.usage_chart import (
    VOICE,
    ChartBy,
    DayPart,
    UsageDays,
    abbreviated,
    dollars,
    render,
    usage_days,
)
from bot.storage.db import Database
from tests.model.test_usage import DAY, NO_LIMITS, NOON, SONNET, Clock, ctx

SVG = "{http://www.w3.org/2000/svg}"


async def fill(db: Database) -> None:
    """Two souls over three of four days (today = 2025-03-10), voice on two."""
    clock = Clock()
    ledger = Ledger(db, budget=NO_LIMITS, clock=clock)
    clock.now = NOON
    await ledger.record(ctx(soul="aria"), SONNET, Usage(1_000, 500, 2_000, 1_000))  # 4,500
    await ledger.record(ctx(soul="aria"), SONNET, Usage(1_000, 500, 0, 2_000))  # 3,500
    await ledger.record(ctx(user="", soul="aria", source="compile"), SONNET, Usage(10_000, 2_000))
    await ledger.record_voice(ctx(soul="aria"), "spoken", "tts-1", 1_200, 0.018)
    clock.now = NOON - DAY
    await ledger.record(ctx(soul="twinkle", source="heartbeat"), SONNET, Usage(500, 100))
    await ledger.record_voice(ctx(soul="twinkle"), "heard", "whisper-1", 30.0, 0.003)
    clock.now = NOON - 3 * DAY
    await ledger.record(ctx(soul="twinkle"), SONNET, Usage(6_000, 1_000))


async def figures(db: Database, *, days: int, by: ChartBy = "source") -> UsageDays:
    return await db.run(lambda conn: usage_days(conn, days=days, now=NOON, by=by))


def parts(usage: UsageDays) -> dict[tuple[str, str], tuple[int, float]]:
    return {(p.day, p.key): (p.tokens, round(p.cost_usd, 6)) for p in usage.parts}


async def test_usage_days_by_source_from_the_ledger(db: Database) -> None:
    await fill(db)
    usage = await figures(db, days=4)
    assert usage.days == ("2025-03-07", "2025-03-08", "2025-03-09", "2025-03-10")
    got = parts(usage)
    assert {key: tokens for key, (tokens, _) in got.items()} == {
        ("2025-03-07", "turn"): 7_000,
        ("2025-03-09", "heartbeat"): 600,
        ("2025-03-09", VOICE): 0,
        ("2025-03-10", "compile"): 12_000,
        ("2025-03-10", "turn"): 8_000,
        ("2025-03-10", VOICE): 0,
    }
    assert got["2025-03-10", VOICE][1] == 0.018
    assert got["2025-03-09", VOICE][1] == 0.003
    assert got["2025-03-10", "compile"][1] == pytest.approx(10_000 * 3e-6 + 2_000 * 15e-6)
    # The most tokens first (the bottom of the stack), then the costliest.
    assert usage.keys == ("turn", "compile", "heartbeat", VOICE)


async def test_usage_days_by_soul_puts_voice_cost_on_its_soul(db: Database) -> None:
    await fill(db)
    got = parts(await figures(db, days=2, by="soul"))
    assert set(got) == {("2025-03-09", "twinkle"), ("2025-03-10", "aria")}
    assert got["2025-03-10", "aria"][0] == 20_000
    assert got["2025-03-09", "twinkle"] == (600, pytest.approx(500 * 3e-6 + 100 * 15e-6 + 0.003))


async def test_usage_days_refuses_what_it_cannot_chart(db: Database) -> None:
    with pytest.raises(ValueError, match="days"):
        await figures(db, days=0)
    with pytest.raises(ValueError, match="model"):
        await figures(db, days=1, by="model")  # type: ignore[arg-type]


def bars(svg: bytes) -> dict[str, float]:
    """Each named bar part of an SVG chart: its height in the SVG's units."""
    found = {}
    for group in ET.fromstring(svg).iter(f"{SVG}g"):
        name = group.get("id", "")
        if re.match(r"(tokens|cost)-\d{4}-\d\d-\d\d-", name):
            path = group.find(f"{SVG}path")
            assert path is not None
            ys = [float(y) for y in re.findall(r"[ML] [\d.]+ ([\d.]+)", path.get("d", ""))]
            found[name] = max(ys) - min(ys)
    return found


async def test_the_svg_has_a_bar_per_day_and_source_in_proportion(db: Database) -> None:
    await fill(db)
    usage = await figures(db, days=4)
    heights = bars(render(usage, "svg"))
    assert set(heights) == {
        *(f"tokens-{day}-{key}" for day, key in parts(usage) if key != VOICE),
        *(f"cost-{day}-{key}" for day, key in parts(usage)),
    }
    # Tokens: 12,000 compile to 8,000 turn today; 600 heartbeat the day before.
    assert heights["tokens-2025-03-10-compile"] / heights["tokens-2025-03-10-turn"] == (
        pytest.approx(12_000 / 8_000, rel=1e-3)
    )
    assert heights["tokens-2025-03-09-heartbeat"] / heights["tokens-2025-03-10-turn"] == (
        pytest.approx(600 / 8_000, rel=1e-2)
    )
    today = {key: cost for (day, key), (_, cost) in parts(usage).items() if day == "2025-03-10"}
    assert heights["cost-2025-03-10-voice"] / heights["cost-2025-03-10-turn"] == (
        pytest.approx(today[VOICE] / today["turn"], rel=1e-3)
    )


def test_the_svg_is_the_same_each_time_and_names_its_keys() -> None:
    usage = UsageDays(("2026-12-06", "2026-12-07"), "soul",
                      (DayPart("2026-12-07", "wren", 1_500, 0.01),))  # fmt: skip
    svg = render(usage, "svg")
    assert svg == render(usage, "svg")
    text = svg.decode()
    assert ">wren<" in text
    assert prompts.CHART_TITLE.format(by="soul", span="2026-12-06 to 2026-12-07 UTC") in text


async def test_the_png_decodes_at_its_size(db: Database) -> None:
    await fill(db)
    png = render(await figures(db, days=7), size=(640, 400))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert imread(io.BytesIO(png)).shape[:2] == (400, 640)


async def test_an_empty_ledger_draws_a_figure_that_says_so(db: Database) -> None:
    usage = await figures(db, days=3)
    assert usage.parts == () and len(usage.days) == 3
    svg = render(usage, "svg").decode()
    assert prompts.CHART_EMPTY.split("\n")[0] in svg
    assert not bars(svg.encode())
    assert imread(io.BytesIO(render(usage))).shape[:2] == (500, 800)


def test_render_refuses_another_format() -> None:
    with pytest.raises(ValueError, match="gif"):
        render(UsageDays(("2026-12-07",), "source", ()), "gif")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0, "0"), (950, "950"), (1_000, "1.0k"), (12_345, "12.3k"), (123_456, "123k"),
     (4_500_000, "4.5M"), (1.2e9, "1.2G"), (0.5, "0.5")],
)  # fmt: skip
def test_abbreviated(value: float, shown: str) -> None:
    assert abbreviated(value) == shown


@pytest.mark.parametrize(
    ("value", "ticks", "shown"),
    [(1.5, [0, 0.5, 1.0, 1.5], "$1.50"), (1234.5, [0, 500, 1000], "$1,234.50"),
     (0.004, [0, 0.002, 0.004], "$0.004"), (0.0025, [0, 0.0025, 0.005], "$0.0025"),
     (0.0, [], "$0.00")],
)  # fmt: skip
def test_dollars_tells_small_ticks_apart(value: float, ticks: list[float], shown: str) -> None:
    assert dollars(value, ticks) == shown


def test_a_cheap_days_cost_axis_has_distinct_ticks() -> None:
    usage = UsageDays(("2026-12-06", "2026-12-07"), "source",
                      (DayPart("2026-12-06", "turn", 900, 0.0031),
                       DayPart("2026-12-07", "turn", 400, 0.0012)))  # fmt: skip
    text = render(usage, "svg").decode()
    ticks = re.findall(r">(\$[0-9.,]+)<", text)
    assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks
