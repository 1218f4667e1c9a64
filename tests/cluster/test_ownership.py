"""Which process owns a conversation (bot/cluster/ownership.py): a Discord
server's by its shard, a DM's shard 0's, Telegram's the one process running it,
the terminal's each process's own; and `Cluster.owner_of` reads the live rows
of `processes` (alone on SQLite: every conversation its own)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bot.cluster.cluster import Cluster
from bot.cluster.ownership import Owners, shard_of
from bot.cluster.topology import Process, Topology
from bot.storage.db import Database
from bot.types import Inbound
from tests.kit import make_config

ME = Process("a", "h", 1, "/srv", False, True, 4, (0, 1))
OTHER = replace(ME, instance="b", pid=2, telegram=True, shard_ids=(2, 3))
# Discord's rule: the shard is (server id >> 22) % shard_count.
GUILD_ON_3 = str((1_000 * 4 + 3) << 22)
GUILD_ON_1 = str(((1_000 * 4 + 1) << 22) + 12_345)  # the low 22 bits do not count


def inbound(platform: str, guild: str | None = None) -> Inbound:
    return Inbound(platform, "c1", "u1", "Ann", "", guild is None, guild_id=guild)


def test_a_servers_shard_is_discords_rule_and_a_dm_is_shard_0() -> None:
    assert shard_of(GUILD_ON_3, 4) == 3
    assert shard_of(GUILD_ON_1, 4) == 1
    assert shard_of(GUILD_ON_3, 2) == 1
    assert shard_of(None, 4) == 0  # a direct message
    assert shard_of(GUILD_ON_3, None) == 0  # unsharded: the one shard
    with pytest.raises(ValueError):
        shard_of("not a number", 4)


def test_a_discord_conversation_belongs_to_its_shards_process() -> None:
    owners = Owners(ME, (OTHER,))
    assert owners.of(inbound("discord", GUILD_ON_3)) is OTHER
    assert owners.of(inbound("discord", GUILD_ON_1)) is ME
    assert owners.of(inbound("discord")) is ME  # DMs come on shard 0
    assert not owners.mine(inbound("discord", GUILD_ON_3))
    assert owners.mine(inbound("discord", GUILD_ON_1))
    # Nobody holds shards 2 and 3 while b is down.
    assert Owners(ME).of(inbound("discord", GUILD_ON_3)) is None


def test_an_unsharded_process_owns_every_discord_conversation() -> None:
    alone = replace(ME, shard_count=None, shard_ids=None)
    owners = Owners(alone, (replace(OTHER, discord=False),))
    assert owners.of(inbound("discord", GUILD_ON_3)) is alone
    assert owners.of(inbound("discord")) is alone


def test_telegram_belongs_to_the_one_process_running_it() -> None:
    assert Owners(ME, (OTHER,)).of(inbound("telegram", None)) is OTHER
    assert Owners(OTHER, (ME,)).of(inbound("telegram", None)) is OTHER
    assert Owners(ME).of(inbound("telegram", None)) is None


def test_the_terminal_is_each_processs_own() -> None:
    assert Owners(ME, (OTHER,)).of(inbound("console")) is ME
    assert Owners(OTHER, (ME,)).of(inbound("console")) is OTHER


def test_alone_on_a_store_a_process_owns_everything() -> None:
    owners = Owners(replace(ME, discord=False), alone=True)
    for conversation in (inbound("discord", GUILD_ON_3), inbound("telegram"), inbound("x")):
        assert owners.mine(conversation)


async def test_owner_of_reads_the_live_processes(db: Database, tmp_path: Path) -> None:
    discord = "adapters: {discord: {token: d, shard_count: 4, shard_ids: [0, 1]}}\n"
    config = make_config(tmp_path, "http://127.0.0.1:9", discord)
    cluster = Cluster(db, config)
    assert await cluster.owner_of(inbound("discord", GUILD_ON_1)) is cluster.me
    if not db.shared:  # alone: no row, no lease, every conversation its own
        assert cluster.leases is None and cluster.topology is None
        assert await cluster.owner_of(inbound("discord", GUILD_ON_3)) is cluster.me
        return
    assert await cluster.owner_of(inbound("discord", GUILD_ON_3)) is None
    other = Topology(db, replace(OTHER, data_dir=cluster.me.data_dir))
    await other.join()
    try:
        owner = await cluster.owner_of(inbound("discord", GUILD_ON_3))
    finally:
        await other.leave()
    assert owner is not None and owner.instance == "b"
