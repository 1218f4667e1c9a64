"""Rolling restarts of one of two `soulbot run` processes during a burst
(issue 27): the processes hold shards 0-1 and 2-3 of one Discord bot on one
PostgreSQL store; the one holding 2-3 is stopped three times while its turns
run and started again, while the other keeps answering. Every message is
answered exactly once: the stop's turns by the stop's wait for them
("drained"), or, cut short (`memory.compile.shutdown_wait_s: 0`, "cut") or
killed mid-turn (SIGKILL, "killed"), by the restart's recovery; none twice.

Discord delivers a shard's messages to no process between its process's stop
and the READY of its restart (a fresh IDENTIFY replays nothing, and the fake
does as Discord does): the burst goes on to the other process's shards then,
and to the restarted one's once it is back (docs/deploying.md says so)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.daemons import RunningDaemon, daemon_env
from tests.engines import postgres_schema
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.discord_fake import FakeDiscord, guild_id_on_shard
from tests.kit import example_souls

pytestmark = pytest.mark.timeout(240)

COUNT = 4
HALVES = {"low": [0, 1], "high": [2, 3]}
PER_SHARD = 2  # guilds on each shard
WAVES = 7  # before each restart, during it, and after the last: a channel of each guild each
LATENCY_S = 0.5  # the model's: the turns of the first wave run when the stop comes


def guild(shard: int, n: int) -> int:
    return guild_id_on_shard(shard, COUNT, n)


def channel(wave: int, shard: int, n: int) -> int:
    return 9000 + 100 * wave + 10 * shard + n


STOPS = {"drained": 5.0, "cut": 0.0, "killed": 5.0}  # each stop's shutdown_wait_s


def write_config(folder: Path, name: str, store: str, fake: FakeDiscord, how: str) -> Path:
    """The config of process `name` (`instance`), its stop as `how` needs."""
    path = folder / f"{name}-{how}.yaml"
    discord = {
        "token": "${DISCORD_TOKEN}", "api_base_url": fake.api_base_url,
        "gateway_url": fake.gateway_url, "guilds": "always", "streaming": False,
        "shard_count": COUNT, "shard_ids": HALVES[name],
    }  # fmt: skip
    config: dict[str, Any] = {
        "default_soul": "wren", "instance": name, "store": {"url": store},
        "model": {"max_retries": 0}, "limits": {"messages_per_minute": None},
        "adapters": {"discord": discord}, "shutdown": {"deadline_s": 60},
        "memory": {"compile": {"shutdown_wait_s": STOPS[how]}},
    }  # fmt: skip
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def push_wave(fake: FakeDiscord, wave: int, shards: list[int]) -> list[int]:
    """A message in the wave's channel of every guild on `shards`; their ids."""
    return [
        fake.push_message(
            channel(wave, shard, n),
            f"wave {wave} shard {shard} guild {n}",
            author_id=500 + 10 * shard + n,
            author_name=f"u{shard}{n}",
            guild_id=guild(shard, n),
        )
        for shard in shards
        for n in range(PER_SHARD)
    ]


async def test_rolling_restarts_answer_every_message_once(tmp_path: Path) -> None:
    example_souls(tmp_path)
    low_shards, high_shards = HALVES["low"], HALVES["high"]
    every = low_shards + high_shards
    high_turns = len(high_shards) * PER_SHARD  # a wave's turns in the restarted process
    with postgres_schema() as store:
        async with FakeDiscord() as fake, FakeAnthropic(latency_s=LATENCY_S) as model:
            for shard in range(COUNT):
                for n in range(PER_SHARD):
                    fake.add_guild(guild(shard, n), channels=[channel(w, shard, n)
                                                             for w in range(WAVES)])  # fmt: skip
            env = daemon_env(model.url, DISCORD_TOKEN="TEST.DISCORD.TOKEN")
            low = RunningDaemon(tmp_path, write_config(tmp_path, "low", store, fake, "drained"),
                                env)  # fmt: skip
            highs = [RunningDaemon(tmp_path, write_config(tmp_path, "high", store, fake, how),
                                   env) for how in STOPS]  # fmt: skip
            highs.append(RunningDaemon(tmp_path, write_config(tmp_path, "high", store, fake,
                                                              "drained"), env))  # fmt: skip
            pushed: list[int] = []
            wave = 0
            try:
                await asyncio.gather(low.start(timeout=90), highs[0].start(timeout=90))
                for how, high, after in zip(STOPS, highs, highs[1:], strict=False):
                    # Logged before daemon.started: the turns its start took up.
                    recovered = sum(e["sessions"] for e in high.named("sessions.recovered"))
                    await high.wait_for("turn.completed", count=recovered)
                    pushed += push_wave(fake, wave, every)
                    # The stopping process's turns are at the model when the stop comes.
                    await high.wait_for("turn.started", count=recovered + high_turns)
                    if how == "killed":
                        await high.kill()
                        pushed += push_wave(fake, wave + 1, low_shards)
                    else:
                        stopping = asyncio.create_task(high.stop(timeout=90))
                        await high.wait_for("daemon.stopping")
                        pushed += push_wave(fake, wave + 1, low_shards)
                        assert await stopping == 0
                    await after.start(timeout=90)
                    wave += 2
                pushed += push_wave(fake, wave, every)
                await fake.wait_for(lambda f: {s.reply_to for s in f.sent} >= set(pushed),
                                    timeout=60, what="a reply to every message")  # fmt: skip
            finally:
                codes = [await d.stop(timeout=90) for d in (low, highs[-1])]
            replies = Counter(s.reply_to for s in fake.sent)
    assert codes == [0, 0]
    assert {m: replies[m] for m in pushed} == dict.fromkeys(pushed, 1)
    assert set(replies) == set(pushed)  # nothing else was sent
    recovered = [sum(e["sessions"] for e in d.named("sessions.recovered")) for d in highs[1:]]
    assert recovered == [0, high_turns, high_turns]  # after drained, cut, killed
    started = [len(d.named("turn.started")) for d in highs[:-1]]
    assert started == [high_turns, high_turns, 2 * high_turns]  # its wave's; + those recovered
