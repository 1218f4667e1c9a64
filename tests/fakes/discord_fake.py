"""A fake of Discord's REST API and gateway on 127.0.0.1 for the real ``discord.py``.

One aiohttp server serves the REST API under ``/api/v10`` (``fake.api_base_url``)
and the gateway websocket at ``/gateway`` (``fake.gateway_url``; any query string).
discord.py has no option to point it elsewhere; whoever starts the client sets two
class attributes first (the production adapter does it itself):

* ``discord.http.Route.BASE = fake.api_base_url`` — every REST call, including the
  interaction callbacks and follow-ups: ``discord.webhook.async_`` imports this same
  ``Route`` class, so there is no separate webhook attribute.
* ``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.gateway_url)`` —
  the first connection (resumes use READY's ``resume_gateway_url``, which is the same).

REST: ``Authorization: Bot <token>`` is required (else 401 ``{"message": "401:
Unauthorized", "code": 0}``; discord.py turns that on ``/users/@me`` into
``LoginFailure``), except under ``/interactions/`` and ``/webhooks/`` where the token
is in the path, as on Discord. Order of a request: record it (``fake.requests``),
a scripted hang-up (``drop_next``: the connection closed with no answer, before or
after the route ran; discord.py raises ``aiohttp.ServerDisconnectedError``, except that
aiohttp itself sends an idempotent request, GET, PUT or DELETE, once more first: a
DELETE hung up on after the route then meets 404/10008), auth, a scripted failure
(``fail_next``), then the route. JSON answers carry exactly
``Content-Type: application/json`` (discord.py compares the header verbatim).
Routes: ``GET /users/@me``, ``GET /oauth2/applications/@me`` and ``GET
/applications/@me`` (the application, its ``flags`` from ``application_flags``: by
default the message content intent is on), ``GET /gateway[/bot]`` (``/bot`` adds
``shards``, the ``recommended_shards``),
``POST /users/@me/channels`` (a DM channel), ``GET /channels/{id}``,
``POST /channels/{id}/messages`` (JSON or multipart with ``payload_json`` and file
parts ``files[n]``, each recorded as an ``Upload`` with its bytes: the message's
``attachments`` carry their names, as ``payload_json``'s ``attachments`` give them by
id, and sizes; a file over ``max_upload_bytes``, 10 MiB as on Discord, → 413/40005;
empty →
400/50006, content over 2000 characters → 400/50035, a reply to a message the fake
never saw → 400/50035, unknown channel → 404/10003; with ``enforce_nonce``, a
``nonce`` already used returns that message and creates none, as on Discord, whose
window is a few minutes: the fake's has no end), ``GET
/channels/{id}/messages/{id}``, ``PATCH /channels/{id}/messages/{id}`` (an edit of
content, embeds, components, answered with ``edited_timestamp`` and recorded as an
``Edit``: another user's message → 403/50005, content over 2000 → 400/50035, nothing
left → 400/50006, unknown → 404/10008), ``DELETE /channels/{id}/messages/{id}`` (204,
recorded as a ``Deletion`` in ``deleted``; from then on no route knows the id, a
reply to it → 400/50035, and ``message_text`` raises; another user's message →
403/50013, as for a bot without Manage Messages, or in a DM 403/50003; unknown channel
→ 404/10003; unknown message, or one of another channel → 404/10008; no MESSAGE_DELETE
event is sent, as edits send no MESSAGE_UPDATE), ``POST /channels/{id}/typing`` (204),
``GET``/``PUT /applications/{app}[/guilds/{guild}]/commands`` (bulk overwrite; ids
are kept per name), ``POST /interactions/{id}/{token}/callback`` (204, or the
callback object when discord.py asks ``with_response``; a second ack → 400/40060),
``POST /webhooks/{app}/{token}`` (a follow-up; needs an acked interaction; the
message only with ``wait``), ``GET``/``PATCH /webhooks/{app}/{token}/messages/{id or
@original}``; the webhook routes answer 401/50027 once the interaction is 15 minutes
old, as on Discord (``push_interaction(age_s=...)`` makes an old one; its callback is
not checked). Anything else → 404 ``{"message": "404: Not Found", "code": 0}``.
``fail_next`` and ``drop_next`` match any of these by method and path.
A scripted 429 carries ``retry_after`` in the body and a ``Via`` header: without
``Via`` discord.py takes a 429 for a Cloudflare ban and raises instead of retrying.
discord.py retries 500/502/504 itself after 1 s, 3 s, ...: script those sparingly
(a 503 it raises at once, as ``DiscordServerError``).

Attachments, the bot's uploads and ``push_message(attachments=[FakeFile(...)])``
alike, have ``url`` = ``proxy_url`` on the fake itself, outside ``/api/v10`` and with
no auth, like Discord's CDN: ``http://127.0.0.1:P/attachments/{channel}/{id}/{name}``.
A GET there answers the bytes with their media type, or a 404 (text) for an unknown
one, so discord.py's ``Attachment.read()`` works (it GETs ``url`` with the client's
session). Every GET is recorded as a ``Download`` on arrival; ``hang_downloads(s)``
holds the answers ``s`` seconds, for a client's timeout. A ``FakeFile``'s
``declared_size`` makes the attachment's ``size`` lie; the bytes served stay theirs.

Gateway (plain TEXT frames; discord.py asks for zlib-stream but inflates only binary
frames): HELLO on connect (``heartbeat_interval_ms``); op 1 → op 11 (unless
``answer_heartbeats(False)`` for its shard; each counted in ``heartbeats``); IDENTIFY
(op 2) with the right token → READY (all its guilds unavailable) then one GUILD_CREATE
per guild (``"unavailable": false``), then the events pushed before a session held
them; a wrong token → close 4004; the message content intent asked for while
``application_flags`` has neither GATEWAY_MESSAGE_CONTENT flag → close 4014, as on
Discord. RESUME (op 6) of a live session → the events after the client's ``seq``, then
RESUMED; any other session → op 9 (``d: false``), and discord.py IDENTIFYs afresh.
op 8 → one GUILD_MEMBERS_CHUNK. Events pushed while a session's connection is down
are kept and replayed on RESUME; a fresh IDENTIFY starts a new session and old events
are lost, as on Discord. Intents are honoured: no MESSAGE_CREATE without
GUILD_MESSAGES (guilds) or DIRECT_MESSAGES (DMs), and without MESSAGE_CONTENT a guild
message that neither mentions nor is written by the bot arrives with empty content.

Shards: an IDENTIFY with ``shard: [id, count]`` starts the session of that shard (one
per shard id; a later IDENTIFY of the same id replaces it; an id not below count →
close 4010), recorded in ``identified`` (``None`` for an unsharded one) and, while its
connection is up, in ``shards``. A guild's events (its GUILD_CREATE, THREAD_CREATE,
MESSAGE_CREATE, INTERACTION_CREATE, member chunks) go only to the shard
``(guild_id >> 22) % count``, and its READY lists only those guilds; events with no
guild (DMs) go to shard 0, Discord's rule; an unsharded session gets everything.
``guild_id_on_shard(shard, count)`` makes a guild id that lands on a given shard.

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

Driving: ``add_guild``, ``add_thread``, ``push_message``, ``push_interaction``,
``drop_connection`` (abort the TCP connection without a close frame: discord.py sees
1006 and RESUMEs at once, without backoff), ``invalidate_session`` (both for the
unsharded session, or the ``shard`` given), ``answer_heartbeats``, ``fail_next``,
``drop_next``, ``hang_downloads``. Watching: ``requests``, ``dropped`` (the requests
hung up on), ``sent`` (as sent: edits and deletions do not change a ``Sent``),
``edits``, ``deleted``, ``message_text`` (a message's content now, after edits; a
deleted one raises), ``downloads``, ``typing``, ``commands``, ``interaction_replies``,
``gateway_received``, ``identified``, ``identify_count``, ``resume_count``,
``heartbeats``, ``shards``, and the ``wait_*`` coroutines, woken on every recorded
request, download and gateway frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import re
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import quote

from aiohttp import WSMsgType, web

from tests.fakes.server import LoopbackServer

JSON = dict[str, Any]
API_PREFIX = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
HEARTBEAT_INTERVAL_MS = 41250
MAX_CONTENT = 2000
MAX_UPLOAD_BYTES = 10 * 2**20  # a bot's upload cap in a server without boosts, and in DMs
INTERACTION_TTL_S = 15 * 60  # an interaction token's life (its follow-ups and edits)
JOINED_AT = "2024-01-01T00:00:00+00:00"
GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 9, 1 << 12, 1 << 15
# The application flags that let a bot read message content: verified, and unverified.
GATEWAY_MESSAGE_CONTENT, GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 18, 1 << 19
SNOWFLAKE_2024_MS = 1_704_067_200_000 - DISCORD_EPOCH_MS  # 2024-01-01, in a snowflake's clock
# @everyone in every fake guild: view, send, history, embeds, files, reactions,
# external emojis, mention everyone, threads, application commands.
EVERYONE_PERMISSIONS = sum(1 << b for b in (6, 10, 11, 14, 15, 16, 17, 18, 31, 35, 36, 38))
DEFAULT_ERRORS: dict[int, tuple[str, int]] = {
    400: ("400: Bad Request", 0),
    401: ("401: Unauthorized", 0),
    403: ("Missing Permissions", 50013),
    404: ("404: Not Found", 0),
    429: ("You are being rate limited.", 0),
    500: ("500: Internal Server Error", 0),
    502: ("502: Bad Gateway", 0),
    503: ("503: Service Unavailable", 0),
}
ReplyKind = Literal["callback", "followup", "edit"]


@dataclass(frozen=True)
class Request:
    """One REST request as received; ``path`` has no ``/api/v10`` prefix.

    ``json`` is the JSON body (for multipart, the parsed ``payload_json``) or None;
    ``files`` the uploaded file names, ``uploads`` the files themselves; ``t`` is
    ``time.monotonic()``.
    """

    method: str
    path: str
    json: Any
    t: float
    query: Mapping[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    uploads: tuple[Upload, ...] = ()


@dataclass(frozen=True)
class Upload:
    """A file part of a multipart request: its form field name (``files[0]``),
    file name, media type and bytes."""

    part: str
    filename: str
    content_type: str
    data: bytes = field(repr=False)

    @property
    def index(self) -> int | None:
        """The ``n`` of a ``files[n]`` field, which ``payload_json``'s attachments name."""
        found = re.fullmatch(r"files\[(\d+)\]", self.part)
        return int(found[1]) if found else None


