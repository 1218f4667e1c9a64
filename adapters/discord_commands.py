"""The Discord adapter's slash commands (adapters/discord_adapter.py), and the
interactions they hold until answered.

The slash commands (`/soul ...`, `/pair ...`, `/reset`, `/retry`, `/undo`,
`/forget`, `/memory`, `/reminders`, `/timezone`, `/checkins`, `/help`) are app
commands synced at start. Each hands "/<words>" to the router as a message
addressed to the bot, its `message_id` naming the interaction and the person
(`Asked`). Their answers, and any later report (a compile's), reach only the
person who asked: an ephemeral follow-up while the interaction lives (Discord
allows 15 minutes), a DM after; never the channel. One that has no answer after
10 minutes gets a line saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import discord
from discord import app_commands

from adapters import texts
from adapters.base import Deliver
from bot.types import Inbound

NO_ANSWER_AFTER_S = 600.0  # a slash command's "thinking..." ends by then (Discord allows 15 min)
_ASKED = re.compile(r"interaction:(\d+):(\d+)")


@dataclass(frozen=True)
class Asked:
    """The message id a slash command's Inbound carries and its replies name:
    `interaction:<interaction id>:<user id>`, so that even a reply that comes
    after the interaction has expired knows whom to send it to."""

    interaction_id: int
    user_id: int

    @classmethod
    def parse(cls, text: str | None) -> Asked | None:
        """The key in an Outbound's `reply_to`, or None for any other message id."""
        found = _ASKED.fullmatch(text or "")
        return cls(int(found[1]), int(found[2])) if found else None

    def __str__(self) -> str:
        return f"interaction:{self.interaction_id}:{self.user_id}"


@dataclass
class _Held:
    """A slash command's interaction, kept for its follow-ups while it lives."""

    interaction: discord.Interaction
    answered: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


