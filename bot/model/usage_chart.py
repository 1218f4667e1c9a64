"""The usage chart: tokens and cost per UTC day, stacked by source or by soul, as
`/soul usage` sends it (docs/commands.md, "`/soul usage` on a phone") and the web
console shows it.

`usage_days` reads the ledger with the report's own grouped sums
(`bot.model.usage.grouped`): the model calls' tokens and cost per day and per
source (`turn`, `ambient`, `compile`, ...) or soul, and the voice rows' cost
(`voice_usage`: notes heard and replies spoken), which have no tokens: a
`voice` part of the cost bars by source, their soul's by soul. `render` draws
one matplotlib figure of it, two panels on one row of days (tokens above, cost
in US dollars below), and writes it as PNG or SVG from the same code. It uses
matplotlib's object API on the Agg canvas (no pyplot, no display, no global
backend), imported at the first drawing, one drawing at a time (matplotlib's
state is not thread-safe). A week takes a tenth of a second or so, a year of
sources a second or two: run it off the event loop (`asyncio.to_thread`). A
span with no usage draws a figure that says so.

The SVG is deterministic (no date, a fixed hash salt, text kept as text) and
names each bar part: the `<g>` of the part of `key` on `day` in the tokens
panel has the id `tokens-<day>-<key>`, in the cost panel `cost-<day>-<key>`.
"""

from __future__ import annotations

import io
import itertools
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING, Literal

from bot import prompts
from bot.model.usage import SUMS, VOICE_SUMS, Sums, grouped, report_days, span_text
from bot.storage.sql import Conn

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ChartBy = Literal["source", "soul"]
ChartFormat = Literal["png", "svg"]
VOICE = "voice"
"""The key of the voice rows' cost in a chart by source."""
SIZE_PX = (800, 500)
_DPI = 100
_MOST_TICKS = 10
_GAPPED_DAYS = 62
# Tableau's ten colours, then grey for every key past them (the smallest).
_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
            "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")  # fmt: skip
_OTHER_COLOUR = "#d3d3d3"
_DRAWING = threading.Lock()


