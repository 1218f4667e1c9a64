"""Recall benchmark on LoCoMo conversations: does the evidence reach the block?

Every turn of a conversation is stored as a trace of one group scope through the
real `TraceStore` (name = the person who spoke, time = the session's date), and
every answerable question (categories 1-4) is a query through `recall_block`,
the function that builds a turn's recall block. A question's evidence turn
counts as present only when a line of the block carries its whole text.

    evidence_recall  mean share of a question's evidence turns in the block
    all_evidence     share of questions with every evidence turn in the block
    bm25             the same figures for plain BM25 (lower-cased words, no
                     stemming, no stop words) ranking the same turns, packed
                     into the same budget with the same lines

A turn's trace is its text alone: the caption the data set gives a shared
photo (`blip_caption`) is left out, as in the reference figures.

    .venv/bin/python bench/recall.py [--data DIR] [--budget 600]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import finish
from bot.app.logs import configure_logging
from bot.memory.recall import one_line, recall_block, render
from bot.memory.store import NewTrace, Row, TraceStore
from bot.storage.db import Database

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.70  # evidence recall, at least
SOUL = "locomo"
DAY = 86_400.0


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    ts: float


@dataclass(frozen=True)
class Conversation:
    name: str
    turns: list[Turn]
    questions: list[tuple[str, list[str]]]  # (question, evidence dia_ids)
    unscored: int  # answerable questions that name no turn of the conversation

    @property
    def scope(self) -> str:
        return f"chat:locomo:{self.name}"


def load(path: Path) -> Conversation:
    """One LoCoMo file: its turns in order and its answerable questions; one
    whose evidence names no turn of the conversation is counted, not scored."""
    data = json.loads(path.read_text(encoding="utf-8"))
    body = data.get("conversation", data)
    numbers = sorted(
        int(m.group(1))
        for key, value in body.items()
        if (m := re.fullmatch(r"session_(\d+)", key)) and isinstance(value, list)
    )
    turns: list[Turn] = []
    for n in numbers:
        when = datetime.strptime(body[f"session_{n}_date_time"], "%I:%M %p on %d %B, %Y")
        ts = when.replace(tzinfo=UTC).timestamp()
        for turn in body[f"session_{n}"]:
            turns.append(Turn(turn["dia_id"], turn["speaker"], turn["text"], ts))
    known = {t.dia_id for t in turns}
    questions = []
    unscored = 0
    for qa in data["qa"]:
        if qa.get("category") not in (1, 2, 3, 4):
            continue
        evidence = [e for item in qa.get("evidence", []) for e in re.split(r"[;,\s]+", item)]
        evidence = list(dict.fromkeys(e for e in evidence if e in known))
        if evidence:
            questions.append((str(qa["question"]), evidence))
        else:
            unscored += 1
    return Conversation(path.stem, turns, questions, unscored)


def present(block: str, text: str) -> bool:
    """Whether a line of `block` carries the whole of `text` (after its label)."""
    whole = one_line(text)
    return any(line == whole or line.endswith("] " + whole) for line in block.splitlines())


class PlainBM25:
    """BM25 (k1 1.2, b 0.75) over lower-cased words: the reference ranking."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = list(rows)
        self.docs = [Counter(w.lower() for w in re.findall(r"\w+", r.text)) for r in rows]
        self.avg = sum(sum(d.values()) for d in self.docs) / max(1, len(self.docs))
        self.df: Counter[str] = Counter(w for d in self.docs for w in d)

    def rank(self, query: str) -> list[Row]:
        terms = set(re.findall(r"\w+", query.lower()))
        n = len(self.docs)
        scored = []
        for row, doc in zip(self.rows, self.docs, strict=True):
            length = sum(doc.values())
            score = 0.0
            for t in terms & doc.keys():
                idf = math.log(1 + (n - self.df[t] + 0.5) / (self.df[t] + 0.5))
                tf = doc[t]
                score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / self.avg))
            if score > 0:
                scored.append((score, row))
        scored.sort(key=lambda pair: (-pair[0], -pair[1].id))
        return [row for _, row in scored]


Blocks = Callable[[str], Awaitable[str]]


async def score(conv: Conversation, block_for: Blocks) -> list[tuple[float, bool]]:
    """(share of evidence present, all present) for each question."""
    texts = {t.dia_id: t.text for t in conv.turns}
    out = []
    for question, evidence in conv.questions:
        block = await block_for(question)
        hits = sum(present(block, texts[e]) for e in evidence)
        out.append((hits / len(evidence), hits == len(evidence)))
    return out


async def run_conversation(
    conv: Conversation, budget: int, folder: Path
) -> tuple[list[tuple[float, bool]], list[tuple[float, bool]]]:
    """Import `conv` into a fresh database in `folder`; (recall, bm25) figures."""
    db = Database(folder / f"{conv.name}.db")
    await db.open()
    try:
        store = TraceStore(db)
        await store.add(
            [
                NewTrace(SOUL, conv.scope, f"locomo:{conv.name}", "user", t.speaker, t.text, t.ts)
                for t in conv.turns
            ]
        )
        now = conv.turns[-1].ts + DAY
        scopes = [conv.scope, "shared"]

        async def ours(query: str) -> str:
            return await recall_block(
                store,
                soul=SOUL,
                scopes=scopes,
                query=query,
                budget_tokens=budget,
                now=now,
                group=True,
            )

        reference = PlainBM25(
            await store.rows(t.id for t in await store.after(SOUL, conv.scope, 0))
        )

        async def plain(query: str) -> str:
            return render(reference.rank(query), budget, now, True)

        return await score(conv, ours), await score(conv, plain)
    finally:
        await db.close()


def figures(results: Sequence[tuple[float, bool]]) -> dict[str, float]:
    n = max(1, len(results))
    return {
        "evidence_recall": round(sum(r for r, _ in results) / n, 4),
        "all_evidence": round(sum(a for _, a in results) / n, 4),
    }


async def bench(files: Sequence[Path], budget: int) -> dict[str, Any]:
    """The figures over the conversations in `files`."""
    ours: list[tuple[float, bool]] = []
    plain: list[tuple[float, bool]] = []
    per: dict[str, float] = {}
    unscored = 0
    with tempfile.TemporaryDirectory(prefix="soulbot-recall-") as tmp:
        for path in files:
            conv = load(path)
            unscored += conv.unscored
            mine, ref = await run_conversation(conv, budget, Path(tmp))
            ours += mine
            plain += ref
            per[conv.name] = figures(mine)["evidence_recall"]
    result: dict[str, Any] = {
        "bench": "recall",
        "conversations": len(files),
        "questions": len(ours),
        "questions_without_evidence": unscored,
        "budget": budget,
        **figures(ours),
        "bm25": figures(plain),
        "per_conversation": per,
    }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "locomo")
    parser.add_argument("--budget", type=int, default=600)
    args = parser.parse_args()
    configure_logging("json", "warning")
    started = time.perf_counter()
    files = sorted(args.data.glob("*.json"))
    if not files:
        parser.error(f"no LoCoMo conversation (*.json) in {args.data}")
    result = asyncio.run(bench(files, args.budget))
    result["seconds"] = round(time.perf_counter() - started, 2)
    ok = {"evidence_recall": result["evidence_recall"] >= TARGET}
    return finish(result, {"evidence_recall_min": TARGET}, ok)


if __name__ == "__main__":
    raise SystemExit(main())
