"""Discord shards: the real discord.py (`AutoShardedClient`) against the fake,
two adapters splitting four shards as two processes would."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import discord
import pytest

from adapters.discord_adapter import HTTP_CONNECTIONS, DiscordAdapter
from adapters.retry import Backoff
from bot.chat.commands import MENU
from bot.types import Inbound, Outbound
from tests.fakes.discord_fake import FakeDiscord, guild_id_on_shard
from tests.kit import Inbox, capture_logs, delivering, wait_until

TOKEN = "TEST.DISCORD.TOKEN"
ANN, DM = 11, 900
COUNT = 4
GUILDS = {shard: guild_id_on_shard(shard, COUNT) for shard in range(COUNT)}
CHANNELS = {shard: 600 + shard for shard in range(COUNT)}
FAST = Backoff(first_s=0.01, max_s=0.02)

pytestmark = pytest.mark.timeout(30)


def sharded(
    fake: FakeDiscord,
    shard_ids: Sequence[int] | None,
    count: int = COUNT,
    identify_pause_s: float = 0.0,
) -> DiscordAdapter:
    return DiscordAdapter(TOKEN, commands=MENU, api_base_url=fake.api_base_url,
                          gateway_url=fake.gateway_url, guild_ready_timeout=0.05, backoff=FAST,
                          shard_count=count, shard_ids=shard_ids,
                          identify_pause_s=identify_pause_s)  # fmt: skip


def with_guilds(fake: FakeDiscord) -> None:
    """Give `fake` one guild (with one channel) on each of the four shards."""
    for shard, guild in GUILDS.items():
        fake.add_guild(guild, f"on shard {shard}", channels=[CHANNELS[shard]],
                       members=[(ANN, "ann")])  # fmt: skip


def texts(inbox: Inbox) -> list[str]:
    return sorted(inbound.text for inbound in inbox.got)


def reply_to(inbound: Inbound, text: str) -> Outbound:
    return Outbound(platform=inbound.platform, chat_id=inbound.chat_id, text=text,
                    reply_to=inbound.message_id)  # fmt: skip


async def markers(fake: FakeDiscord, low: Inbox, high: Inbox) -> None:
    """A last message on every shard, awaited where it belongs (shards 0 and 1 in
    `low`, 2 and 3 in `high`): each shard's connection delivers in order, so
    whatever was pushed before has arrived by then, or never will."""
    for shard in range(COUNT):
        fake.push_message(CHANNELS[shard], f"marker {shard}", author_id=ANN,
                          guild_id=GUILDS[shard])  # fmt: skip
    await wait_until(lambda: {"marker 0", "marker 1"} <= set(texts(low)))
    await wait_until(lambda: {"marker 2", "marker 3"} <= set(texts(high)))


async def test_two_processes_split_the_shards_and_only_shard_0_syncs() -> None:
    async with FakeDiscord() as fake:
        with_guilds(fake)
        with capture_logs() as logs:
            async with (
                delivering(sharded(fake, [0, 1])) as low,
                delivering(sharded(fake, [2, 3])) as high,
            ):
                assert fake.shards == [(0, 4), (1, 4), (2, 4), (3, 4)]
                for shard in range(COUNT):
                    fake.push_message(CHANNELS[shard], f"on shard {shard}", author_id=ANN,
                                      guild_id=GUILDS[shard])  # fmt: skip
                fake.push_message(DM, "a dm", author_id=ANN)
                await markers(fake, low, high)
    assert texts(low) == ["a dm", "marker 0", "marker 1", "on shard 0", "on shard 1"]
    assert texts(high) == ["marker 2", "marker 3", "on shard 2", "on shard 3"]
    assert {i.guild_id for i in high.got} == {str(GUILDS[2]), str(GUILDS[3])}
    [dm] = [i for i in low.got if i.is_dm]
    assert dm.text == "a dm"
    puts = [r for r in fake.requests if r.method == "PUT" and r.path.endswith("/commands")]
    assert len(puts) == 1 and {c["name"] for c in fake.commands[None]} >= {"soul", "help"}
    held = [(e["held"], e["syncs_commands"]) for e in logs if e["event"] == "discord.shards"]
    assert sorted(held) == [([0, 1], True), ([2, 3], False)]
    assert [e["event"] for e in logs].count("discord.commands_synced") == 1


async def test_a_slash_command_is_answered_by_the_process_that_did_not_sync_it() -> None:
    async with FakeDiscord() as fake:
        with_guilds(fake)
        answering = sharded(fake, [2, 3])
        async with delivering(sharded(fake, [0, 1])) as low, delivering(answering) as high:
            token = fake.push_interaction("help", [], user_id=ANN, channel_id=CHANNELS[3],
                                          guild_id=GUILDS[3])  # fmt: skip
            asked = await high.one()
            await answering.send(reply_to(asked, "the help"))
            await fake.wait_for(lambda f: any(r.kind == "followup" for r in f.interaction_replies),
                                what="the follow-up")  # fmt: skip
            await markers(fake, low, high)
    assert asked.text == "/help" and asked.guild_id == str(GUILDS[3])
    [followup] = [r for r in fake.interaction_replies if r.kind == "followup"]
    assert (followup.token, followup.content) == (token, "the help")
    assert not any(i.text == "/help" for i in low.got)


async def test_start_holds_all_shards_and_what_came_before_them() -> None:
    on1 = guild_id_on_shard(1, 2)
    async with FakeDiscord() as fake:
        fake.add_guild(on1, channels=[601], members=[(ANN, "ann")])
        # Sent right after each shard's READY; shard 1 IDENTIFYs 0.3 s after shard 0,
        # so the DM (shard 0's) comes while start() still waits for shard 1.
        fake.push_message(DM, "early dm", author_id=ANN)
        fake.push_message(601, "early in the guild", author_id=ANN, guild_id=on1)
        adapter = sharded(fake, None, count=2, identify_pause_s=0.3)  # all shards: 0 and 1
        with capture_logs() as logs:
            async with delivering(adapter) as inbox:
                assert fake.shards == [(0, 2), (1, 2)] and adapter.connected()
                got = await inbox.wait(2)
                fake.push_message(DM, "later", author_id=ANN)
                await inbox.wait(3)
    assert [i.text for i in got] == ["early dm", "early in the guild"]
    assert [i.text for i in inbox.got] == ["early dm", "early in the guild", "later"]
    [held] = [e for e in logs if e["event"] == "discord.held_delivered"]
    assert held["events"] >= 1
    assert fake.identified == [(0, 2), (1, 2)]


async def test_one_deaf_shard_makes_the_adapter_deaf() -> None:
    async with FakeDiscord(heartbeat_interval_ms=50) as fake:  # a heartbeat every 50 ms
        adapter = sharded(fake, [0, 1], count=2)
        async with delivering(adapter):
            client = adapter._client
            assert isinstance(client, discord.AutoShardedClient)
            # A canary for the private attributes `last_seen` reads: each shard's keep-alive.
            keep_alives = {i: s._parent.ws._keep_alive for i, s in client.shards.items()}
            assert all(k is not None and isinstance(k._last_recv, float)
                       for k in keep_alives.values())  # fmt: skip
            fake.answer_heartbeats(False, shard=1)
            unanswered = fake.heartbeats[1] + 1
            await fake.wait_for(lambda f: f.heartbeats[1] >= unanswered, what="a deaf heartbeat")
            deaf_since = time.time()  # shard 1 has heard nothing since before this
            answered = fake.heartbeats[0] + 3
            await fake.wait_for(lambda f: f.heartbeats[0] >= answered, what="shard 0's beats")
            seen, zero = adapter.last_seen(), keep_alives[0]
            assert zero is not None and seen is not None
            zero_heard = time.time() - (time.perf_counter() - zero._last_recv)
            assert zero_heard > deaf_since > seen  # shard 0 hears; the adapter is as deaf as 1
            assert adapter.connected()
            fake.answer_heartbeats(True, shard=1)
            answered = fake.heartbeats[1] + 2
            await fake.wait_for(lambda f: f.heartbeats[1] >= answered, what="shard 1's beats")
            seen = adapter.last_seen()
            assert seen is not None and seen > deaf_since
        assert not adapter.connected()


def test_shard_ids_need_a_count_they_are_below() -> None:
    with pytest.raises(ValueError, match="needs shard_count"):
        DiscordAdapter(TOKEN, shard_ids=[0])
    for ids in ([2, 4], [-1], []):
        with pytest.raises(ValueError, match="from 0 to 3"):
            DiscordAdapter(TOKEN, shard_count=4, shard_ids=ids)
    with pytest.raises(ValueError, match="1 or more"):
        DiscordAdapter(TOKEN, shard_count=0)


@pytest.mark.parametrize("shard_ids", [None, [0, 1, 2, 3]], ids=["unsharded", "sharded"])
async def test_a_burst_of_replies_shares_a_few_connections(shard_ids: list[int] | None) -> None:
    channels = [700 + n for n in range(2 * HTTP_CONNECTIONS)]
    async with FakeDiscord() as fake:
        fake.add_guild(GUILDS[0], "busy", channels=channels, members=[(ANN, "ann")])
        adapter = sharded(fake, shard_ids, count=COUNT if shard_ids else None)
        async with delivering(adapter):
            fake.slow_answers(0.3)  # every reply in flight at once
            burst = [adapter.send(Outbound(platform="discord", chat_id=str(c), text=f"to {c}"))
                     for c in channels]  # fmt: skip
            await asyncio.gather(*burst)
    sends = [r for r in fake.requests if r.method == "POST" and r.path.endswith("/messages")]
    assert len(sends) == len(channels)
    assert len({r.port for r in sends}) <= HTTP_CONNECTIONS