@dataclass(frozen=True)
class Sent:
    """A message the bot created with ``POST /channels/{id}/messages``."""

    channel_id: int
    message_id: int
    content: str
    body: JSON
    files: tuple[Upload, ...] = ()

    @property
    def reply_to(self) -> int | None:
        ref = self.body.get("message_reference") or {}
        return int(ref["message_id"]) if ref.get("message_id") else None


@dataclass(frozen=True)
class Edit:
    """A message edit by ``PATCH /channels/{id}/messages/{id}``: ``content`` is the
    message's text after it, ``body`` the request as sent, ``at`` ``time.monotonic()``."""

    channel_id: int
    message_id: int
    content: str
    body: JSON
    at: float


@dataclass(frozen=True)
class Deletion:
    """A message deleted by ``DELETE /channels/{id}/messages/{id}``; ``at`` is
    ``time.monotonic()``."""

    channel_id: int
    message_id: int
    at: float


@dataclass(frozen=True)
class FakeFile:
    """An attachment for ``push_message``, served at its ``url`` with these bytes.

    ``declared_size`` is the ``size`` the message claims (None: the real one), so a
    test can make it lie either way; ``width``/``height`` go in as given (images).
    """

    filename: str
    data: bytes = field(repr=False)
    content_type: str = "application/octet-stream"
    declared_size: int | None = None
    width: int | None = None
    height: int | None = None

    @property
    def size(self) -> int:
        """The ``size`` of its attachment object."""
        return len(self.data) if self.declared_size is None else self.declared_size


