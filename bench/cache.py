"""Prompt cache benchmark, two runs against the fake Anthropic server in another
process, with a soul whose system prompt is over 2,000 tokens. The token figures
are the fake's responses as the ledger recorded them (`usage` rows of source
"turn").

- one session, 40 turns (each message sent when the previous reply arrives);
- the heartbeat run: 50 sessions x 40 turns, all at once, of a soul with a
  heartbeat, and a SOUL.md write after every 20th turn of the run (counted over
  all sessions), made as the heartbeat makes it (`SoulFile.update` with
  `heartbeat.merge`, then the registry's reload, as `Reflector._write` does).

- the group run: one group chat, every 5th line addressed to the bot;
- the mood run: 10 conversations of 20 turns, one after another in turn, the
  soul with allowedMoods; the first moves its mood (`set_mood`, scripted) every
  5th of its turns. The others' share shows that its changes cost them nothing.

share = cache reads / (input + cache writes + cache reads), over every turn call.

    .venv/bin/python bench/cache.py [--turns 40] [--sessions 50] [--session-turns 40]
                                    [--write-every 20] [--group-messages 200]
                                    [--mood-sessions 10] [--mood-turns 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit, make_config, message, tap, write_soul
from bench.turns import TIMEOUT_S, BenchAdapter, drive
from bot.app.logs import configure_logging
from bot.app.runtime import Runtime
from bot.config.schema import Config
from bot.soul import heartbeat
from bot.soul.prompt import system_blocks
from bot.soul.registry import SoulRegistry
from bot.soul.soulfile import SoulFile
from bot.storage.db import DB_NAME
from bot.types import Inbound
from tests.fakes.anthropic_fake import canonical, tokens
from tests.fakes.process import FakeProcess

TARGET_SHARE = 0.80  # at least
TARGET_HEARTBEAT_SHARE = 0.90  # at least, in the heartbeat run
TARGET_GROUP_SHARE = 0.85  # at least, in the group-chat run
TARGET_MOOD_OTHERS_SHARE = 0.90  # at least, of the conversations that keep their mood
MOOD_EVERY = 5  # the moving conversation's set_mood: every this many of its turns
MOODS = ("wry", "stormy", "calm")  # the bench soul's allowedMoods, its default last
GROUP_SPEAKERS = 10
ADDRESSED_EVERY = 5
MIN_SYSTEM_TOKENS = 2000  # the soul's system prompt must be over this
# Each simulated person writes as soon as the reply comes: over the default rate limit.
UNLIMITED: dict[str, Any] = {"limits": {"messages_per_minute": None}}


def system_tokens(workspaces: Path) -> int:
    """The soul's system prompt in the fake's tokens (its text blocks, as sent)."""
    registry = SoulRegistry(workspaces)
    registry.reload_all()
    soul = registry.all()[0]
    return sum(tokens(canonical({"type": "text", "text": b.text})) for b in system_blocks(soul))


def ledger_sums(db: Path, leave_out: str = "") -> dict[str, int]:
    """The turn calls' token sums, the session `leave_out`'s left out."""
    conn = sqlite3.connect(db)
    try:
        calls, inp, out, write, read = conn.execute(
            "SELECT COUNT(*), SUM(input_tokens), SUM(output_tokens),"
            " SUM(cache_creation_input_tokens), SUM(cache_read_input_tokens)"
            " FROM usage WHERE source = 'turn' AND session != ?",
            (leave_out,),
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


def read_share(sums: dict[str, int]) -> tuple[int, float]:
    """Every input token of the turn calls, and the share read from the cache."""
    total = sums["input"] + sums["write"] + sums["read"]
    return total, sums["read"] / total if total else 0.0


async def write_soul_file(registry: SoulRegistry, soul_id: str, n: int) -> None:
    """The heartbeat's write of one reflection: SOUL.md edited under its lock,
    then the soul reloaded (as `Reflector._write` does, without the fold)."""
    soul = registry.get(soul_id)
    assert soul is not None
    reflection = heartbeat.Reflection(
        f"Visitor {n} asked about the storm of 1927 and the jetty it took.",
        (f"Visitor {n} is tracing a keeper called Thomas Hale.",),
        (),
    )

    def edit(text: str, at: datetime) -> str:
        return heartbeat.merge(text, reflection, at)[0]

    await asyncio.to_thread(SoulFile(soul.folder).update, edit)
    await asyncio.to_thread(registry.reload, soul_id, at_once=False)


async def heartbeat_run(
    config: Config, sessions: int, turns: int, every: int
) -> tuple[BenchAdapter, int]:
    """`sessions` conversations of `turns` each, all at once, with a SOUL.md
    write after every `every`-th turn of the run; returns the adapter and the
    number of writes."""
    registry = SoulRegistry(config.workspaces)
    registry.reload_all()
    [soul] = registry.all()
    adapter = BenchAdapter()
    tap(["turn.completed"], adapter.on_turn)
    runtime = await Runtime.open(config, registry, [adapter])
    writing = asyncio.Lock()
    writes = 0

    async def converse(user: int) -> None:
        nonlocal writes
        for turn in range(turns):
            await adapter.exchange(user, turn)
            if len(adapter.samples) % every == 0:
                async with writing:
                    writes += 1
                    await write_soul_file(registry, soul.id, writes)

    try:
        await runtime.start_adapters()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(TIMEOUT_S):
                await asyncio.gather(*(converse(i) for i in range(sessions)))
        await runtime.stop_adapters()
        await runtime.sessions.wait(10.0)
    finally:
        await runtime.close()
    return adapter, writes


async def group_run(config: Config, messages: int) -> tuple[BenchAdapter, int]:
    """One group chat: `messages` lines from GROUP_SPEAKERS people in turn,
    every ADDRESSED_EVERY-th a mention of the bot (sent when the previous
    answer came); returns the adapter and the number of turns answered."""
    registry = SoulRegistry(config.workspaces)
    registry.reload_all()
    adapter = BenchAdapter(name="telegram")  # Telegram's group rule: `mention`
    tap(["turn.completed"], adapter.on_turn)
    runtime = await Runtime.open(config, registry, [adapter])
    answered = 0
    try:
        await runtime.start_adapters()
        async with asyncio.timeout(TIMEOUT_S):
            for n in range(messages):
                speaker = n % GROUP_SPEAKERS
                addressed = n % ADDRESSED_EVERY == ADDRESSED_EVERY - 1
                inbound = Inbound("telegram", "group1", f"u{speaker}", f"Speaker {speaker}",
                                  message(n, speaker), is_dm=False, mentions_bot=addressed,
                                  message_id=f"g{n}")  # fmt: skip
                if addressed:
                    await adapter.answer(inbound)
                    answered += 1
                else:
                    await runtime.router.handle(inbound)
        await runtime.stop_adapters()
        await runtime.sessions.wait(10.0)
    finally:
        await runtime.close()
    return adapter, answered


async def mood_run(
    config: Config, fake: FakeProcess, sessions: int, turns: int
) -> tuple[BenchAdapter, list[dict[str, Any]]]:
    """`sessions` conversations of `turns` each, one turn at a time, round
    robin; conversation 0 calls set_mood every MOOD_EVERY-th of its turns
    (scripted, so the next request, its own, gets it). Returns the adapter and
    the `mood.changed` lines."""
    registry = SoulRegistry(config.workspaces)
    registry.reload_all()
    adapter = BenchAdapter()
    changes: list[dict[str, Any]] = []
    tap(["turn.completed"], adapter.on_turn)
    tap(["mood.changed"], lambda event: changes.append(dict(event)))
    runtime = await Runtime.open(config, registry, [adapter])
    try:
        await runtime.start_adapters()
        async with asyncio.timeout(TIMEOUT_S):
            for turn in range(turns):
                for user in range(sessions):
                    if user == 0 and turn % MOOD_EVERY == MOOD_EVERY - 1:
                        mood = MOODS[(turn // MOOD_EVERY) % len(MOODS)]
                        fake.script({"kind": "tool_use", "name": "set_mood",
                                     "input": {"mood": mood}})  # fmt: skip
                    await adapter.exchange(user, turn)
        await runtime.stop_adapters()
        await runtime.sessions.wait(10.0)
    finally:
        await runtime.close()
    return adapter, changes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--sessions", type=int, default=50, help="of the heartbeat run")
    parser.add_argument("--session-turns", type=int, default=40, help="of the heartbeat run")
    parser.add_argument("--write-every", type=int, default=20, help="turns, over the run")
    parser.add_argument("--group-messages", type=int, default=200, help="of the group-chat run")
    parser.add_argument("--mood-sessions", type=int, default=10, help="of the mood run")
    parser.add_argument("--mood-turns", type=int, default=20, help="per session, of the mood run")
    args = parser.parse_args()
    configure_logging("json", "warning")
    with FakeProcess() as fake:
        with tempfile.TemporaryDirectory(prefix="soulbot-bench-") as tmp:
            config = make_config(Path(tmp), fake.url, extra=UNLIMITED)
            write_soul(config.workspaces)
            prompt_tokens = system_tokens(config.workspaces)
            adapter = asyncio.run(drive(config, 1, args.turns, rate=1.0, paced=0))
            sums = ledger_sums(config.data_dir / DB_NAME)
        with tempfile.TemporaryDirectory(prefix="soulbot-bench-") as tmp:
            config = make_config(Path(tmp), fake.url, extra=UNLIMITED)
            write_soul(config.workspaces, heartbeat=True)
            beat, writes = asyncio.run(
                heartbeat_run(config, args.sessions, args.session_turns, args.write_every)
            )
            beat_sums = ledger_sums(config.data_dir / DB_NAME)
        with tempfile.TemporaryDirectory(prefix="soulbot-bench-") as tmp:
            config = make_config(Path(tmp), fake.url, extra=UNLIMITED)
            write_soul(config.workspaces)
            group, group_turns = asyncio.run(group_run(config, args.group_messages))
            group_sums = ledger_sums(config.data_dir / DB_NAME)
        with tempfile.TemporaryDirectory(prefix="soulbot-bench-") as tmp:
            config = make_config(Path(tmp), fake.url, extra=UNLIMITED)
            write_soul(config.workspaces)
            moody, changes = asyncio.run(
                mood_run(config, fake, args.mood_sessions, args.mood_turns)
            )
            mover = changes[0]["session"] if changes else ""
            mood_sums = ledger_sums(config.data_dir / DB_NAME)
            others_sums = ledger_sums(config.data_dir / DB_NAME, leave_out=mover)
    total, share = read_share(sums)
    beat_total, beat_share = read_share(beat_sums)
    group_total, group_share = read_share(group_sums)
    mood_total, mood_share = read_share(mood_sums)
    others_total, others_share = read_share(others_sums)
    beat_turns = args.sessions * args.session_turns
    mood_turns = args.mood_sessions * args.mood_turns
    ok = {
        "cache_read_share": share >= TARGET_SHARE,
        "system_prompt_tokens": prompt_tokens > MIN_SYSTEM_TOKENS,
        "heartbeat_cache_read_share": beat_share >= TARGET_HEARTBEAT_SHARE,
        "group_cache_read_share": group_share >= TARGET_GROUP_SHARE,
        "mood_others_cache_read_share": others_share >= TARGET_MOOD_OTHERS_SHARE,
        "mood_changes": len(changes) == args.mood_turns // MOOD_EVERY,
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
        "heartbeat": {
            "sessions": args.sessions,
            "turns_per_session": args.session_turns,
            "write_every_turns": args.write_every,
            "soul_writes": writes,
            "turns": len(beat.samples),
            "turn_calls": beat_sums["calls"],
            "failed_turns": beat.failed,
            "compactions": beat_sums["compactions"],
            "input_tokens_total": beat_total,
            "input_tokens_uncached": beat_sums["input"],
            "cache_read_tokens": beat_sums["read"],
            "cache_write_tokens": beat_sums["write"],
            "cache_read_share": round(beat_share, 4),
        },
        "group": {
            "speakers": GROUP_SPEAKERS,
            "messages": args.group_messages,
            "addressed_every": ADDRESSED_EVERY,
            "turns": len(group.samples),
            "turn_calls": group_sums["calls"],
            "failed_turns": group.failed,
            "compactions": group_sums["compactions"],
            "input_tokens_total": group_total,
            "input_tokens_uncached": group_sums["input"],
            "cache_read_tokens": group_sums["read"],
            "cache_write_tokens": group_sums["write"],
            "cache_read_share": round(group_share, 4),
        },
        "moods": {
            "sessions": args.mood_sessions,
            "turns_per_session": args.mood_turns,
            "mood_changes": len(changes),
            "turns": len(moody.samples),
            "turn_calls": mood_sums["calls"],
            "failed_turns": moody.failed,
            "input_tokens_total": mood_total,
            "cache_read_tokens": mood_sums["read"],
            "cache_write_tokens": mood_sums["write"],
            "cache_read_share": round(mood_share, 4),
            "others_input_tokens_total": others_total,
            "others_cache_read_tokens": others_sums["read"],
            "others_cache_write_tokens": others_sums["write"],
            "others_cache_read_share": round(others_share, 4),
        },
        "target": {
            "cache_read_share_min": TARGET_SHARE,
            "system_prompt_tokens_over": MIN_SYSTEM_TOKENS,
            "heartbeat_cache_read_share_min": TARGET_HEARTBEAT_SHARE,
            "group_cache_read_share_min": TARGET_GROUP_SHARE,
            "mood_others_cache_read_share_min": TARGET_MOOD_OTHERS_SHARE,
        },
        "pass": ok,
        "all_pass": all(ok.values())
        and len(adapter.samples) == args.turns
        and not adapter.failed
        and len(beat.samples) == beat_turns
        and not beat.failed
        and len(group.samples) == group_turns
        and not group.failed
        and len(moody.samples) == mood_turns
        and not moody.failed,
    }
    emit(result)
    return 0 if result["all_pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
