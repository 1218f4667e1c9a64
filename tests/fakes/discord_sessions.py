"""The gateway side of the Discord fake's state (tests/fakes/discord_gateway.py
uses them): a websocket connection (`Conn`), a session (`Session`, one per shard
id), and Discord's rule of which shard gets a guild's events (`shard_of`;
`guild_id_on_shard` makes a guild id that lands on a given shard, a snowflake
counted from `DISCORD_EPOCH_MS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field

from aiohttp import web

from tests.fakes.discord_records import JSON

DISCORD_EPOCH_MS = 1_420_070_400_000
SNOWFLAKE_2024_MS = 1_704_067_200_000 - DISCORD_EPOCH_MS  # 2024-01-01, in a snowflake's clock


class Conn:
    """One gateway websocket; frames go out in order through one writer task."""

    def __init__(self, ws: web.WebSocketResponse, transport: asyncio.Transport | None) -> None:
        self.ws = ws
        self.transport = transport
        self.queue: asyncio.Queue[str | int] = asyncio.Queue()  # a frame, or a close code
        self.writer: asyncio.Task[None] | None = None
        self.shard: int | None = None  # the shard id of its session (None: unsharded, or none yet)

    def send(self, frame: JSON | str) -> None:
        self.queue.put_nowait(frame if isinstance(frame, str) else json.dumps(frame))

    def close(self, code: int) -> None:
        self.queue.put_nowait(code)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        if self.writer is not None:
            self.writer.cancel()

    async def write(self) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            while True:
                item = await self.queue.get()
                if isinstance(item, int):
                    await self.ws.close(code=item)
                    return
                await self.ws.send_str(item)


@dataclass
class Session:
    """A gateway session: its intents, its shard, the events sent in it (kept for a
    RESUME) and its connection while one is up."""

    id: str
    intents: int
    shard: tuple[int, int] | None = None  # (shard id, count); None: unsharded
    seq: int = 0
    log: list[tuple[int, str]] = field(default_factory=list)  # (seq, frame) for RESUME
    conn: Conn | None = None

    def holds(self, guild_id: int | None) -> bool:
        """Whether the events of this guild (None: of no guild, a DM's) come to this
        session: all of them to an unsharded one, else only its shard's."""
        return self.shard is None or shard_of(guild_id, self.shard[1]) == self.shard[0]


def shard_of(guild_id: int | None, count: int) -> int:
    """The shard (of ``count``) that gets a guild's events, Discord's rule:
    ``(guild_id >> 22) % count``; events of no guild (DMs) go to shard 0."""
    return 0 if guild_id is None else (guild_id >> 22) % count


def guild_id_on_shard(shard: int, count: int, n: int = 0) -> int:
    """A guild id (a snowflake of 2024) whose events go to ``shard`` of ``count``;
    ``n`` gives another one on the same shard. Raises ValueError for a shard not
    below ``count``."""
    if not 0 <= shard < count:
        raise ValueError(f"shard {shard} is not one of 0..{count - 1}")
    stamp = SNOWFLAKE_2024_MS - SNOWFLAKE_2024_MS % count + n * count + shard
    return stamp << 22


def guild_of(t: str, d: JSON) -> int | None:
    """The guild an event belongs to, which picks its shard; None for a DM's."""
    raw = d.get("id") if t == "GUILD_CREATE" else d.get("guild_id")
    return None if raw is None else int(raw)
