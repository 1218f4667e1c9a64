"""Prompt cache benchmark: one session, 40 turns (each message sent when the
previous reply arrives) with a soul whose system prompt is over 2,000 tokens,
against the fake Anthropic server in another process. The token figures are the
fake's responses as the ledger recorded them (`usage` rows of source "turn").

share = cache reads / (input + cache writes + cache reads), over every turn call.

    .venv/bin/python bench/cache.py [--turns 40]
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit, make_config, write_soul
from bench.turns import drive
from bot.app.logs import configure_logging
from bot.soul.prompt import system_blocks
from bot.soul.registry import SoulRegistry
from bot.storage.db import DB_NAME
from tests.fakes.anthropic_fake import canonical, tokens
from tests.fakes.process import FakeProcess

TARGET_SHARE = 0.80  # at least
MIN_SYSTEM_TOKENS = 2000  # the soul's system prompt must be over this


def system_tokens(workspaces: Path) -> int:
    """The soul's system prompt in the fake's tokens (its text blocks, as sent)."""
    registry = SoulRegistry(workspaces)
    registry.reload_all()
    soul = registry.all()[0]
    return sum(tokens(canonical({"type": "text", "text": b.text})) for b in system_blocks(soul))


def ledger_sums(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        calls, inp, out, write, read = conn.execute(
            "SELECT COUNT(*), SUM(input_tokens), SUM(output_tokens),"
            " SUM(cache_creation_input_tokens), SUM(cache_read_input_tokens)"
            " FROM usage WHERE source = 'turn'"
        ).fetchone()
        (compactions,) = conn.execute(
            "SELECT COUNT(*) FROM usage WHERE source = 'compact'"
        ).fetchone()
    finally:
        conn.close()
    return {
        "calls": calls,
        "input": inp or 0,
        "output": out or 0,
        "write": write or 0,
        "read": read or 0,
        "compactions": compactions,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    args = parser.parse_args()
    configure_logging("json", "warning")
    with tempfile.TemporaryDirectory(prefix="soulbot-bench-") as tmp, FakeProcess() as fake:
        config = make_config(Path(tmp), fake.url)
        write_soul(config.workspaces)
        prompt_tokens = system_tokens(config.workspaces)
        adapter = asyncio.run(drive(config, 1, args.turns, rate=1.0, paced=0))
        sums = ledger_sums(config.data_dir / DB_NAME)
    total = sums["input"] + sums["write"] + sums["read"]
    share = sums["read"] / total if total else 0.0
    ok = {
        "cache_read_share": share >= TARGET_SHARE,
        "system_prompt_tokens": prompt_tokens > MIN_SYSTEM_TOKENS,
    }
    result: dict[str, Any] = {
        "bench": "cache",
        "turns": len(adapter.samples),
        "turn_calls": sums["calls"],
        "failed_turns": adapter.failed,
        "compactions": sums["compactions"],
        "system_prompt_tokens": prompt_tokens,
        "input_tokens_total": total,
        "input_tokens_uncached": sums["input"],
        "cache_read_tokens": sums["read"],
        "cache_write_tokens": sums["write"],
        "output_tokens": sums["output"],
        "cache_read_share": round(share, 4),
        "target": {
            "cache_read_share_min": TARGET_SHARE,
            "system_prompt_tokens_over": MIN_SYSTEM_TOKENS,
        },
        "pass": ok,
        "all_pass": all(ok.values()) and len(adapter.samples) == args.turns and not adapter.failed,
    }
    emit(result)
    return 0 if result["all_pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
