"""What a test makes happen in the Discord fake (tests/fakes/discord_fake.py):
guilds and threads added, messages and slash commands pushed, each sent over the
gateway (tests/fakes/discord_gateway.py).

DMs: a MESSAGE_CREATE without ``guild_id`` is a DM. discord.py 2.7 never looks up its
channel cache for it: ``message.channel`` is a ``DMChannel`` with no recipient
(``channel.recipient is None``) whose ``send`` works by id. ``push_message`` records the
DM channel per author, so ``user.send`` (``POST /users/@me/channels``) finds the same id.

Replies: ``push_message(reply_to=id)`` carries the message the fake knows by that id
(a user's pushed one or the bot's) as ``referenced_message``; ``referenced=False``
sends it null, as Discord does for a deleted one, and discord.py 2.7 then gives
``message.reference.resolved`` as a ``DeletedReferencedMessage`` (``id`` and
``channel_id`` from the reference; never None, which it gives only when the field is
absent). ``push_message(stickers=[name])`` adds ``sticker_items`` (discord.py's
``message.stickers``).

Deletions by someone else: ``delete_message`` takes a message away as a moderator
does, mid-stream too (the bot's next edit of it meets 404/10008).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from typing import Any

from tests.fakes.audio import tone_of
from tests.fakes.discord_gateway import Gateway
from tests.fakes.discord_records import JSON, Deletion, FakeFile
from tests.fakes.discord_state import EVERYONE_PERMISSIONS, Guild, Interaction, iso_now

VOICE_MESSAGE = 1 << 13  # the message flag of a voice message


class Events(Gateway):
    """Adding guilds and threads, and pushing messages and slash commands."""

    # -- world building --------------------------------------------------------------
    def add_guild(
        self,
        guild_id: int,
        name: str = "Guild",
        channels: Sequence[int] = (),
        members: Sequence[tuple[int, str]] = (),
    ) -> None:
        """Add a guild with text channels and members (user id, name) besides the bot.

        Before the client connects it arrives in READY; after, as a GUILD_CREATE at
        once (discord.py's ``on_guild_join``). Raises ValueError on a known guild id.
        """
        if guild_id in self._guilds:
            raise ValueError(f"guild {guild_id} already exists")
        for position, channel_id in enumerate(channels):
            self._channels[channel_id] = {
                "id": str(channel_id),
                "type": 0,
                "guild_id": str(guild_id),
                "name": f"channel-{channel_id}",
                "position": position,
                "permission_overwrites": [],
                "parent_id": None,
                "topic": None,
                "nsfw": False,
                "rate_limit_per_user": 0,
                "last_message_id": None,
                "flags": 0,
            }
        for user_id, user_name in members:
            self._users[user_id] = self._user(user_id, user_name)
        guild = Guild(guild_id, name, list(channels), dict(members))
        self._guilds[guild_id] = guild
        self._dispatch("GUILD_CREATE", self._guild_payload(guild), state_event=True)

    def add_thread(
        self,
        thread_id: int,
        parent_id: int,
        guild_id: int,
        name: str = "thread",
        private: bool = False,
    ) -> None:
        """Add a thread under a text channel (public, or private: type 12, which only
        its members can see): THREAD_CREATE to a connected client, and part of every
        later GUILD_CREATE. Raises ValueError on an unknown guild/parent.
        """
        guild = self._guild(guild_id)
        if parent_id not in guild.channels:
            raise ValueError(f"channel {parent_id} is not a text channel of guild {guild_id}")
        thread = {
            "id": str(thread_id),
            "type": 12 if private else 11,
            "guild_id": str(guild_id),
            "parent_id": str(parent_id),
            "owner_id": str(self._owner_id(guild)),
            "name": name,
            "last_message_id": None,
            "message_count": 0,
            "member_count": 1,
            "total_message_sent": 0,
            "rate_limit_per_user": 0,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": iso_now(),
                "locked": False,
                "create_timestamp": iso_now(),
            },
        }
        self._channels[thread_id] = thread
        guild.threads.append(thread_id)
        self._dispatch("THREAD_CREATE", {**thread, "newly_created": True}, state_event=True)

    # -- pushing events ----------------------------------------------------------------
    def push_message(
        self,
        channel_id: int,
        content: str,
        *,
        author_id: int,
        author_name: str = "ann",
        guild_id: int | None = None,
        mention_bot: bool = False,
        reply_to: int | None = None,
        author_bot: bool = False,
        message_id: int | None = None,
        attachments: Sequence[FakeFile] = (),
        stickers: Sequence[str] = (),
        referenced: bool = True,
        flags: int = 0,
    ) -> int:
        """Dispatch a MESSAGE_CREATE from a user; return its id.

        No ``guild_id``: a DM, and ``channel_id`` becomes the author's DM channel.
        ``mention_bot`` puts the bot in ``mentions`` (writing ``<@bot_id>`` into the
        text is the caller's job); ``reply_to`` makes it a reply (type 19) with
        ``referenced_message`` but does not ping (Discord clients ping by default: add
        ``mention_bot``): the message the fake knows by that id (pushed or the bot's),
        else a blank one of the bot's. ``referenced=False`` sends ``referenced_message:
        null`` instead, as Discord does when the referenced message was deleted:
        discord.py then makes ``message.reference.resolved`` a
        ``DeletedReferencedMessage`` (its ``id`` is ``reply_to``). ``attachments`` become
        Discord's attachment objects, each served at its ``url`` on the fake (see
        ``FakeFile``); ``stickers`` (names) become ``sticker_items`` (format 1, PNG);
        ``flags`` are the message's (``push_voice_message`` sets ``VOICE_MESSAGE``).
        A reused ``message_id`` sends the same message again.
        Raises ValueError for an unknown guild or a channel outside it.
        """
        author = self._user(author_id, author_name, bot=author_bot)
        self._users[author_id] = author
        if guild_id is None:
            self._dm_channel(author_id, channel_id)
        else:
            guild = self._guild(guild_id)
            if channel_id not in guild.channels + guild.threads:
                raise ValueError(f"channel {channel_id} is not in guild {guild_id}")
            guild.members.setdefault(author_id, author_name)
        mid = message_id if message_id is not None else self._next_id()
        msg = self._message(mid, channel_id, content, author)
        if guild_id is not None:
            msg["member"] = self._member(author_id, with_user=False)
        if mention_bot:
            bot = dict(self._users[self.bot_id])
            if guild_id is not None:
                bot["member"] = self._member(self.bot_id, with_user=False)
            msg["mentions"] = [bot]
        msg["attachments"] = [self._attachment(channel_id, f) for f in attachments]
        msg["flags"] = flags
        if stickers:
            msg["sticker_items"] = [
                {"id": str(self._next_id()), "name": name, "format_type": 1} for name in stickers
            ]
        if reply_to is not None:
            msg["type"] = 19
            msg["message_reference"] = {"type": 0, "message_id": str(reply_to)}
            msg["message_reference"]["channel_id"] = str(channel_id)
            if guild_id is not None:
                msg["message_reference"]["guild_id"] = str(guild_id)
            original = self._messages.get(reply_to)
            if original is None:
                original = self._message(reply_to, channel_id, "", self._users[self.bot_id])
            msg["referenced_message"] = original if referenced else None
        self._messages[mid] = msg
        self._dispatch("MESSAGE_CREATE", msg)
        return mid

    def push_voice_message(
        self,
        channel_id: int,
        data: bytes,
        *,
        author_id: int,
        duration_secs: float | None = None,
        declared_size: int | None = None,
        **kwargs: Any,
    ) -> int:
        """Dispatch a voice message as Discord's clients send one; return its id: no
        content, flags ``VOICE_MESSAGE`` (1 << 13), one attachment
        ``voice-message.ogg`` (audio/ogg) with ``duration_secs`` (measured from
        ``data`` by PyAV unless given) and a ``waveform`` (base64 of 256 bytes).
        ``kwargs`` go to ``push_message`` (guild_id, mention_bot, ...)."""
        seconds = tone_of(data)[0] if duration_secs is None else duration_secs
        waveform = base64.b64encode(bytes(range(0, 256))).decode()
        recording = FakeFile("voice-message.ogg", data, "audio/ogg", declared_size,
                             duration_secs=round(seconds, 2), waveform=waveform)  # fmt: skip
        return self.push_message(channel_id, "", author_id=author_id, attachments=[recording],
                                 flags=VOICE_MESSAGE, **kwargs)  # fmt: skip

    def delete_message(self, channel_id: int, message_id: int) -> None:
        """Delete a message as someone else does (a moderator, an anti-spam bot): the
        fake forgets it, records it in ``deleted`` and sends MESSAGE_DELETE, as
        Discord does; from then on an edit of it is 404/10008 ``Unknown Message``.
        Raises ValueError for a message the fake does not know in that channel."""
        msg = self._messages.get(message_id)
        if msg is None or msg["channel_id"] != str(channel_id):
            raise ValueError(f"no message {message_id} in channel {channel_id}")
        del self._messages[message_id]
        self.deleted.append(Deletion(channel_id, message_id, time.monotonic()))
        event: JSON = {"id": str(message_id), "channel_id": str(channel_id)}
        if "guild_id" in msg:
            event["guild_id"] = msg["guild_id"]
        self._dispatch("MESSAGE_DELETE", event)

    def push_interaction(
        self,
        name: str,
        options: list[JSON],
        *,
        user_id: int,
        channel_id: int,
        guild_id: int | None = None,
        user_name: str = "ann",
        age_s: float = 0.0,
    ) -> str:
        """Dispatch an INTERACTION_CREATE for a slash command; return its token.

        ``name`` is the command, or its path with spaces (``"soul reload"``): then
        ``options`` are the leaf command's options and the fake nests them in the
        subcommand (group) options as Discord does; with a plain name, ``options`` go
        in as given. Leaf options look like ``{"type": 3, "name": "what", "value":
        "x"}``. The command id and ``guild_id`` come from the commands registered
        with PUT (guild commands first). ``age_s`` backdates the interaction (its id,
        so discord.py's ``is_expired`` agrees): past 15 minutes its follow-ups and
        edits are refused. Raises ValueError as ``push_message`` does.
        """
        root, *subs = name.split()
        nested = options
        for depth in range(len(subs) - 1, -1, -1):
            kind = 1 if depth == len(subs) - 1 else 2
            nested = [{"type": kind, "name": subs[depth], "options": nested}]
        registered = [*self.commands.get(guild_id, []), *self.commands.get(None, [])]
        command = next((c for c in registered if c["name"] == root), None)
        data: JSON = {
            "id": command["id"] if command else str(self._next_id()),
            "name": root,
            "type": 1,
            "options": nested,
        }
        if command is not None and "guild_id" in command:
            data["guild_id"] = command["guild_id"]
        user = self._user(user_id, user_name)
        self._users[user_id] = user
        created = time.time() - age_s
        iid = self._next_id() if not age_s else self._id_at(created)
        token = f"fake-interaction-token-{next(self._tokens)}"
        payload: JSON = {
            "id": str(iid),
            "application_id": str(self.app_id),
            "type": 2,
            "data": data,
            "token": token,
            "version": 1,
            "channel_id": str(channel_id),
            "app_permissions": str(EVERYONE_PERMISSIONS),
            "locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        if guild_id is None:
            payload["channel"] = self._dm_channel(user_id, channel_id)
            payload["user"] = user
            payload["context"] = 1
            payload["authorizing_integration_owners"] = {"0": str(user_id)}
        else:
            guild = self._guild(guild_id)
            if channel_id not in guild.channels + guild.threads:
                raise ValueError(f"channel {channel_id} is not in guild {guild_id}")
            guild.members.setdefault(user_id, user_name)
            payload["guild_id"] = str(guild_id)
            payload["guild_locale"] = "en-US"
            payload["channel"] = self._channels[channel_id]
            payload["member"] = {
                **self._member(user_id),
                "permissions": str(EVERYONE_PERMISSIONS),
            }
            payload["context"] = 0
            payload["authorizing_integration_owners"] = {"0": str(guild_id)}
        self._interactions[token] = Interaction(iid, channel_id, created)
        self._dispatch("INTERACTION_CREATE", payload)
        return token
