"""The usage report in a phone's width: `/soul usage` on Telegram and Discord
(docs/commands.md). The same figures as `usage_table` (its grouped sums,
`bot.model.usage.grouped`), every line at most `WIDTH` characters:

```
Usage 2026-12-01 to 2026-12-07 UTC
soul          tokens    cost  hit
wren           12.3k   $0.42  61%
twinkle         3.1k   $0.05  12%
TOTAL          15.4k   $0.47  55%
source
turn           10.0k   $0.30  62%
compile         5.4k   $0.17    -
voice         amount    cost
heard            34s   $0.01
spoken      1.2k chr   $0.02
```

A line per soul, the costliest first, then the TOTAL; a line per source
(`turn`, `ambient`, `compile`, ...); then the voice rows' seconds heard and
characters spoken, when there are any. Numbers are abbreviated (12.3k, 4.5M),
names cut to `NAME_CHARS` with "…". The cache hit share is as the table's: of
the calls whose server reported cache figures, marked `*` when some did not, `?`
when none did (and a line under it says so), `-` without input tokens.
"""

from __future__ import annotations

from bot import prompts
from bot.model.usage import (
    PARTIAL,
    SUMS,
    VOICE_SUMS,
    Sums,
    grouped,
    report_days,
    span_text,
)
from bot.model.usage_chart import abbreviated
from bot.storage.sql import Conn

WIDTH = 34
NAME_CHARS = 11
_UNKNOWN_HIT = "?"


def usage_compact(conn: Conn, *, days: int, now: float) -> str:
    """The report of the last `days` UTC days of `now`, today included (see the
    module docstring). Raises ValueError for a `days` below 1."""
    first, last = report_days(days, now)
    span = span_text(first, last)
    souls = [
        (str(key), Sums.of(ns)) for key, *ns in grouped(conn, "soul", SUMS, "usage", first, last)
    ]
    voiced = grouped(conn, "soul", VOICE_SUMS, "voice_usage", first, last)
    voice = [tuple(float(n or 0) for n in ns) for _, *ns in voiced]
    if not souls and not voice:
        return prompts.USAGE_NONE.format(days=days, span=span)
    lines = [prompts.USAGE_COMPACT_HEAD.format(span=span)]
    if souls:
        sources = grouped(conn, "source", SUMS, "usage", first, last)
        whole = sum((row for _, row in souls), Sums())
        lines.append(_line("soul", "tokens", "cost", "hit"))
        lines += [_sums_line(key, row) for key, row in souls]
        lines.append(_sums_line("TOTAL", whole))
        lines.append("source")
        lines += [_sums_line(str(key), Sums.of(ns)) for key, *ns in sources]
        if whole.known < whole.calls:
            lines.append(prompts.USAGE_COMPACT_UNKNOWN.format(unknown=_UNKNOWN_HIT, mark=PARTIAL))
    if voice:
        heard, heard_usd, spoken, spoken_usd = (sum(column) for column in zip(*voice, strict=True))
        lines.append(_line("voice", "amount", "cost", ""))
        if heard or heard_usd:
            lines.append(_line("heard", f"{abbreviated(round(heard))}s", _usd(heard_usd), ""))
        if spoken or spoken_usd:
            lines.append(_line("spoken", f"{abbreviated(spoken)} chr", _usd(spoken_usd), ""))
    return "\n".join(lines)


def _sums_line(key: str, row: Sums) -> str:
    share = row.hit_share()
    if row.calls and not row.known:
        hit = _UNKNOWN_HIT
    elif share is None:
        hit = "-"
    else:
        hit = f"{100 * share:.0f}%" + (PARTIAL if row.known < row.calls else "")
    return _line(key, abbreviated(row.tokens), _usd(row.cost), hit)


def _line(name: str, amount: str, cost: str, hit: str) -> str:
    """Four columns: the name left-aligned (cut to `NAME_CHARS`), the others right."""
    if len(name) > NAME_CHARS:
        name = name[: NAME_CHARS - 1] + "…"
    return f"{name:<{NAME_CHARS}} {amount:>8} {cost:>7} {hit:>4}".rstrip()


def _usd(cost: float) -> str:
    """A cost in at most 7 characters: $0, <$0.01, $0.42, $12.3, $123, $1.2k."""
    if cost <= 0:
        return "$0"
    if cost < 0.01:
        return "<$0.01"
    if cost < 10:
        return f"${cost:.2f}"
    if cost < 100:
        return f"${cost:.1f}"
    return f"${abbreviated(cost)}" if cost >= 1000 else f"${cost:.0f}"
