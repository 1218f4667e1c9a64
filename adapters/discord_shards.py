"""The gateway connections a Discord process holds, for adapters/discord_adapter.py:
its shards, which of them syncs the slash commands, and when each last heard
from Discord.

Shards (`shard_count`, Discord's rule of one per 2,500 servers): a process holds
`shard_ids` (all of them when None) through discord.py's `AutoShardedClient`
(`ShardedClient`), one gateway connection each, IDENTIFYing 5 s apart
(Discord's limit); without `shard_count` it is one unsharded `discord.Client`.
A guild's messages and slash commands come to the shard
`(guild_id >> 22) % shard_count` only, and DMs only to shard 0, so the process
holding shard 0 answers every DM; it, or an unsharded one, also syncs the slash
commands (they are global): the others only answer them (`syncs_commands`).

Liveness (`last_seen`): the time anything last came over the gateway, a
heartbeat answer (HEARTBEAT_ACK, every 41 s or so) included: discord.py's
keep-alive notes it (`client.ws._keep_alive._last_recv`, a private attribute
read defensively: it is what discord.py's own zombie check reads; the public
`client.latency` says how fast the last answer came, not when); before the
first keep-alive, and when it is gone (a reconnect), the time READY came.
With shards it is the oldest of their connections' (each shard's websocket, read
the same way through `client.shards[id]._parent.ws`): one deaf shard makes the
adapter deaf. discord.py closes a connection silent past its heartbeat timeout
and reconnects; `last_seen` staying old means the reconnects do not succeed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import discord

IDENTIFY_PAUSE_S = 5.0  # Discord takes one IDENTIFY per 5 s (a bot's max_concurrency of 1)


class ShardedClient(discord.AutoShardedClient):
    """discord.py's sharded client, its shards IDENTIFYing `identify_pause_s`
    apart (discord.py's own hook waits 5 s)."""

    def __init__(self, *, identify_pause_s: float, **options: Any) -> None:
        super().__init__(**options)
        self._identify_pause_s = identify_pause_s

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        if not initial:
            await asyncio.sleep(self._identify_pause_s)


def held_shards(count: int | None, ids: Sequence[int] | None) -> tuple[int, ...] | None:
    """The shards a process holds: `ids`, or all `count` of them; None unsharded.
    Raises ValueError for ids without a count, none, or one not below the count."""
    if count is None:
        if ids is not None:
            raise ValueError("discord: shard_ids needs shard_count (the shards of all processes)")
        return None
    held = tuple(range(count)) if ids is None else tuple(ids)
    if count < 1 or not held or not all(0 <= i < count for i in held):
        raise ValueError(f"discord: shard_count must be 1 or more, and each of shard_ids "
                         f"from 0 to {count - 1}")  # fmt: skip
    return held


def syncs_commands(shards: tuple[int, ...] | None) -> bool:
    """Whether the process holding `shards` (None: unsharded) syncs the slash
    commands: the one holding shard 0 does (app commands are global)."""
    return shards is None or 0 in shards


def last_seen(
    client: discord.Client | None, shards: tuple[int, ...] | None, ready_at: float | None
) -> float | None:
    """When the gateway last sent anything (a heartbeat answer, an event) on
    its quietest connection (of each shard held), else `ready_at`, when READY
    came (also while a connection is down); None before then."""
    heard = [_last_heard(ws) for ws in _gateways(client, shards)]
    known = [at for at in heard if at is not None]
    if not heard or len(known) < len(heard):
        return ready_at
    oldest = min(known)
    return max(oldest, ready_at or oldest)


def _gateways(client: discord.Client | None, shards: tuple[int, ...] | None) -> list[object]:
    """The websocket of each gateway connection held (None for one not made
    yet); none before start. A shard's is `ShardInfo._parent.ws`, private in
    discord.py, read defensively."""
    if client is None:
        return []
    if not isinstance(client, discord.AutoShardedClient) or shards is None:
        return [client.ws]
    held = client.shards
    return [getattr(getattr(held.get(i), "_parent", None), "ws", None) for i in shards]


def _last_heard(ws: object) -> float | None:
    """When a gateway websocket last received anything (a time.time()), from
    discord.py's keep-alive (`_keep_alive._last_recv`, a time.perf_counter());
    None without one (not connected yet, or reconnecting)."""
    keep_alive = getattr(ws, "_keep_alive", None)
    received = getattr(keep_alive, "_last_recv", None)
    if not isinstance(received, float):
        return None
    return time.time() - (time.perf_counter() - received)