class SlashCommands:
    """The app commands of one adapter. `intake` is where a command goes (None
    before start and once stopped: it is dropped), `admit` waits until start is
    done (False once stopped)."""

    def __init__(
        self,
        commands: Sequence[tuple[str, str]],
        *,
        intake: Callable[[], Deliver | None],
        admit: Callable[[], Awaitable[bool]],
        adapter: str,
    ) -> None:
        self._commands = commands
        self._intake = intake
        self._admit = admit
        self._adapter = adapter
        self._interactions: dict[int, _Held] = {}  # by interaction id, until they expire
        self._closed = False

    def register(self, tree: app_commands.CommandTree[discord.Client]) -> None:
        """The slash commands: each hands "/<words>" to the router, like a message."""
        described = dict(self._commands)
        soul = app_commands.Group(name="soul", description=described.get("soul", "Admin"))
        pair = app_commands.Group(name="pair", description=described.get("pair", "Admin"))

        @soul.command(name="reload", description="Load souls again from disk")
        async def soul_reload(interaction: discord.Interaction, name: str | None = None) -> None:
            await self._run(interaction, "soul reload", name)

        @soul.command(name="status", description="Souls, sessions, compiles, today's usage")
        async def soul_status(interaction: discord.Interaction) -> None:
            await self._run(interaction, "soul status")

        @soul.command(name="compile", description="Compile the memory wikis now")
        async def soul_compile(interaction: discord.Interaction, name: str | None = None) -> None:
            await self._run(interaction, "soul compile", name)

        @soul.command(name="usage", description="Tokens and cost")
        async def soul_usage(interaction: discord.Interaction, days: int | None = None) -> None:
            await self._run(interaction, "soul usage", None if days is None else str(days))

        @soul.command(name="rollback", description="Restore a dated backup of a SOUL.md")
        async def soul_rollback(interaction: discord.Interaction, name: str, date: str) -> None:
            await self._run(interaction, "soul rollback", f"{name} {date}")

        @soul.command(name="epoch", description="Start a new autobiography for a soul")
        async def soul_epoch(interaction: discord.Interaction, name: str) -> None:
            await self._run(interaction, "soul epoch", name)

        @pair.command(name="approve", description="Let the person with this code talk to me")
        async def pair_approve(interaction: discord.Interaction, code: str) -> None:
            await self._run(interaction, "pair approve", code)

        @pair.command(name="deny", description="Drop a waiting pairing code")
        async def pair_deny(interaction: discord.Interaction, code: str) -> None:
            await self._run(interaction, "pair deny", code)

        @pair.command(name="revoke", description="Take an approval back (platform:id)")
        async def pair_revoke(interaction: discord.Interaction, who: str) -> None:
            await self._run(interaction, "pair revoke", who)

        @pair.command(name="list", description="The waiting codes and the approved people")
        async def pair_list(interaction: discord.Interaction) -> None:
            await self._run(interaction, "pair list")

        @tree.command(name="reset", description=described.get("reset", "New conversation"))
        async def reset(interaction: discord.Interaction) -> None:
            await self._run(interaction, "reset")

        @tree.command(name="retry", description=described.get("retry", "Answer again"))
        async def retry(interaction: discord.Interaction) -> None:
            await self._run(interaction, "retry")

        @tree.command(name="undo", description=described.get("undo", "Take it back"))
        async def undo(interaction: discord.Interaction) -> None:
            await self._run(interaction, "undo")

        @tree.command(name="forget", description=described.get("forget", "Forget"))
        async def forget(interaction: discord.Interaction, confirm: bool = False) -> None:
            await self._run(interaction, "forget", "confirm" if confirm else None)

        @tree.command(name="memory", description=described.get("memory", "Your memory"))
        @app_commands.describe(page="With drop: the page to drop (as /memory lists it)")
        async def memory(
            interaction: discord.Interaction,
            action: Literal["list", "drop", "export"] = "list",
            page: str | None = None,
        ) -> None:
            words = "memory" if action == "list" else f"memory {action}"
            await self._run(interaction, words, page if action == "drop" else None)

        @tree.command(name="reminders", description=described.get("reminders", "Reminders"))
        @app_commands.describe(cancel="The number of the reminder to cancel (as listed)")
        async def reminders(interaction: discord.Interaction, cancel: int | None = None) -> None:
            words = "reminders" if cancel is None else "reminders cancel"
            await self._run(interaction, words, None if cancel is None else str(cancel))

        @tree.command(name="timezone", description=described.get("timezone", "Time zone"))
        @app_commands.describe(zone="An IANA time zone, e.g. Europe/Lisbon")
        async def timezone(interaction: discord.Interaction, zone: str | None = None) -> None:
            await self._run(interaction, "timezone", zone)

        @tree.command(name="checkins", description=described.get("checkins", "Check-ins"))
        async def checkins(
            interaction: discord.Interaction, turn: Literal["on", "off"] | None = None
        ) -> None:
            await self._run(interaction, "checkins", turn)

        @tree.command(name="help", description=described.get("help", "Help"))
        async def help_(interaction: discord.Interaction) -> None:
            await self._run(interaction, "help")

        tree.add_command(soul)
        tree.add_command(pair)

    async def _run(
        self, interaction: discord.Interaction, words: str, arg: str | None = None
    ) -> None:
        deliver = self._intake()
        if deliver is None:
            return
        await interaction.response.defer(ephemeral=True, thinking=True)
        if not await self._admit():
            return
        self._interactions = {
            key: held for key, held in self._interactions.items()
            if not held.interaction.is_expired()
        }  # fmt: skip
        held = self._interactions[interaction.id] = _Held(interaction)
        channel = interaction.channel
        thread = isinstance(channel, discord.Thread)
        chat_id = (
            channel.parent_id if isinstance(channel, discord.Thread) else interaction.channel_id
        )
        inbound = Inbound(
            platform=self._adapter,
            chat_id=str(chat_id),
            user_id=str(interaction.user.id),
            user_name=interaction.user.display_name,
            text=f"/{words}" + (f" {arg}" if arg else ""),
            is_dm=interaction.guild_id is None,
            mentions_bot=True,  # addressed to the bot: a failure gets the router's one line
            message_id=str(Asked(interaction.id, interaction.user.id)),
            thread_id=str(interaction.channel_id) if thread else None,
            guild_id=str(interaction.guild_id) if interaction.guild_id else None,
            private_thread=isinstance(channel, discord.Thread)
            and channel.type == discord.ChannelType.private_thread,
        )
        await deliver(inbound)  # taken: the answer comes through send()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(held.answered.wait(), NO_ANSWER_AFTER_S)
        if not held.answered.is_set() and not self._closed:  # none came: say so
            await interaction.followup.send(texts.NO_ANSWER, ephemeral=True)

    def answering(self, asked: Asked) -> discord.Webhook | None:
        """Mark the command `asked` answered; the follow-up webhook of its
        interaction while it lives, else None (the answer goes by DM)."""
        held = self._interactions.get(asked.interaction_id)
        if held is None:
            return None
        held.answered.set()
        return None if held.interaction.is_expired() else held.interaction.followup

    def close(self) -> None:
        """End the commands still waiting for an answer, without a line."""
        self._closed = True
        for held in self._interactions.values():
            held.answered.set()
