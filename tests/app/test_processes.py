"""Two `soulbot run` processes serve one Discord bot: shards 0-1 and 2-3 of 4,
one PostgreSQL store, one `data_dir` (each process an `instance` of it), one
fake gateway and one fake model. Every guild message and the DM is answered
once, by the process that holds its shard (DMs: shard 0's)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psycopg

from tests.daemons import RunningDaemon, daemon_env
from tests.engines import postgres_schema
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.discord_fake import FakeDiscord, guild_id_on_shard
from tests.kit import example_souls

COUNT = 4
ANN = 4242
GUILDS = {shard: guild_id_on_shard(shard, COUNT) for shard in range(COUNT)}
CHANNELS = {shard: 7000 + shard for shard in range(COUNT)}
HALVES = {"shards-0-1": [0, 1], "shards-2-3": [2, 3]}


def write_config(folder: Path, instance: str, store: str, fake: FakeDiscord) -> Path:
    """The config of one of the two processes."""
    path = folder / f"{instance}.yaml"
    discord = {
        "token": "${DISCORD_TOKEN}", "api_base_url": fake.api_base_url,
        "gateway_url": fake.gateway_url, "guilds": "always", "dm_policy": "open",
        "shard_count": COUNT, "shard_ids": HALVES[instance],
    }  # fmt: skip
    config = {
        "default_soul": "wren", "instance": instance, "store": {"url": store},
        "model": {"max_retries": 0}, "adapters": {"discord": discord},
    }  # fmt: skip
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


async def test_two_processes_share_the_shards_of_one_bot(tmp_path: Path) -> None:
    example_souls(tmp_path)
    with postgres_schema() as store:
        async with FakeDiscord() as fake, FakeAnthropic() as model:
            for shard, guild in GUILDS.items():
                fake.add_guild(guild, f"guild {shard}", channels=[CHANNELS[shard]],
                               members=[(ANN, "ann")])  # fmt: skip
            env = daemon_env(model.url, DISCORD_TOKEN="TEST.DISCORD.TOKEN")
            daemons = {
                name: RunningDaemon(tmp_path, write_config(tmp_path, name, store, fake), env)
                for name in HALVES
            }
            try:
                await asyncio.gather(*(d.start(timeout=90) for d in daemons.values()))
                for shard in range(COUNT):
                    fake.push_message(CHANNELS[shard], f"hello shard {shard}", author_id=ANN,
                                      guild_id=GUILDS[shard])  # fmt: skip
                fake.push_message(1, "hello in a dm", author_id=ANN)
                await fake.wait_sent(COUNT + 1, timeout=60)
            finally:
                codes = [await d.stop() for d in daemons.values()]
            sent = list(fake.sent)
        with psycopg.connect(store) as conn:  # each process adds to budget rows of its own
            counted = {name for (name,) in conn.execute("SELECT instance FROM budget_totals")}
    assert codes == [0, 0]
    assert counted == set(HALVES)
    # Both stopped: whatever they were going to send has been sent.
    assert sorted(s.content.splitlines()[-1].removeprefix("ann: ") for s in sent) == sorted(
        [f"hello shard {shard}" for shard in range(COUNT)] + ["hello in a dm"]
    )
    turns = {
        name: [e["session"] for e in d.named("llm.usage") if e["source"] == "turn"]
        for name, d in daemons.items()
    }
    assert sorted(turns["shards-0-1"]) == sorted(
        [f"discord:{CHANNELS[0]}", f"discord:{CHANNELS[1]}", f"discord:dm:{ANN}"]
    )
    assert sorted(turns["shards-2-3"]) == [f"discord:{CHANNELS[2]}", f"discord:{CHANNELS[3]}"]
    synced = {name: len(d.named("discord.commands_synced")) for name, d in daemons.items()}
    assert synced == {"shards-0-1": 1, "shards-2-3": 0}
    for name in HALVES:  # each instance had files of its own, gone at its stop
        assert not (tmp_path / "data" / f"soulbot-{name}.pid").exists()
    # The stop's compiles of the wikis both wrote to: each folded once, by one of them.
    compiled = [e["scope"] for d in daemons.values() for e in d.named("wiki.compiled")]
    assert sorted(compiled) == sorted(set(compiled)) and len(compiled) == COUNT + 1, compiled
