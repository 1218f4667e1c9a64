"""Memory over months: one scope, 90 simulated days, a compile each night.

One real conversation (LoCoMo by default, or a LongMemEval history) is replayed
day by day: its turns, in order, cut into days of about the same length of text,
each stored as a trace of one private scope dated that day. Each night the wiki is compiled
against the tests' fake model with its librarian (tests/fakes/librarian.py),
which files every note on its speaker's page and merges by appending, never
condensing: the worst case for page growth, which the page cap
(`memory.page_max_tokens`) must hold.

Printed per night (in "nights"): the wiki's pages (daily logs apart), the
largest page in tokens, the catalog's tokens and the compile's input tokens
(every kind, summed over its model calls). Targets: the compile's input on
night 90 at most 1.5x night 10 (as medians of the ten nights around each: one
night's input depends on that day's talk), no page over its cap (daily logs are one day's
lines each and not capped), the catalog under 1,000 tokens.

    python bench/memory_months.py [--data ../shared/data/locomo/26.json] [--days 90]

Without the conversation file (the data sets are not shipped with soulbot) it
prints one line saying so on stderr and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from bench.common import Event, finish, make_config, tap, write_soul
from bot.app.logs import configure_logging
from bot.app.runtime import Runtime
from bot.memory.pagesize import tokens
from bot.memory.store import NewTrace
from bot.soul.registry import SoulRegistry
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.librarian import librarian

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "26.json"
SOUL, SCOPE = "marlow", "user:bench:1"
START = 1_735_689_600.0  # 2025-01-01 00:00 UTC
DAY = 86_400.0
Turn = tuple[str, str, str]  # speaker, name, text


def turns(path: Path) -> list[Turn]:
    """(speaker, name, text) of every turn of the conversation in `path`, in order:
    a LoCoMo conversation's sessions, or a LongMemEval item's haystack sessions."""
    data: Any = json.loads(path.read_text(encoding="utf-8"))
    if "conversation" in data or "speaker_a" in data:  # LoCoMo
        convo = data.get("conversation", data)
        first = convo["speaker_a"]
        numbers = sorted(int(k.split("_")[1]) for k in convo if k.count("_") == 1 and
                         k.startswith("session_") and isinstance(convo[k], list))  # fmt: skip
        return [
            ("user" if t["speaker"] == first else "assistant", t["speaker"], t["text"])
            for n in numbers
            for t in convo[f"session_{n}"]
        ]
    sessions = data["haystack_sessions"]
    return [
        (t["role"], "Sam" if t["role"] == "user" else "Marlow", t["content"])
        for session in sessions
        for t in session
    ]


def days_of(conversation: list[Turn], days: int) -> list[tuple[int, int]]:
    """The turns of each day, as (first, end) indexes: the conversation cut into
    `days` runs of about the same length of text (a day of long answers has
    fewer turns), so each night has about as much to compile as any other."""
    total = sum(len(text) for _, _, text in conversation)
    bounds, length, day = [0], 0, 1
    for n, (_, _, text) in enumerate(conversation):
        length += len(text)
        while day < days and length >= total * day / days:
            bounds.append(n + 1)
            day += 1
    bounds += [len(conversation)] * (days + 1 - len(bounds))
    return list(itertools.pairwise(bounds))


async def live(root: Path, conversation: list[Turn], days: int) -> list[dict[str, Any]]:
    usage: list[Event] = []
    tap(["llm.usage"], usage.append)
    async with FakeAnthropic() as fake:
        fake.responder = librarian
        config = make_config(root, fake.url)
        cap = config.memory.page_max_tokens
        registry = SoulRegistry(config.workspaces)
        registry.reload_all()
        runtime = await Runtime.open(config, registry, [])
        nights: list[dict[str, Any]] = []
        try:
            store, memory = runtime.memory.store, runtime.memory
            for day, (lo, hi) in enumerate(days_of(conversation, days)):
                today = [
                    NewTrace(
                        SOUL,
                        SCOPE,
                        "bench:1",
                        speaker,
                        name,
                        text,
                        START + day * DAY + 9 * 3600 + n * 60,
                    )
                    for n, (speaker, name, text) in enumerate(conversation[lo:hi])
                ]
                await store.add(today)
                usage.clear()
                result = await memory.compile_one(SOUL, SCOPE)
                wiki = memory.wiki(SOUL, SCOPE)
                assert wiki is not None
                pages = [p for p in wiki.list_pages() if p.type != "log"]
                nights.append({
                    "night": day + 1,
                    "traces": len(today),
                    "pages": len(pages),
                    "largest_page_tokens": max((tokens(p.body) for p in pages), default=0),
                    "catalog_tokens": tokens((wiki.root / "index.md").read_text()),
                    "compile_input_tokens": sum(
                        e["input_tokens"] + e["cache_creation_input_tokens"]
                        + e["cache_read_input_tokens"] for e in usage
                    ),
                    "conflicts": len(result.conflicts),
                    "waiting": result.waiting,
                    "over_cap": sum(tokens(p.body) > cap for p in pages),
                })  # fmt: skip
        finally:
            await runtime.close()
    return nights


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--days", type=int, default=90)
    args = parser.parse_args(argv)
    if not args.data.is_file():
        print(
            f"memory_months: skipped: no conversation at {args.data} "
            "(docs/performance.md says where to get the data sets; --data FILE for another)",
            file=sys.stderr,
        )
        return 0
    conversation = turns(args.data)
    configure_logging("json", "warning")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_soul(root / "workspaces")
        nights = asyncio.run(live(root, conversation, args.days))
    tenth, last = nights[min(9, len(nights) - 1)], nights[-1]
    # A night's input depends on that day's talk (one page touched or both), so
    # the growth compares the median of the ten nights around night 10 (6-15)
    # with that of the last ten; the single nights are printed too.
    early = median(n["compile_input_tokens"] for n in nights[5:15])
    late = median(n["compile_input_tokens"] for n in nights[-10:])
    growth = late / max(1.0, early)
    result = {
        "bench": "memory_months",
        "data": args.data.name,
        "days": args.days,
        "turns": len(conversation),
        "night_10": tenth,
        "night_last": last,
        "compile_input_growth": round(growth, 2),
        "compile_input_median_nights_6_15": early,
        "compile_input_median_last_10": late,
        "single_night_growth": round(
            last["compile_input_tokens"] / max(1, tenth["compile_input_tokens"]), 2
        ),
        "max_page_tokens": max(n["largest_page_tokens"] for n in nights),
        "max_catalog_tokens": max(n["catalog_tokens"] for n in nights),
        "pages_over_cap": sum(n["over_cap"] for n in nights),
        "conflicts": sum(n["conflicts"] for n in nights),
        "wall_s": round(time.perf_counter() - started, 1),
        "nights": nights,
    }
    target = {"compile_input_growth": 1.5, "pages_over_cap": 0, "max_catalog_tokens": 1000}
    ok = {
        "compile_input_growth": growth <= 1.5,
        "pages_over_cap": result["pages_over_cap"] == 0,
        "max_catalog_tokens": result["max_catalog_tokens"] < 1000,
    }
    return finish(result, target, ok)


if __name__ == "__main__":
    raise SystemExit(main())
