"""Recall at scale: 1,000,000 traces of one soul over 1,000 scopes, then recall
queries through `recall_block` against random scopes; the latency of each is
measured around the await, so it includes the hops to the database thread.

The traces arrive interleaved, as a busy daemon stores them: each goes to a
random scope, in batches of `TraceStore.add`. Their words come from a made-up
vocabulary with a Zipf-like spread (a few words in nearly every line, most words
rare), so the index has the long doclists of common words that a real one has.
Half of the queries are random messages in that vocabulary (one in five of
them 100 to 200 words long, as a pasted text would be); the other half are built
from a line of the scope itself, so that they find something.

    .venv/bin/python bench/recall_scale.py [--traces 1000000] [--scopes 1000] [--queries 2000]
        [--store postgresql://...]

The target: p99 under 20 ms on SQLite, under 30 ms on PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import finish, fresh_store
from bot.app.logs import configure_logging
from bot.memory.recall import recall_block
from bot.memory.store import NewTrace, TraceStore
from bot.storage.db import Database

TARGET_P99_MS = 20.0
TARGET_P99_MS_POSTGRES = 30.0  # a round trip to a server per query
SOUL = "marlow"
BATCH = 20_000
START = 1_700_000_000.0
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
FILLER = ("i", "you", "the", "a", "to", "and", "it", "is", "was", "that", "of", "in", "my", "we")


class Words:
    """A vocabulary of made-up words and a seeded Zipf-like draw from it."""

    def __init__(self, rng: random.Random, size: int = 30_000) -> None:
        made = {
            "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(size)
        }
        self.words = sorted(made)
        rng.shuffle(self.words)
        self.cumulative = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(made))))
        self.rng = rng

    def line(self, low: int, high: int) -> str:
        """A line of `low` to `high` words, a quarter of them filler words."""
        out = []
        for _ in range(self.rng.randint(low, high)):
            if self.rng.random() < 0.25:
                out.append(self.rng.choice(FILLER))
            else:
                at = self.rng.random() * self.cumulative[-1]
                out.append(self.words[bisect.bisect(self.cumulative, at)])
        return " ".join(out).capitalize()


def scope(n: int) -> str:
    return f"user:telegram:{100_000 + n}"


async def build(store: TraceStore, words: Words, traces: int, scopes: int) -> list[list[str]]:
    """Store `traces` traces in random scopes; returns a few lines of each scope."""
    rng = words.rng
    samples: list[list[str]] = [[] for _ in range(scopes)]
    for start in range(0, traces, BATCH):
        batch = []
        for i in range(start, min(traces, start + BATCH)):
            n = rng.randrange(scopes)
            text = words.line(4, 40)
            if len(samples[n]) < 8:
                samples[n].append(text)
            speaker = "user" if i % 2 else "assistant"
            name = f"user {n}" if speaker == "user" else "Marlow"
            batch.append(
                NewTrace(SOUL, scope(n), f"telegram:{n}", speaker, name, text, START + i * 30)
            )
        await store.add(batch)
    return samples


async def measure(args: argparse.Namespace, target: Path | str) -> dict[str, Any]:
    rng = random.Random(20261129)
    words = Words(rng)
    db = Database(target)
    await db.open()
    try:
        store = TraceStore(db)
        started = time.perf_counter()
        samples = await build(store, words, args.traces, args.scopes)
        build_s = time.perf_counter() - started
        if db.engine == "postgresql":  # what autovacuum does to a table that grew this much
            await db.run(lambda conn: conn.execute("VACUUM ANALYZE"))
        now = START + args.traces * 30 + 86_400
        latencies: list[float] = []
        nonempty = 0
        for q in range(args.queries):
            n = rng.randrange(args.scopes)
            if q % 2 and samples[n]:
                picked = rng.sample(rng.choice(samples[n]).split(), k=3)
                query = " ".join([*picked, words.line(2, 6)])
            else:  # one message in ten is a long one, pasted
                query = words.line(100, 200) if q % 10 == 0 else words.line(5, 25)
            t0 = time.perf_counter()
            block = await recall_block(
                store,
                soul=SOUL,
                scopes=[scope(n), "shared"],
                query=query,
                budget_tokens=600,
                now=now,
                group=False,
            )
            latencies.append((time.perf_counter() - t0) * 1000)
            nonempty += bool(block)
        stored = await store.count(SOUL)
    finally:
        await db.close()
    latencies.sort()

    def pct(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 3)

    return {
        "bench": "recall_scale",
        "store": db.engine,
        "traces": stored,
        "scopes": args.scopes,
        "queries": len(latencies),
        "queries_with_block": nonempty,
        "build_s": round(build_s, 1),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(latencies[-1], 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--scopes", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument(
        "--store", help="a PostgreSQL server (postgresql://...), a new schema; default: SQLite"
    )
    args = parser.parse_args()
    configure_logging("json", "warning")
    target_ms = TARGET_P99_MS if args.store is None else TARGET_P99_MS_POSTGRES
    with (
        tempfile.TemporaryDirectory(prefix="soulbot-recall-scale-") as tmp,
        fresh_store(args.store, Path(tmp), "soulbot") as target,
    ):
        result = asyncio.run(measure(args, target))
        if args.store is None:
            result["db_mb"] = round(sum(p.stat().st_size for p in Path(tmp).iterdir()) / 1e6, 1)
    ok = {"p99_ms": result["p99_ms"] < target_ms}
    return finish(result, {"p99_ms_under": target_ms}, ok)


if __name__ == "__main__":
    raise SystemExit(main())
