"""Which process owns a conversation: the one its messages come to.

- Discord: a server's messages come on shard `(guild_id >> 22) % shard_count`
  (Discord's rule), direct messages on shard 0 (discord.py's routing); the
  owner is the live process holding that shard (unsharded: the one shard 0).
- Telegram: the one live process that runs Telegram (bot/cluster/topology.py
  refuses a second).
- The terminal chat, and any other platform: the process itself, each its own.

`Owners` judges from one reading of the live processes (`Cluster.owners`): this
process as its config sets it up, and the others' rows of `processes`. Alone on
a store (SQLite), a process owns every conversation.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.cluster.topology import Process
from bot.types import Inbound

DISCORD = "discord"
TELEGRAM = "telegram"


def shard_of(guild_id: str | None, shard_count: int | None) -> int:
    """The Discord shard a conversation's messages come on: its server's, by
    Discord's rule, and shard 0 for a direct message or an unsharded bot.
    Raises ValueError for a server id that is not a number."""
    if guild_id is None or not shard_count:
        return 0
    return (int(guild_id) >> 22) % shard_count


@dataclass(frozen=True)
class Owners:
    """The live processes of a store at one moment: `me` and the `others`;
    `alone` when no other process can share the store (SQLite)."""

    me: Process
    others: tuple[Process, ...] = ()
    alone: bool = False

    def of(self, conversation: Inbound) -> Process | None:
        """The process that owns `conversation` (see the module), or None when
        no live process does (its shard's, or Telegram's, is down). Raises
        ValueError for a Discord server id that is not a number."""
        if self.alone:
            return self.me
        live = (self.me, *self.others)
        if conversation.platform == DISCORD:
            return next(
                (p for p in live
                 if p.discord and shard_of(conversation.guild_id, p.shard_count) in p.shards()),
                None,
            )  # fmt: skip
        if conversation.platform == TELEGRAM:
            return next((p for p in live if p.telegram), None)
        return self.me

    def mine(self, conversation: Inbound) -> bool:
        """Whether this process owns `conversation`."""
        return self.of(conversation) is self.me
