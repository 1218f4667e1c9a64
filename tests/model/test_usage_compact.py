"""The usage report in a phone's width (bot/model/usage_compact.py)."""

from __future__ import annotations

from bot import prompts
from bot.model.usage import Ledger, Usage
from bot.model.usage_compact import NAME_CHARS, WIDTH, usage_compact
from bot.storage.db import Database
from tests.model.test_usage import DAY, NO_LIMITS, NOON, SONNET, Clock, ctx
from tests.model.test_usage_chart import fill


async def compact(db: Database, days: int, now: float = NOON) -> str:
    return await db.run(lambda conn: usage_compact(conn, days=days, now=now))


def rows(text: str) -> dict[str, list[str]]:
    """Each line's cells by its first word."""
    return {line.split()[0]: line.split()[1:] for line in text.splitlines()[1:]}


async def test_a_line_per_soul_and_source_in_a_phones_width(db: Database) -> None:
    await fill(db)
    text = await compact(db, days=4)
    lines = text.splitlines()
    assert lines[0] == "Usage 2025-03-07 to 2025-03-10 UTC"
    assert max(len(line) for line in lines) <= WIDTH
    got = rows(text)
    # aria: 4,500 + 3,500 turn tokens and a 12,000-token compile today.
    assert got["aria"][0] == "20.0k" and got["twinkle"][0] == "7.6k"
    assert got["TOTAL"][0] == "27.6k"
    # The turns' 3,000 cache reads of 8,000 input + 2,000 writes + 3,000 reads: 23%.
    assert got["turn"] == ["15.0k", "$0.06", "23%"]
    assert got["compile"][0] == "12.0k" and got["heartbeat"] == ["600", "<$0.01", "0%"]
    assert [line.split()[0] for line in lines[1:]] == [
        "soul", "aria", "twinkle", "TOTAL", "source", "turn", "compile", "heartbeat",
        "voice", "heard", "spoken",
    ]  # fmt: skip
    assert got["heard"] == ["30s", "<$0.01"] and got["spoken"] == ["1.2k", "chr", "$0.02"]


async def test_a_long_soul_name_is_cut_to_keep_the_width(db: Database) -> None:
    ledger = Ledger(db, budget=NO_LIMITS, clock=Clock())
    name = "a-soul-with-a-very-long-name-indeed"
    await ledger.record(ctx(soul=name), SONNET, Usage(123_456_789, 987_654, 5, 5))
    text = await compact(db, days=1)
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert f"\n{name[: NAME_CHARS - 1]}… " in text
    assert rows(text)["TOTAL"][0] == "124M"


async def test_unknown_cache_figures_are_marked(db: Database) -> None:
    ledger = Ledger(db, budget=NO_LIMITS, clock=Clock())
    await ledger.record(ctx(soul="aria"), SONNET, Usage(300, 50, None, None))
    await ledger.record(ctx(soul="wren"), SONNET, Usage(300, 50, None, None))
    await ledger.record(ctx(soul="wren"), SONNET, Usage(100, 50, 0, 100))
    text = await compact(db, days=1)
    got = rows(text)
    # wren's one call with figures: 100 cache reads of 100 input + 100 reads.
    assert got["aria"][-1] == "?" and got["wren"][-1] == "50%*" and got["TOTAL"][-1] == "50%*"
    assert text.endswith("\n" + prompts.USAGE_COMPACT_UNKNOWN.format(unknown="?", mark="*"))


async def test_no_usage_says_so(db: Database) -> None:
    await fill(db)
    text = await compact(db, days=2, now=NOON + 30 * DAY)
    assert text == prompts.USAGE_NONE.format(days=2, span="2025-04-08 to 2025-04-09 UTC")