@dataclass(frozen=True)
class Download:
    """A GET of an attachment URL, recorded on arrival (``t``: ``time.monotonic()``):
    the ids and file name of its path, and whether the fake served it (else 404)."""

    channel_id: int
    attachment_id: int
    filename: str
    found: bool
    t: float


@dataclass(frozen=True)
class InteractionReply:
    """An answer to an interaction: ``data`` is the request body as sent.

    ``response_type`` is the callback type (4 message, 5 deferred, ...), None otherwise.
    """

    kind: ReplyKind
    token: str
    data: JSON
    content: str | None
    response_type: int | None = None
    files: tuple[Upload, ...] = ()


@dataclass
class _Guild:
    id: int
    name: str
    channels: list[int]
    members: dict[int, str]  # user id -> name; the bot is always a member too
    threads: list[int] = field(default_factory=list)


@dataclass
class _Interaction:
    id: int
    channel_id: int
    created: float  # time.time() of its creation (its id's timestamp)
    acked: bool = False
    original: JSON | None = None


@dataclass
class _Failure:
    method: str
    path: re.Pattern[str]
    status: int
    body: JSON | None
    remaining: int


@dataclass
class _Drop:
    method: str
    path: re.Pattern[str]
    remaining: int
    after: bool  # run the route first (its effect stays), then hang up


class _Conn:
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
class _Session:
    id: str
    intents: int
    shard: tuple[int, int] | None = None  # (shard id, count); None: unsharded
    seq: int = 0
    log: list[tuple[int, str]] = field(default_factory=list)  # (seq, frame) for RESUME
    conn: _Conn | None = None

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


def _guild_of(t: str, d: JSON) -> int | None:
    """The guild an event belongs to, which picks its shard; None for a DM's."""
    raw = d.get("id") if t == "GUILD_CREATE" else d.get("guild_id")
    return None if raw is None else int(raw)


def _response(
    status: int, obj: Any = None, headers: Mapping[str, str] | None = None
) -> web.Response:
    if status == 204:
        return web.Response(status=204, headers=headers)
    return web.Response(
        status=status,
        body=json.dumps(obj).encode(),
        content_type="application/json",
        headers=headers,
    )


def _error(status: int, message: str, code: int, **extra: Any) -> web.Response:
    return _response(status, {"message": message, "code": code, **extra})


def _too_long() -> web.Response:
    return _form_error(
        "content", "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_CONTENT} or fewer in length."
    )


def _form_error(key: str, code: str, message: str) -> web.Response:
    errors = {key: {"_errors": [{"code": code, "message": message}]}}
    return _error(400, "Invalid Form Body", 50035, errors=errors)


def _now() -> str:
    return datetime.now(UTC).isoformat()


Handler = Callable[
    [web.Request, "re.Match[str]", Any, tuple["Upload", ...]], Awaitable[web.Response]
]


