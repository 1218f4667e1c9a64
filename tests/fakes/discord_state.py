"""The state of the Discord fake (tests/fakes/discord_fake.py), which its parts
share: guilds, channels, users, messages, interactions, gateway sessions, the
scripted failures and what it recorded; and Discord's JSON objects for them
(users, members, guilds, DM channels, messages, attachments), built from it.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import quote

from tests.fakes.discord_records import (
    JSON,
    Deletion,
    Download,
    Edit,
    FakeFile,
    InteractionReply,
    Request,
    Sent,
)
from tests.fakes.discord_sessions import DISCORD_EPOCH_MS, Conn, Session
from tests.fakes.server import LoopbackServer

API_PREFIX = "/api/v10"
HEARTBEAT_INTERVAL_MS = 41250
MAX_UPLOAD_BYTES = 10 * 2**20  # a bot's upload cap in a server without boosts, and in DMs
JOINED_AT = "2024-01-01T00:00:00+00:00"
# The application flags that let a bot read message content: verified, and unverified.
GATEWAY_MESSAGE_CONTENT, GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 18, 1 << 19
# @everyone in every fake guild: view, send, history, embeds, files, reactions,
# external emojis, mention everyone, threads, application commands.
EVERYONE_PERMISSIONS = sum(1 << b for b in (6, 10, 11, 14, 15, 16, 17, 18, 31, 35, 36, 38))


@dataclass
class Guild:
    """A guild of the fake: its text channels, members and threads."""

    id: int
    name: str
    channels: list[int]
    members: dict[int, str]  # user id -> name; the bot is always a member too
    threads: list[int] = field(default_factory=list)


@dataclass
class Interaction:
    """A slash command pushed, kept for its callback, follow-ups and replies."""

    id: int
    channel_id: int
    created: float  # time.time() of its creation (its id's timestamp)
    acked: bool = False
    original: JSON | None = None


@dataclass
class Failure:
    """A scripted error answer (``fail_next``) to the next ``remaining`` requests
    matching."""

    method: str
    path: re.Pattern[str]
    status: int
    body: JSON | None
    remaining: int


@dataclass
class Drop:
    """A scripted hang-up (``drop_next``) on the next ``remaining`` requests matching."""

    method: str
    path: re.Pattern[str]
    remaining: int
    after: bool  # run the route first (its effect stays), then hang up


def iso_now() -> str:
    """Now, as Discord writes a timestamp."""
    return datetime.now(UTC).isoformat()


class DiscordState(LoopbackServer):
    """The fake's state, and the helpers its parts share (`FakeDiscord` is all of
    them): its addresses, waking waiters, and the JSON objects Discord sends."""

    def __init__(
        self,
        token: str = "TEST.DISCORD.TOKEN",
        bot_id: int = 7000,
        app_id: int = 7000,
        bot_name: str = "soul",
        max_upload_bytes: int = MAX_UPLOAD_BYTES,
        application_flags: int = GATEWAY_MESSAGE_CONTENT_LIMITED,
        recommended_shards: int = 1,
        heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS,
    ) -> None:
        self.token, self.bot_id, self.app_id, self.bot_name = token, bot_id, app_id, bot_name
        self.max_upload_bytes = max_upload_bytes
        self.application_flags = application_flags  # the message content intent on, unverified
        self.recommended_shards = recommended_shards  # GET /gateway/bot's `shards`
        self.heartbeat_interval_ms = heartbeat_interval_ms  # in every HELLO
        self.requests: list[Request] = []
        self.dropped: list[Request] = []  # the requests the fake hung up on
        self.typing: list[int] = []
        self.commands: dict[int | None, list[JSON]] = {}  # None: global; else per guild
        self.interaction_replies: list[InteractionReply] = []
        self.edits: list[Edit] = []
        self.deleted: list[Deletion] = []
        self.downloads: list[Download] = []
        self.gateway_received: list[JSON] = []  # every frame the client sent
        self.identified: list[tuple[int, int] | None] = []  # each IDENTIFY's shard (None: none)
        self.heartbeats: Counter[int | None] = Counter()  # op 1 received, by shard id
        self.resume_count = 0
        self._sent: list[Sent] = []
        self._guilds: dict[int, Guild] = {}
        self._channels: dict[int, JSON] = {}
        self._users: dict[int, JSON] = {bot_id: self._user(bot_id, bot_name, bot=True)}
        self._dm_by_user: dict[int, int] = {}
        self._messages: dict[int, JSON] = {}
        self._files: dict[tuple[int, int], FakeFile] = {}  # (channel, attachment id) -> file
        self._download_delay = 0.0
        self._answer_delay = 0.0  # REST answers wait this long (`slow_answers`)
        self._interactions: dict[str, Interaction] = {}
        self._failures: list[Failure] = []
        self._drops: list[Drop] = []
        self._nonces: dict[str, JSON] = {}  # enforce_nonce: the message each nonce made
        self._sessions: dict[int | None, Session] = {}  # by shard id; None: unsharded
        self._pending: list[tuple[str, JSON]] = []  # pushed before a session held them
        self._unanswered: set[int | None] = set()  # shards whose heartbeats get no op 11
        self._conns: set[Conn] = set()
        self._last_id = 0
        self._tokens = itertools.count(1)
        self._changed = asyncio.Event()

    @property
    def api_base_url(self) -> str:
        """``http://127.0.0.1:P/api/v10``: the value for ``discord.http.Route.BASE``."""
        return f"http://127.0.0.1:{self._started_port()}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        """``ws://127.0.0.1:P/gateway``: the value for ``DiscordWebSocket.DEFAULT_GATEWAY``."""
        return f"ws://127.0.0.1:{self._started_port()}/gateway"

    def _started_port(self) -> int:
        if self._runner is None:
            raise RuntimeError("FakeDiscord is not started: use start() or `async with`")
        return self._port

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- payloads --------------------------------------------------------------------
    def _next_id(self) -> int:
        now = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last_id = max(self._last_id + 1, now)
        return self._last_id

    def _id_at(self, when: float) -> int:
        """A fresh snowflake whose timestamp is ``when`` (a time.time() value)."""
        return ((int(when * 1000) - DISCORD_EPOCH_MS) << 22) | (next(self._tokens) & 0xFFF)

    @staticmethod
    def _user(user_id: int, name: str, *, bot: bool = False) -> JSON:
        return {
            "id": str(user_id),
            "username": name,
            "discriminator": "0",
            "global_name": name,
            "avatar": None,
            "bot": bot,
            "flags": 0,
            "public_flags": 0,
        }

    def _member(self, user_id: int, *, with_user: bool = True) -> JSON:
        member: JSON = {
            "roles": [],
            "joined_at": JOINED_AT,
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
            "nick": None,
            "avatar": None,
            "premium_since": None,
            "communication_disabled_until": None,
        }
        if with_user:
            member["user"] = self._users[user_id]
        return member

    def _guild(self, guild_id: int) -> Guild:
        try:
            return self._guilds[guild_id]
        except KeyError:
            raise ValueError(f"unknown guild {guild_id}: call add_guild first") from None

    @staticmethod
    def _owner_id(guild: Guild) -> int:
        return next(iter(guild.members), 1)

    def _guild_payload(self, guild: Guild) -> JSON:
        member_ids = [self.bot_id, *(u for u in guild.members if u != self.bot_id)]
        return {
            "id": str(guild.id),
            "name": guild.name,
            "icon": None,
            "owner_id": str(self._owner_id(guild)),
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "system_channel_id": None,
            "system_channel_flags": 0,
            "preferred_locale": "en-US",
            "roles": [
                {
                    "id": str(guild.id),
                    "name": "@everyone",
                    "permissions": str(EVERYONE_PERMISSIONS),
                    "position": 0,
                    "colors": {"primary_color": 0},
                    "hoist": False,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                }
            ],
            "emojis": [],
            "stickers": [],
            "features": [],
            "joined_at": JOINED_AT,
            "large": False,
            "member_count": len(member_ids),
            "members": [self._member(u) for u in member_ids],
            "channels": [self._channels[c] for c in guild.channels],
            "threads": [self._channels[t] for t in guild.threads],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }

    def _dm_channel(self, user_id: int, channel_id: int | None = None) -> JSON:
        """The DM channel with a user: ``channel_id`` if given, else the known or a new one."""
        if channel_id is None:
            channel_id = self._dm_by_user.get(user_id) or self._next_id()
        self._users.setdefault(user_id, self._user(user_id, f"user{user_id}"))
        channel = {
            "id": str(channel_id),
            "type": 1,
            "recipients": [self._users[user_id]],
            "last_message_id": None,
            "flags": 0,
        }
        self._channels[channel_id] = channel
        self._dm_by_user[user_id] = channel_id
        return channel

    def _message(self, mid: int, channel_id: int, content: str, author: JSON) -> JSON:
        msg: JSON = {
            "id": str(mid),
            "channel_id": str(channel_id),
            "type": 0,
            "content": content,
            "author": author,
            "mentions": [],
            "mention_roles": [],
            "mention_everyone": False,
            "attachments": [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "tts": False,
            "flags": 0,
            "timestamp": iso_now(),
            "edited_timestamp": None,
        }
        guild_id = self._channels.get(channel_id, {}).get("guild_id")
        if guild_id is not None:
            msg["guild_id"] = guild_id
        return msg

    def _attachment(self, channel_id: int, file: FakeFile) -> JSON:
        """Discord's attachment object for ``file`` in a channel; its bytes are kept
        for ``GET`` on its ``url`` (which is also its ``proxy_url``)."""
        aid = self._next_id()
        self._files[(channel_id, aid)] = file
        url = f"http://127.0.0.1:{self._port}/attachments/{channel_id}/{aid}/{quote(file.filename)}"
        attachment: JSON = {
            "id": str(aid),
            "filename": file.filename,
            "size": file.size,
            "url": url,
            "proxy_url": url,
            "content_type": file.content_type,
        }
        optional = (("width", file.width), ("height", file.height),
                    ("duration_secs", file.duration_secs), ("waveform", file.waveform))  # fmt: skip
        for key, value in optional:
            if value is not None:
                attachment[key] = value
        return attachment
