"""Ambient mode's gate on labelled group conversations: does the persona speak
when it should, and what does deciding cost?

The data set (bench/data/ambient/conversations.jsonl; its first line and
docs/groups.md say how it was made: it is synthetic) holds conversations of a
hobby server, a support channel and a friends' chat, each with a persona. Each
is replayed message by message through the same window and scorer the daemon
runs (bot/chat/ambient.py, bot/chat/ambient_score.py); the persona's own
messages are the ones the data set gives (the replay does not change the
conversation), and each other message is a moment: should the persona speak
right after it? The caps (`replies_per_hour`, `cooldown_s`) are the operator's
limits, not the gate's judgement, and are left out.

    precision, recall   of "speak", against the labels
    gate_calls_per_100  messages whose score reaches the threshold: the model
                        stage's calls, per 100 messages
    tokens_per_100      the model stage's tokens (input and output) per 100 messages

Two figures per split: the scorer alone, and with the model stage. The model
stage needs a model: `--base-url URL --model NAME` (the key from
$ANTHROPIC_API_KEY) asks a real one through the daemon's own gate call and
measures everything. Without them the stage is driven by the fake model
(tests/fakes/anthropic_fake.py), which answers "speak" every time: its calls and
tokens are counted (tokens by the fake's rule, characters / 4, an estimate),
and its precision and recall are NOT measured (`null`, with a note saying so).

One JSON line per split: `tune` (the scorer was tuned on it) and `held_out`
(never looked at while tuning: the figures that count). The exit status is 1
when a measured target is missed on the held-out split: at most 20 gate calls
per 100 messages; with the model stage measured, precision >= 0.80 at recall
>= 0.70; without it, the scorer's recall >= 0.70 (the model stage can only
lower recall).

    .venv/bin/python bench/ambient.py [--data FILE] [--threshold 0.5]
        [--base-url URL --model NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit
from bot.app.logs import configure_logging
from bot.chat.ambient import WINDOW, ask
from bot.chat.ambient_score import Line, persona, score
from bot.config.schema import AmbientConfig, BudgetConfig, ModelConfig
from bot.model.client import ModelClient
from bot.model.usage import CallContext, Ledger
from bot.storage.db import Database
from tests.fakes.anthropic_fake import FakeAnthropic, Reply

DATA = Path(__file__).resolve().parent / "data" / "ambient" / "conversations.jsonl"
SPLITS = ("tune", "held_out")
KINDS = ("hobby", "support", "friends")
TARGET = {"precision": 0.80, "recall": 0.70, "gate_calls_per_100": 20.0}
NOT_MEASURED = (
    "not measured: no model was given (--base-url, --model); the fake model answered every "
    "gate call with speak, so only its calls and tokens are counted"
)


@dataclass
class Tally:
    """Moments of one split: true/false positives and negatives, gate calls, tokens."""

    moments: int = 0
    speak: int = 0
    hits: dict[str, list[int]] = field(default_factory=lambda: {"scorer": [0, 0], "model": [0, 0]})
    calls: int = 0
    tokens: int = 0
    failures: int = 0

    def add(self, stage: str, said: bool, should: bool) -> None:
        """Count a decision of `stage`: [speak said rightly, speak said at all]."""
        if said:
            self.hits[stage][1] += 1
            self.hits[stage][0] += should

    def figures(self, stage: str) -> dict[str, float | None]:
        right, said = self.hits[stage]
        return {
            "precision": round(right / said, 3) if said else None,
            "recall": round(right / self.speak, 3) if self.speak else None,
        }


def load(path: Path) -> list[dict[str, Any]]:
    """The conversations of the data set (its first line, the header, left out).
    Raises ValueError naming the line of a conversation that is not one."""
    conversations = []
    with path.open(encoding="utf-8") as lines:
        for number, text in enumerate(lines, 1):
            row = json.loads(text)
            if "about" in row:
                continue
            if row.get("split") not in SPLITS or row.get("kind") not in KINDS:
                raise ValueError(f"{path}:{number}: expected a split {SPLITS} and a kind {KINDS}")
            conversations.append(row)
    return conversations


async def replay(
    conversation: dict[str, Any],
    tally: Tally,
    threshold: float,
    unanswered_after_s: float,
    model: ModelClient | None,
    gate_model: str,
) -> None:
    """Replay one conversation into `tally` (see the module docstring)."""
    soul = conversation["persona"]
    who = persona(soul["name"], soul["id"], soul["role"])
    window: deque[Line] = deque(maxlen=WINDOW)
    ctx = CallContext(soul["id"], "chat:bench", conversation["id"], "bench:chat", "ambient")
    for message in conversation["messages"]:
        own = bool(message.get("own"))
        name = soul["name"] if own else message["speaker"]
        window.append(Line(message["speaker"], name, message["text"], float(message["ts"]),
                           own=own, to_other=bool(message.get("to_other"))))  # fmt: skip
        if own:
            continue
        should = bool(message["speak"])
        tally.moments += 1
        tally.speak += should
        passed = score(who, list(window), unanswered_after_s).value >= threshold
        tally.add("scorer", passed, should)
        if not passed or model is None:
            continue
        tally.calls += 1
        verdict = await ask(model, gate_model, ctx, soul["name"], soul["role"], list(window))
        if isinstance(verdict, str):
            tally.failures += 1
        tally.add("model", verdict is True, should)


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    conversations = load(args.data)
    defaults = AmbientConfig()
    measured = args.base_url is not None
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(Path(tmp) / "bench.db")
        await db.open()
        fake = None
        try:
            if not measured:
                fake = FakeAnthropic()
                await fake.start()
                fake.responder = lambda body: Reply.of_tool_use(
                    "speak", {"speak": True, "reason": "counted only"}
                )
            config = ModelConfig(
                name=args.model or "claude-haiku-4-5",
                base_url=args.base_url or (fake.url if fake else None),
                api_key=os.environ.get("ANTHROPIC_API_KEY", "bench"),
                max_retries=2,
            )
            ledger = Ledger(db, budget=BudgetConfig(daily_tokens_per_soul=None,
                            daily_tokens_per_user=None, daily_tokens_background=None))  # fmt: skip
            model = ModelClient(config, ledger)
            tallies = {split: Tally() for split in SPLITS}
            try:
                for conversation in conversations:
                    tally = tallies[conversation["split"]]
                    await replay(conversation, tally, args.threshold,
                                 defaults.unanswered_after_s, model, config.name)  # fmt: skip
            finally:
                await model.close()
            tokens = await db.run(lambda conn: dict(conn.execute(
                "SELECT session, SUM(input_tokens + output_tokens + COALESCE("
                "cache_creation_input_tokens, 0) + COALESCE(cache_read_input_tokens, 0))"
                " FROM usage GROUP BY session").fetchall()))  # fmt: skip
        finally:
            if fake is not None:
                await fake.stop()
            await db.close()
    for conversation in conversations:
        tallies[conversation["split"]].tokens += int(tokens.get(conversation["id"], 0))
    return [result(split, tallies[split], args, measured) for split in SPLITS]


def result(split: str, tally: Tally, args: argparse.Namespace, measured: bool) -> dict[str, Any]:
    per_100 = 100 / tally.moments if tally.moments else 0.0
    model_stage: dict[str, Any] = {
        "measured": measured,
        "model": args.model if measured else "the fake model",
        **(tally.figures("model") if measured else {"precision": None, "recall": None}),
        "gate_calls_per_100": round(tally.calls * per_100, 1),
        "tokens_per_100": round(tally.tokens * per_100),
        "tokens_per_call": round(tally.tokens / tally.calls) if tally.calls else 0,
        "tokens": "as the server counted them" if measured else "estimated: characters / 4",
        "failed_calls": tally.failures,
    }
    if not measured:
        model_stage["note"] = NOT_MEASURED
    return {
        "bench": "ambient",
        "data": args.data.name,
        "split": split,
        "moments": tally.moments,
        "speak": tally.speak,
        "threshold": args.threshold,
        "scorer": {
            **tally.figures("scorer"),
            "gate_calls_per_100": model_stage["gate_calls_per_100"],
        },
        "model_stage": model_stage,
    }


def missed(held_out: dict[str, Any]) -> list[str]:
    """The measured targets the held-out split misses."""
    misses = []
    stage = held_out["model_stage"]
    if stage["gate_calls_per_100"] > TARGET["gate_calls_per_100"]:
        misses.append("gate_calls_per_100")
    figures = stage if stage["measured"] else held_out["scorer"]
    if (figures["recall"] or 0.0) < TARGET["recall"]:
        misses.append("recall")
    if stage["measured"] and (stage["precision"] or 0.0) < TARGET["precision"]:
        misses.append("precision")
    return misses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--threshold", type=float, default=AmbientConfig().threshold)
    parser.add_argument("--base-url", default=None, help="a real model server")
    parser.add_argument("--model", default=None, help="the gate model there")
    args = parser.parse_args()
    if (args.base_url is None) != (args.model is None):
        parser.error("--base-url and --model go together")
    configure_logging("json", "warning")
    results = asyncio.run(run(args))
    misses = missed(results[-1])
    for line in results:
        line["target"] = TARGET
        line["missed"] = misses if line["split"] == "held_out" else []
        emit(line)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