class FakeDiscord(LoopbackServer):
    """The fake server; see the module docstring."""

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
        self._guilds: dict[int, _Guild] = {}
        self._channels: dict[int, JSON] = {}
        self._users: dict[int, JSON] = {bot_id: self._user(bot_id, bot_name, bot=True)}
        self._dm_by_user: dict[int, int] = {}
        self._messages: dict[int, JSON] = {}
        self._files: dict[tuple[int, int], FakeFile] = {}  # (channel, attachment id) -> file
        self._download_delay = 0.0
        self._interactions: dict[str, _Interaction] = {}
        self._failures: list[_Failure] = []
        self._drops: list[_Drop] = []
        self._nonces: dict[str, JSON] = {}  # enforce_nonce: the message each nonce made
        self._sessions: dict[int | None, _Session] = {}  # by shard id; None: unsharded
        self._pending: list[tuple[str, JSON]] = []  # pushed before a session held them
        self._unanswered: set[int | None] = set()  # shards whose heartbeats get no op 11
        self._conns: set[_Conn] = set()
        self._last_id = 0
        self._tokens = itertools.count(1)
        self._changed = asyncio.Event()
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = [
            (m, re.compile(p), h)
            for m, p, h in (
                ("GET", r"/users/@me", self._get_me),
                ("GET", r"/oauth2/applications/@me", self._get_application),
                ("GET", r"/applications/@me", self._get_application),
                ("GET", r"/gateway(/bot)?", self._get_gateway),
                ("POST", r"/users/@me/channels", self._create_dm),
                ("GET", r"/channels/(\d+)", self._get_channel),
                ("POST", r"/channels/(\d+)/messages", self._create_message),
                ("GET", r"/channels/(\d+)/messages/(\d+)", self._get_message),
                ("PATCH", r"/channels/(\d+)/messages/(\d+)", self._edit_message),
                ("DELETE", r"/channels/(\d+)/messages/(\d+)", self._delete_message),
                ("POST", r"/channels/(\d+)/typing", self._trigger_typing),
                ("GET", r"/applications/(\d+)(?:/guilds/(\d+))?/commands", self._get_commands),
                ("PUT", r"/applications/(\d+)(?:/guilds/(\d+))?/commands", self._put_commands),
                ("POST", r"/interactions/(\d+)/([^/]+)/callback", self._callback),
                ("POST", r"/webhooks/(\d+)/([^/]+)", self._followup),
                ("GET", r"/webhooks/(\d+)/([^/]+)/messages/(@original|\d+)", self._get_reply),
                ("PATCH", r"/webhooks/(\d+)/([^/]+)/messages/(@original|\d+)", self._edit_reply),
            )
        ]

    # -- lifecycle ---------------------------------------------------------------
    async def start(self, port: int = 0) -> None:
        """Listen on 127.0.0.1 (``port`` 0: any free port). Raises RuntimeError if running."""
        if self._runner is not None:
            raise RuntimeError("FakeDiscord is already started")
        # Room for the largest upload and its form: aiohttp refuses more than 1 MiB by default.
        app = web.Application(client_max_size=self.max_upload_bytes + 2**20)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get(
            r"/attachments/{channel_id:\d+}/{attachment_id:\d+}/{filename}", self._download
        )
        app.router.add_route("*", API_PREFIX + "/{tail:.*}", self._rest)
        await self._listen(app, port)

    async def stop(self) -> None:
        """Close the websockets (code 1001), then the server. Idempotent."""
        if self._runner is None:
            return
        for conn in list(self._conns):
            conn.close(1001)
        writers = [c.writer for c in self._conns if c.writer is not None]
        if writers:
            await asyncio.wait(writers, timeout=1.0)
        for conn in list(self._conns):
            conn.abort()
        await self._runner.cleanup()
        self._runner = None

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

    # -- recording and waiting -----------------------------------------------------
    @property
    def sent(self) -> list[Sent]:
        """Messages created by ``POST /channels/{id}/messages``, in order (a fresh list)."""
        return list(self._sent)

    def message_text(self, message_id: int) -> str:
        """The current content of a message the fake knows (pushed, or the bot's),
        after any edits. Raises ValueError for an unknown id, and for a deleted one
        (``"message N was deleted"``)."""
        try:
            return str(self._messages[message_id]["content"])
        except KeyError:
            if any(d.message_id == message_id for d in self.deleted):
                raise ValueError(f"message {message_id} was deleted") from None
            raise ValueError(f"unknown message {message_id}") from None

    @property
    def connected(self) -> bool:
        """A client identified or resumed, and the connection of every session
        (each shard's) is up."""
        sessions = self._sessions.values()
        return bool(sessions) and all(s.conn is not None for s in sessions)

    @property
    def identify_count(self) -> int:
        """How many IDENTIFYs the fake accepted (each starts a session)."""
        return len(self.identified)

    @property
    def shards(self) -> list[tuple[int, int]]:
        """The (shard id, count) of each shard's session whose connection is up, sorted."""
        return sorted(s.shard for s in self._sessions.values() if s.shard and s.conn)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(
        self,
        predicate: Callable[[FakeDiscord], bool],
        timeout: float = 10.0,  # noqa: ASYNC109
        what: str = "",
    ) -> None:
        """Return once ``predicate(self)`` holds; it is checked after every change.

        Raises TimeoutError naming ``what`` (or the predicate) after ``timeout`` seconds.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self):
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                name = what or getattr(predicate, "__name__", repr(predicate))
                raise TimeoutError(
                    f"FakeDiscord: gave up waiting for {name} after {timeout}s "
                    f"({len(self.requests)} requests, {len(self._sent)} sent, "
                    f"connected={self.connected})"
                ) from None

    async def wait_sent(self, count: int, timeout: float = 10.0) -> list[Sent]:  # noqa: ASYNC109
        """Wait until ``count`` messages were sent; return all sent so far."""
        await self.wait_for(lambda f: len(f._sent) >= count, timeout, f"{count} sent messages")
        return self.sent

    async def wait_connected(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Wait until a client has identified or resumed and is connected."""
        await self.wait_for(lambda f: f.connected, timeout, "a live gateway connection")

    # -- scripting -----------------------------------------------------------------
    def fail_next(
        self, method: str, path_regex: str, status: int, body: JSON | None = None, times: int = 1
    ) -> None:
        """Answer the next ``times`` requests matching with ``status``.

        ``method`` is an HTTP method or ``"*"``; ``path_regex`` is ``re.search``-ed on
        the path without ``/api/v10``. ``body`` defaults to Discord's usual error for
        the status (403: ``Missing Permissions``/50013). A 429 gets ``retry_after``
        (0.05 s unless the body has one), ``Retry-After``, ``Via`` and
        ``X-RateLimit-*`` headers, so discord.py sleeps and retries.
        """
        self._failures.append(_Failure(method.upper(), re.compile(path_regex), status, body, times))

    def drop_next(
        self, method: str, path_regex: str, *, times: int = 1, after: bool = False
    ) -> None:
        """Hang up on the next ``times`` requests matching: close the connection with
        no answer (discord.py raises ``aiohttp.ServerDisconnectedError``; aiohttp
        sends a GET, PUT or DELETE once more first, so drop those ``times=2``). ``after``:
        do the request first, so its effect stays (a message is created) and only its
        answer is lost. A request hung up on meets no ``fail_next`` rule. ``method``
        and ``path_regex`` as in ``fail_next``.
        """
        self._drops.append(_Drop(method.upper(), re.compile(path_regex), times, after))

    def hang_downloads(self, seconds: float) -> None:
        """Hold every later attachment download ``seconds`` before answering (0: answer
        at once again). A client that gives up first closes its connection; the fake
        has then recorded the download and answers no one."""
        self._download_delay = seconds

    def _scripted_drop(self, method: str, path: str) -> _Drop | None:
        for drop in self._drops:
            if drop.method in ("*", method) and drop.path.search(path):
                drop.remaining -= 1
                if drop.remaining <= 0:
                    self._drops.remove(drop)
                return drop
        return None

    def _hang_up(self, request: web.Request, recorded: Request) -> web.Response:
        self.dropped.append(recorded)
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=500)  # never written: the connection is gone

    def _scripted_failure(self, method: str, path: str) -> web.Response | None:
        for failure in self._failures:
            if failure.method in ("*", method) and failure.path.search(path):
                failure.remaining -= 1
                if failure.remaining <= 0:
                    self._failures.remove(failure)
                message, code = DEFAULT_ERRORS.get(failure.status, (f"{failure.status}", 0))
                if failure.status != 429:
                    return _response(
                        failure.status, failure.body or {"message": message, "code": code}
                    )
                body: JSON = {"message": message, "retry_after": 0.05, "global": False}
                body.update(failure.body or {})
                retry_after = float(body["retry_after"])
                headers = {
                    "Via": "1.1 google",
                    "Retry-After": str(math.ceil(retry_after)),
                    "X-RateLimit-Limit": "1",
                    "X-RateLimit-Remaining": "0",
                    "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
                    "X-RateLimit-Reset-After": f"{retry_after:.3f}",
                    "X-RateLimit-Scope": "user",
                }
                if body.get("global"):
                    headers["X-RateLimit-Global"] = "true"
                return _response(429, body, headers)
        return None

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
        guild = _Guild(guild_id, name, list(channels), dict(members))
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
                "archive_timestamp": _now(),
                "locked": False,
                "create_timestamp": _now(),
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
        ``FakeFile``); ``stickers`` (names) become ``sticker_items`` (format 1, PNG).
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
        self._interactions[token] = _Interaction(iid, channel_id, created)
        self._dispatch("INTERACTION_CREATE", payload)
        return token

    def drop_connection(self, shard: int | None = None) -> None:
        """Abort the live gateway connection of the unsharded session, or of
        ``shard``'s, with no close frame (the client sees 1006).

        The session stays: events pushed meanwhile are replayed when discord.py
        RESUMEs. Raises RuntimeError if that session has no connection up.
        """
        session = self._sessions.get(shard)
        if session is None or session.conn is None:
            raise RuntimeError(f"drop_connection: no client is connected (shard {shard})")
        conn, session.conn = session.conn, None
        conn.abort()
        self._notify()

    def invalidate_session(self, shard: int | None = None) -> None:
        """Forget the unsharded session, or ``shard``'s; its connected client gets op 9
        (``d: false``) and IDENTIFYs.

        Events kept for a RESUME are lost, as on Discord.
        """
        session = self._sessions.pop(shard, None)
        if session is not None and session.conn is not None:
            session.conn.send({"op": 9, "s": None, "t": None, "d": False})
        self._notify()

    def answer_heartbeats(self, answer: bool, *, shard: int | None = None) -> None:
        """Answer the heartbeats of the unsharded connections, or of ``shard``'s, with
        op 11 (the default), or stop answering them: a deaf connection, which
        discord.py closes only after its heartbeat timeout (60 s). The heartbeats are
        still counted in ``heartbeats``."""
        if answer:
            self._unanswered.discard(shard)
        else:
            self._unanswered.add(shard)

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

    def _guild(self, guild_id: int) -> _Guild:
        try:
            return self._guilds[guild_id]
        except KeyError:
            raise ValueError(f"unknown guild {guild_id}: call add_guild first") from None

    @staticmethod
    def _owner_id(guild: _Guild) -> int:
        return next(iter(guild.members), 1)

    def _guild_payload(self, guild: _Guild) -> JSON:
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
            "timestamp": _now(),
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
        for key, value in (("width", file.width), ("height", file.height)):
            if value is not None:
                attachment[key] = value
        return attachment

    # -- the gateway --------------------------------------------------------------------
    def _dispatch(self, t: str, d: JSON, *, state_event: bool = False) -> None:
        """Send event ``t`` to every session that holds its guild (``_Session.holds``);
        one whose connection is down keeps it for a RESUME.

        When no session holds it, an event waits for the next IDENTIFY of one that
        does, except state events (guilds, threads, member chunks): the GUILD_CREATE
        after READY carries that state anyway.
        """
        guild_id = _guild_of(t, d)
        sessions = [s for s in self._sessions.values() if s.holds(guild_id)]
        if not sessions and not state_event:
            self._pending.append((t, d))
        for session in sessions:
            self._send(session, t, d)

    def _send(self, session: _Session, t: str, d: JSON) -> None:
        """Send event ``t`` in ``session`` as its intents let it see it, logged for a
        RESUME (on its connection, if up)."""
        seen = self._as_seen(session, t, d)
        if seen is None:
            return
        session.seq += 1
        frame = json.dumps({"op": 0, "t": t, "s": session.seq, "d": seen})
        session.log.append((session.seq, frame))
        if session.conn is not None:
            session.conn.send(frame)
        self._notify()

    def _as_seen(self, session: _Session, t: str, d: JSON) -> JSON | None:
        """The event as a client with ``session.intents`` gets it; None: not at all."""
        if t != "MESSAGE_CREATE":
            return d
        in_guild = "guild_id" in d
        if not session.intents & (GUILD_MESSAGES if in_guild else DIRECT_MESSAGES):
            return None
        addressed = d["author"]["id"] == str(self.bot_id) or any(
            m["id"] == str(self.bot_id) for m in d["mentions"]
        )
        if in_guild and not addressed and not session.intents & MESSAGE_CONTENT:
            return {**d, "content": "", "embeds": [], "attachments": [], "components": []}
        return d

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        transport = request.transport
        await ws.prepare(request)
        conn = _Conn(ws, transport)
        conn.writer = asyncio.create_task(conn.write(), name="discord-fake-gateway-writer")
        self._conns.add(conn)
        conn.send(
            {
                "op": 10,
                "s": None,
                "t": None,
                "d": {"heartbeat_interval": self.heartbeat_interval_ms},
            }
        )
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    self._on_frame(conn, json.loads(msg.data))
        finally:
            self._conns.discard(conn)
            for session in self._sessions.values():
                if session.conn is conn:
                    session.conn = None
            if conn.writer is not None and not conn.writer.done():
                conn.writer.cancel()
            self._notify()
        return ws

    def _on_frame(self, conn: _Conn, frame: JSON) -> None:
        self.gateway_received.append(frame)
        op, d = frame.get("op"), frame.get("d") or {}
        if op == 1:
            self.heartbeats[conn.shard] += 1
            if conn.shard not in self._unanswered:
                conn.send({"op": 11, "s": None, "t": None, "d": None})
        elif op == 2:
            self._identify(conn, d)
        elif op == 6:
            self._resume(conn, d)
        elif op == 8:
            self._members_chunk(d)
        self._notify()

    def _identify(self, conn: _Conn, d: JSON) -> None:
        """Start a session (of the shard IDENTIFY names, or unsharded): READY, its
        guilds, and the events pushed before a session held them."""
        if d.get("token") != self.token:
            conn.close(4004)
            return
        shard = d.get("shard")
        if shard is not None and not (
            isinstance(shard, list) and len(shard) == 2 and 0 <= shard[0] < shard[1]
        ):
            conn.close(4010)  # Invalid shard
            return
        intents = int(d.get("intents", -1))
        readable = GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED
        if intents & MESSAGE_CONTENT and not self.application_flags & readable:
            conn.close(4014)  # Disallowed intent(s)
            return
        held = (int(shard[0]), int(shard[1])) if shard is not None else None
        session = _Session(uuid.uuid4().hex, intents, shard=held, conn=conn)
        conn.shard = held[0] if held else None
        self._sessions[conn.shard] = session
        self.identified.append(held)
        guilds = [g for g in self._guilds.values() if session.holds(g.id)]
        ready: JSON = {
            "v": 10,
            "user": {**self._users[self.bot_id], "verified": True, "mfa_enabled": False},
            "guilds": [{"id": str(g.id), "unavailable": True} for g in guilds],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": str(self.app_id), "flags": self.application_flags},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
            "user_settings": {},
        }
        if shard is not None:
            ready["shard"] = shard
        self._send(session, "READY", ready)
        for guild in guilds:
            self._send(
                session, "GUILD_CREATE", {**self._guild_payload(guild), "unavailable": False}
            )
        pending, self._pending = self._pending, []
        for t, data in pending:
            if session.holds(_guild_of(t, data)):
                self._send(session, t, data)
            else:
                self._pending.append((t, data))

    def _resume(self, conn: _Conn, d: JSON) -> None:
        session = next((s for s in self._sessions.values() if s.id == d.get("session_id")), None)
        if session is None or d.get("token") != self.token:
            conn.send({"op": 9, "s": None, "t": None, "d": False})
            return
        self.resume_count += 1
        if session.conn is not None and session.conn is not conn:
            session.conn.abort()
        session.conn = conn
        conn.shard = session.shard[0] if session.shard else None
        after = d.get("seq") or 0
        for seq, frame in session.log:
            if seq > after:
                conn.send(frame)
        session.seq += 1  # RESUMED has a sequence number but is not itself replayed
        conn.send({"op": 0, "t": "RESUMED", "s": session.seq, "d": {}})

    def _members_chunk(self, d: JSON) -> None:
        guild = self._guilds.get(int(d.get("guild_id", 0)))
        members = [] if guild is None else [self.bot_id, *guild.members]
        chunk = {
            "guild_id": d.get("guild_id"),
            "members": [self._member(u) for u in dict.fromkeys(members)],
            "chunk_index": 0,
            "chunk_count": 1,
            "not_found": [],
        }
        if d.get("nonce"):
            chunk["nonce"] = d["nonce"]
        self._dispatch("GUILD_MEMBERS_CHUNK", chunk, state_event=True)

    # -- attachment downloads ------------------------------------------------------------
    async def _download(self, request: web.Request) -> web.Response:
        """``GET /attachments/{channel}/{attachment}/{filename}``: the file's bytes with
        its media type, after any ``hang_downloads`` delay; unknown → 404."""
        info = request.match_info
        channel_id, aid = int(info["channel_id"]), int(info["attachment_id"])
        file = self._files.get((channel_id, aid))
        if file is not None and file.filename != info["filename"]:
            file = None
        download = Download(channel_id, aid, info["filename"], file is not None, time.monotonic())
        self.downloads.append(download)
        self._notify()
        if self._download_delay:
            await asyncio.sleep(self._download_delay)
        if file is None:
            return web.Response(status=404, text="404: Not Found")
        return web.Response(body=file.data, headers={"Content-Type": file.content_type})

    # -- REST ----------------------------------------------------------------------------
    async def _rest(self, request: web.Request) -> web.Response:
        path = request.path.removeprefix(API_PREFIX)
        body, files = await self._read_body(request)
        names = tuple(f.filename for f in files)
        recorded = Request(
            request.method, path, body, time.monotonic(), dict(request.query), names, files
        )
        self.requests.append(recorded)
        self._notify()
        try:
            drop = self._scripted_drop(request.method, path)
            if drop is not None and not drop.after:
                return self._hang_up(request, recorded)
            response = await self._route(request, path, body, files, scripted=drop is None)
            return response if drop is None else self._hang_up(request, recorded)
        finally:
            self._notify()

    @staticmethod
    async def _read_body(request: web.Request) -> tuple[Any, tuple[Upload, ...]]:
        if not request.can_read_body:
            return None, ()
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            files = tuple(
                Upload(k, v.filename, v.content_type, v.file.read())
                for k, v in form.items()
                if isinstance(v, web.FileField)
            )
            raw = form.get("payload_json")
            return (json.loads(raw) if isinstance(raw, str) else None), files
        text = await request.text()
        try:
            return (json.loads(text) if text else None), ()
        except ValueError:
            return None, ()

    async def _route(
        self,
        request: web.Request,
        path: str,
        body: Any,
        files: tuple[Upload, ...],
        *,
        scripted: bool,
    ) -> web.Response:
        token_in_path = path.startswith(("/interactions/", "/webhooks/"))
        if not token_in_path and request.headers.get("Authorization") != f"Bot {self.token}":
            return _error(401, "401: Unauthorized", 0)
        failure = self._scripted_failure(request.method, path) if scripted else None
        if failure is not None:
            return failure
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(path)
            if match and method == request.method:
                return await handler(request, match, body, files)
        return _error(404, "404: Not Found", 0)

    async def _get_me(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        return _response(200, {**self._users[self.bot_id], "verified": True, "mfa_enabled": False})

    async def _get_application(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        owner = self._user(1, "owner")
        return _response(
            200,
            {
                "id": str(self.app_id),
                "name": self.bot_name,
                "description": "",
                "icon": None,
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": owner,
                "team": None,
                "verify_key": "0" * 64,
                "flags": self.application_flags,
                "summary": "",
                "bot": self._users[self.bot_id],
                "interactions_endpoint_url": None,
                "redirect_uris": [],
                "tags": [],
            },
        )

    async def _get_gateway(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        data: JSON = {"url": self.gateway_url}
        if m.group(1):
            data["shards"] = self.recommended_shards
            data["session_start_limit"] = {
                "total": 1000,
                "remaining": 1000,
                "reset_after": 0,
                "max_concurrency": 1,
            }
        return _response(200, data)

    async def _create_dm(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        if not isinstance(body, dict) or "recipient_id" not in body:
            return _form_error("recipient_id", "BASE_TYPE_REQUIRED", "This field is required")
        return _response(200, self._dm_channel(int(body["recipient_id"])))

    async def _get_channel(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        channel = self._channels.get(int(m.group(1)))
        if channel is None:
            return _error(404, "Unknown Channel", 10003)
        return _response(200, channel)

    async def _get_message(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        msg = self._messages.get(int(m.group(2)))
        if msg is None or msg["channel_id"] != m.group(1):
            return _error(404, "Unknown Message", 10008)
        return _response(200, msg)

    async def _edit_message(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        """Edit one of the bot's messages (content, embeds, components; its attachments
        stay); an edit that leaves it empty → 400/50006. Recorded in ``edits``."""
        channel_id, message_id = int(m.group(1)), int(m.group(2))
        if channel_id not in self._channels:
            return _error(404, "Unknown Channel", 10003)
        msg = self._messages.get(message_id)
        if msg is None or msg["channel_id"] != m.group(1):
            return _error(404, "Unknown Message", 10008)
        if msg["author"]["id"] != str(self.bot_id):
            return _error(403, "Cannot edit a message authored by another user", 50005)
        if not isinstance(body, dict):
            body = {}
        if len(body.get("content") or "") > MAX_CONTENT:
            return _too_long()
        content, embeds = (body[k] if k in body else msg[k] for k in ("content", "embeds"))
        if not (content or embeds or msg["attachments"]):
            return _error(400, "Cannot send an empty message", 50006)
        self._apply_edit(msg, body)
        self.edits.append(Edit(channel_id, message_id, msg["content"], body, time.monotonic()))
        return _response(200, msg)

    async def _delete_message(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        """Delete one of the bot's messages (204); another user's → 403: 50013, as
        for a bot without Manage Messages, or 50003 in a DM, where no one can delete
        it. The message is forgotten by every route and recorded in ``deleted``."""
        channel_id, message_id = int(m.group(1)), int(m.group(2))
        channel = self._channels.get(channel_id)
        if channel is None:
            return _error(404, "Unknown Channel", 10003)
        msg = self._messages.get(message_id)
        if msg is None or msg["channel_id"] != m.group(1):
            return _error(404, "Unknown Message", 10008)
        if msg["author"]["id"] != str(self.bot_id):
            if channel["type"] == 1:
                return _error(403, "Cannot execute action on a DM channel", 50003)
            return _error(403, "Missing Permissions", 50013)
        del self._messages[message_id]
        self.deleted.append(Deletion(channel_id, message_id, time.monotonic()))
        return _response(204)

    @staticmethod
    def _apply_edit(msg: JSON, body: JSON) -> None:
        """Set what an edit's ``body`` gives (null clears it) and ``edited_timestamp``."""
        for key, empty in (("content", ""), ("embeds", []), ("components", [])):
            if key in body:
                msg[key] = empty if body[key] is None else body[key]
        msg["edited_timestamp"] = _now()

    async def _trigger_typing(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        channel_id = int(m.group(1))
        if channel_id not in self._channels:
            return _error(404, "Unknown Channel", 10003)
        self.typing.append(channel_id)
        return _response(204)

    def _check_content(self, body: Any, files: tuple[Upload, ...]) -> web.Response | None:
        """The 400 (or 413) Discord gives for a message body, or None if it is fine."""
        if any(len(f.data) > self.max_upload_bytes for f in files):
            return _error(413, "Request entity too large", 40005)
        if not isinstance(body, dict):
            return _form_error("content", "BASE_TYPE_REQUIRED", "This field is required")
        content = body.get("content") or ""
        if len(content) > MAX_CONTENT:
            return _too_long()
        if not (
            content or body.get("embeds") or files or body.get("sticker_ids") or body.get("poll")
        ):
            return _error(400, "Cannot send an empty message", 50006)
        return None

    def _bot_message(self, channel_id: int, body: JSON, files: tuple[Upload, ...]) -> JSON:
        msg = self._message(
            self._next_id(), channel_id, body.get("content") or "", self._users[self.bot_id]
        )
        msg["embeds"] = body.get("embeds") or []
        msg["flags"] = int(body.get("flags") or 0)
        named = {
            str(a.get("id")): a.get("filename")
            for a in body.get("attachments") or []
            if isinstance(a, dict)
        }
        msg["attachments"] = [
            self._attachment(
                channel_id,
                FakeFile(named.get(str(u.index)) or u.filename, u.data, u.content_type),
            )
            for u in files
        ]
        self._messages[int(msg["id"])] = msg
        return msg

    async def _create_message(
        self, request: web.Request, m: re.Match[str], body: Any, files: tuple[Upload, ...]
    ) -> web.Response:
        channel_id = int(m.group(1))
        if channel_id not in self._channels:
            return _error(404, "Unknown Channel", 10003)
        problem = self._check_content(body, files)
        if problem is not None:
            return problem
        nonce = str(body["nonce"]) if body.get("enforce_nonce") and body.get("nonce") else None
        if nonce is not None and nonce in self._nonces:
            return _response(200, self._nonces[nonce])
        ref = body.get("message_reference")
        referenced = None
        if ref and ref.get("message_id"):
            referenced = self._messages.get(int(ref["message_id"]))
            if referenced is None and ref.get("fail_if_not_exists", True):
                return _form_error(
                    "message_reference", "REPLIES_UNKNOWN_MESSAGE", "Unknown message"
                )
        msg = self._bot_message(channel_id, body, files)
        if ref and ref.get("message_id"):
            msg["type"] = 19
            msg["message_reference"] = {
                "type": ref.get("type", 0),
                "message_id": str(ref["message_id"]),
                "channel_id": str(ref.get("channel_id") or channel_id),
                **({"guild_id": str(ref["guild_id"])} if ref.get("guild_id") else {}),
            }
            msg["referenced_message"] = referenced
        if body.get("nonce"):
            msg["nonce"] = str(body["nonce"])
        if nonce is not None:
            self._nonces[nonce] = msg
        self._sent.append(Sent(channel_id, int(msg["id"]), msg["content"], body, files))
        return _response(200, msg)

    async def _get_commands(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        scope = self._command_scope(m)
        if isinstance(scope, web.Response):
            return scope
        return _response(200, self.commands.get(scope, []))

    async def _put_commands(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        scope = self._command_scope(m)
        if isinstance(scope, web.Response):
            return scope
        if not isinstance(body, list):
            return _form_error("_", "LIST_TYPE_CONVERT", "Must be a list.")
        ids = {c["name"]: c["id"] for c in self.commands.get(scope, [])}
        registered = []
        for command in body:
            entry = {
                "type": 1,
                "description": "",
                "options": [],
                "default_member_permissions": None,
                "dm_permission": True,
                "nsfw": False,
                **command,
                "id": ids.get(command.get("name")) or str(self._next_id()),
                "application_id": str(self.app_id),
                "version": str(self._next_id()),
            }
            if scope is not None:
                entry["guild_id"] = str(scope)
            registered.append(entry)
        self.commands[scope] = registered
        return _response(200, registered)

    def _command_scope(self, m: re.Match[str]) -> int | web.Response | None:
        """The guild id of a commands path (None: global), or the 403 Discord gives."""
        guild_id = int(m.group(2)) if m.group(2) else None
        if int(m.group(1)) != self.app_id or (
            guild_id is not None and guild_id not in self._guilds
        ):
            return _error(403, "Missing Access", 50001)
        return guild_id

    def _webhook_interaction(self, m: re.Match[str]) -> _Interaction | web.Response | None:
        """The interaction of a ``/webhooks/{app}/{token}`` path, None if unknown, or
        the 401 Discord gives once its token has expired."""
        it = self._interactions.get(m.group(2)) if int(m.group(1)) == self.app_id else None
        if it is not None and time.time() >= it.created + INTERACTION_TTL_S:
            return _error(401, "Invalid Webhook Token", 50027)
        return it

    async def _callback(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        token = m.group(2)
        it = self._interactions.get(token)
        if it is None or it.id != int(m.group(1)):
            return _error(404, "Unknown interaction", 10062)
        if it.acked:
            return _error(400, "Interaction has already been acknowledged.", 40060)
        if not isinstance(body, dict) or "type" not in body:
            return _form_error("type", "BASE_TYPE_REQUIRED", "This field is required")
        rtype, data = int(body["type"]), body.get("data") or {}
        if rtype == 4:
            problem = self._check_content(data, files)
            if problem is not None:
                return problem
        it.acked = True
        if rtype in (4, 5):
            it.original = self._bot_message(it.channel_id, data if rtype == 4 else {}, files)
            it.original["webhook_id"] = str(self.app_id)
            if rtype == 5:
                it.original["flags"] |= 128 | int(data.get("flags") or 0)  # LOADING
        self.interaction_replies.append(
            InteractionReply("callback", token, body, data.get("content"), rtype)
        )
        if request.query.get("with_response") not in ("1", "true", "True"):
            return _response(204)
        flags = int(data.get("flags") or 0)
        answer: JSON = {
            "interaction": {
                "id": str(it.id),
                "type": 2,
                "response_message_loading": rtype == 5,
                "response_message_ephemeral": bool(flags & 64),
            },
            "resource": {"type": rtype},
        }
        if it.original is not None:
            answer["interaction"]["response_message_id"] = it.original["id"]
            answer["resource"]["message"] = it.original
        return _response(200, answer)

    async def _followup(
        self, request: web.Request, m: re.Match[str], body: Any, files: tuple[Upload, ...]
    ) -> web.Response:
        token = m.group(2)
        it = self._webhook_interaction(m)
        if isinstance(it, web.Response):
            return it
        if it is None or not it.acked:
            return _error(404, "Unknown Webhook", 10015)
        problem = self._check_content(body, files)
        if problem is not None:
            return problem
        msg = self._bot_message(it.channel_id, body, files)
        msg["webhook_id"] = str(self.app_id)
        self.interaction_replies.append(
            InteractionReply("followup", token, body, body.get("content"), files=files)
        )
        if request.query.get("wait") not in ("1", "true", "True"):
            return _response(204)
        return _response(200, msg)

    def _reply_message(self, m: re.Match[str]) -> JSON | web.Response | None:
        it = self._webhook_interaction(m)
        if it is None or isinstance(it, web.Response):
            return it
        if m.group(3) == "@original":
            return it.original
        return self._messages.get(int(m.group(3)))

    async def _get_reply(
        self, request: web.Request, m: re.Match[str], body: Any, files: Any
    ) -> web.Response:
        msg = self._reply_message(m)
        if isinstance(msg, web.Response):
            return msg
        if msg is None:
            return _error(404, "Unknown Message", 10008)
        return _response(200, msg)

    async def _edit_reply(
        self, request: web.Request, m: re.Match[str], body: Any, files: tuple[Upload, ...]
    ) -> web.Response:
        msg = self._reply_message(m)
        if isinstance(msg, web.Response):
            return msg
        if msg is None:
            return _error(404, "Unknown Message", 10008)
        if not isinstance(body, dict):
            body = {}
        content = body.get("content")
        if len(content or "") > MAX_CONTENT:
            return _too_long()
        self._apply_edit(msg, body)
        msg["flags"] &= ~128  # no longer LOADING
        self.interaction_replies.append(InteractionReply("edit", m.group(2), body, content))
        return _response(200, msg)