@dataclass(frozen=True)
class DayPart:
    """One part of a day's bars: what `key` (a source or a soul) used on UTC
    `day`: its model calls' tokens (every kind) and its cost in US dollars,
    voice included."""

    day: str
    key: str
    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class UsageDays:
    """The ledger's figures for a chart: every UTC day of the span in order
    (those without usage too), how the parts are keyed, and the parts (a key
    that used nothing on a day has no part there)."""

    days: tuple[str, ...]
    by: ChartBy
    parts: tuple[DayPart, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key, the most tokens first (then the costliest, then by name):
        the order of the stack from the bottom, and of the legend."""
        tokens: dict[str, int] = {}
        cost: dict[str, float] = {}
        for part in self.parts:
            tokens[part.key] = tokens.get(part.key, 0) + part.tokens
            cost[part.key] = cost.get(part.key, 0.0) + part.cost_usd
        return tuple(sorted(tokens, key=lambda k: (-tokens[k], -cost[k], k)))

    def span(self) -> str:
        """`2026-12-01 to 2026-12-07 UTC`, or the one day."""
        return span_text(self.days[0], self.days[-1])


def usage_days(conn: Conn, *, days: int, now: float, by: ChartBy = "source") -> UsageDays:
    """The figures of the last `days` UTC days of `now`, today included, per
    `by`; on the database thread. Raises ValueError for a `days` below 1 or an
    unknown `by`."""
    if by not in ("source", "soul"):
        raise ValueError(f"cannot chart usage by {by!r}: expected source or soul")
    first, last = report_days(days, now)
    parts: dict[tuple[str, str], DayPart] = {}
    for day, key, *sums in grouped(conn, ("day", by), SUMS, "usage", first, last):
        row = Sums.of(sums)
        parts[day, str(key)] = DayPart(day, str(key), row.tokens, row.cost)
    voice_by = "day" if by == "source" else ("day", by)
    for day, *rest in grouped(conn, voice_by, VOICE_SUMS, "voice_usage", first, last):
        key = VOICE if by == "source" else str(rest.pop(0))
        _, heard_usd, _, spoken_usd = (float(n or 0) for n in rest)
        had = parts.get((day, key), DayPart(day, key, 0, 0.0))
        parts[day, key] = DayPart(day, key, had.tokens, had.cost_usd + heard_usd + spoken_usd)
    start = date.fromisoformat(first)
    span = tuple((start + timedelta(days=i)).isoformat() for i in range(days))
    return UsageDays(span, by, tuple(sorted(parts.values(), key=lambda p: (p.day, p.key))))


def abbreviated(value: float) -> str:
    """A count in at most 5 characters or so: 950, 12.3k, 4.5M, 1.2G (to one
    decimal under 100 of the unit, none from 100)."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            scaled = value / size
            return f"{scaled:.1f}{unit}" if abs(scaled) < 100 else f"{scaled:.0f}{unit}"
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def dollars(value: float, ticks: Iterable[float]) -> str:
    """A cost axis's tick: cents, or as many more decimals as the ticks' step
    needs to tell them apart ($0.002 beside $0.004, not $0.00 twice)."""
    step = min((b - a for a, b in itertools.pairwise(ticks) if b > a), default=0.01)
    decimals = next((d for d in range(2, 6) if math.isclose(round(step, d), step)), 6)
    return f"${value:,.{decimals}f}"


def render(usage: UsageDays, fmt: ChartFormat = "png", *, size: tuple[int, int] = SIZE_PX) -> bytes:
    """The chart of `usage` as PNG bytes or SVG text (UTF-8), `size` pixels
    (width, height). Raises ValueError for another `fmt`."""
    if fmt not in ("png", "svg"):
        raise ValueError(f"cannot write a chart as {fmt!r}: expected png or svg")
    # matplotlib takes half a second to import and makes its font cache then: only a
    # chart needs it, so neither the daemon's start nor the CLI waits for it.
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    # SVG: no random ids, text kept as text (smaller, searchable, deterministic); no
    # text read as mathtext (a "$" is a dollar, in a label too).
    with _DRAWING, rc_context({"svg.hashsalt": "soulbot", "svg.fonttype": "none",
                               "text.parse_math": False}):  # fmt: skip
        figure = Figure(figsize=(size[0] / _DPI, size[1] / _DPI), dpi=_DPI, layout="constrained")
        if usage.parts:
            _draw(figure, usage)
        else:
            figure.text(0.5, 0.5, prompts.CHART_EMPTY.format(span=usage.span()),
                        ha="center", va="center", fontsize=14)  # fmt: skip
        out = io.BytesIO()
        figure.savefig(out, format=fmt, dpi=_DPI, metadata=_METADATA[fmt])
    return out.getvalue()


_METADATA: dict[str, dict[str, str | None]] = {"png": {"Software": None}, "svg": {"Date": None}}


def _draw(figure: Figure, usage: UsageDays) -> None:
    """The two panels, the legend (a colour a key) and the title on `figure`."""
    from matplotlib.patches import Patch

    tokens_axes, cost_axes = figure.subplots(2, 1, sharex=True)
    keys = usage.keys
    colours = {key: _COLOURS[i] if i < len(_COLOURS) else _OTHER_COLOUR
               for i, key in enumerate(keys)}  # fmt: skip
    where = {day: i for i, day in enumerate(usage.days)}
    # Past two months a bar is a pixel or two: bars that touch, not a moiré of gaps.
    width = 0.8 if len(usage.days) <= _GAPPED_DAYS else 1.0
    for axes, panel in ((tokens_axes, "tokens"), (cost_axes, "cost")):
        bottoms = [0.0] * len(usage.days)
        for key in keys:  # one call a key, its bars named one by one
            mine = [(where[p.day], p.day, float(p.tokens if panel == "tokens" else p.cost_usd))
                    for p in usage.parts if p.key == key]  # fmt: skip
            mine = [(x, day, value) for x, day, value in mine if value > 0]
            if not mine:
                continue
            xs, values = [x for x, _, _ in mine], [value for _, _, value in mine]
            bars = axes.bar(xs, values, bottom=[bottoms[x] for x in xs], width=width,
                            color=colours[key], linewidth=0)  # fmt: skip
            for bar, (x, day, value) in zip(bars.patches, mine, strict=True):
                bar.set_gid(f"{panel}-{day}-{key}")
                bottoms[x] += value
        _style(axes, panel)
    step = math.ceil(len(usage.days) / _MOST_TICKS)
    ticks = list(range(0, len(usage.days), step))
    cost_axes.set_xticks(ticks, [usage.days[i][5:] for i in ticks])
    cost_axes.set_xlim(-0.6, len(usage.days) - 0.4)
    # The legend reads as the stack does: its top entry is the top of the bars.
    figure.legend(handles=[Patch(color=colours[key], label=key) for key in reversed(keys)],
                  loc="outside right upper", title=usage.by)  # fmt: skip
    figure.suptitle(prompts.CHART_TITLE.format(by=usage.by, span=usage.span()))


def _style(axes: Axes, panel: str) -> None:
    """A panel's label, its axis's abbreviated numbers, its grid."""
    from matplotlib.ticker import FuncFormatter

    if panel == "tokens":
        axes.set_ylabel(prompts.CHART_TOKENS)
        axes.yaxis.set_major_formatter(FuncFormatter(lambda v, _: abbreviated(v)))
    else:
        axes.set_ylabel(prompts.CHART_COST)
        ticks = axes.yaxis.get_majorticklocs  # read when drawn, after the limits are set
        axes.yaxis.set_major_formatter(FuncFormatter(lambda v, _: dollars(v, ticks())))
    axes.grid(axis="y", alpha=0.3)
    axes.set_axisbelow(True)
    axes.margins(y=0.05)
