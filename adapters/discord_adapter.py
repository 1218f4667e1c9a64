"""Discord, through discord.py, with the message content intent.

What arrives: every message in DMs, guild channels and threads from a person,
addressed to the bot or not (the router keeps unaddressed group messages as the
channel's context and gates itself); other bots and the bot itself are ignored,
and so are system messages such as pins and joins. `mentions_bot` is a mention
of the bot (removed from the text), `reply_to_bot` a reply to one of its
messages. A thread is a session of its own (`chat_id` is its parent channel,
`thread_id` the thread). The same words as the slash commands work after
`command_prefix` (`!soul reload`).

What a message carries (adapters/discord_media.py): image attachments (PNG,
JPEG, GIF, WebP by `content_type`, or by file name when Discord gives none)
become `images`, `Media` with their declared sizes, that the core downloads
(`Attachment.read`) only for a message it answers, and holds to
`media.max_images` and to the size the model takes. A voice message (flag
1 << 13, its recording an audio/ogg attachment with `duration_secs`) and audio
attachments become `audio`, `Audio` downloaded from their CDN URL when the core
hears them, no further than its byte cap. Other attachments (video, files) are
not read: a message with nothing else (no text, image or audio) is
`media=True`, which the router answers with its one line. A sticker is text,
`[sticker: <name>]`. A reply carries `reply_to_id`, and `quote` when Discord
resolved the message it replies to (its author's display name, its whole text
or `[image]`, `[file]`, `[sticker: <name>]` when it has none, whether it is the
bot's); a deleted or unresolved one gives no quote (the core finds the id in
what the bot sent).

Replies are split at 2,000 characters; the first chunk replies to the message
that started the turn, and `send` returns the ids of the messages it made (the
channel's, a DM's, or an ephemeral follow-up's). With `streaming` on (the
default), `stream` posts a reply as soon as it has text and edits it as it
grows, at most once a second (adapters/stream.py's `EditedReply`, split at
2,000 with code fences closed in every chunk): the first message replies to the
message the turn answers, as `send`'s would, and every post, edit and delete is
tried again like a send; an edit of a message a moderator deleted (404, Unknown
Message) is `MessageGone`, and the answer is posted anew. A slash command's
answer (and a reply with a file) is never streamed: it stays an ephemeral
follow-up sent whole. `notes` has nothing to say: Discord has no privacy mode,
and the message content intent is checked at start. An attachment rides on the
last chunk (alone when there is no text) as a `discord.File`: a multipart
upload, made afresh for each try. A voice note goes after the text as a voice
message (adapters/discord_voice.py: discord.py cannot send one itself), or as
an audio file where the channel refuses voice messages; in a slash command's
private answer, as an audio file.
discord.py waits out 429s and tries 500, 502, 504 and 524 five times itself (1
s, 3 s, 5 s, ...); what it raises at once, a 503 or another 5xx, a lost
connection (`aiohttp.ClientError`; its own retry of a reset connection knows
only the BSD and Windows errno, not Linux's) or a timeout, is tried again here
with backoff (adapters/retry.py); a chunk that still fails raises `SendFailed`,
which says how many chunks were not delivered. Each chunk keeps one `nonce`
across its tries, with `enforce_nonce` (discord.py sets it), so a message
Discord made whose answer was lost is returned, not made twice. Replies never
ping @everyone, @here or roles, whatever the model writes. The slash commands
(adapters/discord_commands.py) are app commands synced at start, answered only
to the person who asked. A lost gateway connection is resumed or re-established
by discord.py. Messages and slash commands that come after the gateway's READY
but before the start is done (the wait for the guilds) are held and delivered in
order when it is, not dropped.

HTTP connections: discord.py's own connector has no limit, so a burst of
replies in many channels opened a connection for each (a TLS handshake each at
Discord, and a file descriptor each against the process's limit); the client
keeps at most `HTTP_CONNECTIONS` open to one host and reuses them, and a
request beyond them waits for one to be free. The gateway's host is another, so
the shards' websockets never wait for REST.

Shards (`shard_count`, `shard_ids`; adapters/discord_shards.py): one gateway
connection per shard held, the process holding shard 0 answering DMs and syncing
the slash commands. Start is done when every shard held is ready.

Liveness (`last_seen`, adapters/discord_shards.py): the time anything last came
over the gateway, on the quietest connection held; before that, the time READY
came. `connected` is started, not stopped, and the client not closed.

`api_base_url` and `gateway_url` point discord.py elsewhere (a REST proxy, the
tests' fake): discord.py has no option for it, so they are set on its
`Route.BASE` and `DiscordWebSocket.DEFAULT_GATEWAY` class attributes, which
makes them process-wide: one Discord adapter per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import aiohttp
import discord
import structlog
import yarl
from discord import app_commands

from adapters import discord_media
from adapters.base import Deliver, repeating
from adapters.discord_commands import Asked, SlashCommands
from adapters.discord_shards import (
    IDENTIFY_PAUSE_S,
    ShardedClient,
    held_shards,
    last_seen,
    syncs_commands,
)
from adapters.discord_voice import FILE_FILENAME, send_voice
from adapters.retry import BACKOFF, Backoff, SendFailed, retried, send_chunks
from adapters.split import split_message
from adapters.stream import EVERY_S, EditedReply, MessageGone
from bot.types import AdapterStartError, Attachment, Inbound, Outbound, ReplyStream

log = structlog.get_logger(__name__)

T = TypeVar("T")

LIMIT = 2000
TYPING_EVERY_S = 8.0  # Discord shows typing for 10 s
UNKNOWN_MESSAGE = 10008  # the error code of an edit or fetch of a deleted message
READY_TIMEOUT_S = 30.0  # and IDENTIFY_PAUSE_S more for each shard after the first
# Connections open at once to one host (the REST API, the CDN): Discord takes 50 requests a
# second from a bot, so more would only wait; beyond them a request waits for a free one.
HTTP_CONNECTIONS = 50
_SAFE_MENTIONS = discord.AllowedMentions(everyone=False, roles=False, users=False,
                                         replied_user=True)  # fmt: skip
_MESSAGE_TYPES = (discord.MessageType.default, discord.MessageType.reply)
_RETRIED_BY_DISCORD_PY = frozenset({500, 502, 504, 524})  # five tries already, in http.py


class DiscordAdapter:
    """A Discord bot: one gateway connection, or the shards `shard_ids` of
    `shard_count` (all of them when `shard_ids` is None).

    Raises ValueError for `shard_ids` without `shard_count`, empty, or with one
    not below it.
    """

    name = "discord"

    def __init__(
        self,
        token: str,
        *,
        command_prefix: str = "!",
        commands: Sequence[tuple[str, str]] = (),
        api_base_url: str | None = None,
        gateway_url: str | None = None,
        guild_ready_timeout: float = 2.0,
        backoff: Backoff = BACKOFF,
        streaming: bool = True,
        shard_count: int | None = None,
        shard_ids: Sequence[int] | None = None,
        identify_pause_s: float = IDENTIFY_PAUSE_S,
    ) -> None:
        self._shards = held_shards(shard_count, shard_ids)  # None: unsharded
        self._shard_count = shard_count
        self._identify_pause_s = identify_pause_s
        self._token = token
        self._streaming = streaming
        self._backoff = backoff
        self._voice_refused: set[int] = set()  # channels logged as refusing voice messages
        self._guild_ready_timeout = guild_ready_timeout
        self._prefix = command_prefix
        self._commands = commands
        self._api_base_url = api_base_url
        self._gateway_url = gateway_url
        self._client: discord.Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._deliver: Deliver | None = None
        self._open = False
        # Set when start() is done (or at stop): messages that come between the gateway's
        # READY and then wait for it, in the order they came, instead of being dropped.
        self._admitted = asyncio.Event()
        self._held = 0
        self._slash = SlashCommands(commands, intake=self._intake, admit=self._admit,
                                    adapter=self.name)  # fmt: skip
        self._ready_at: float | None = None  # when the gateway's READY came (time.time())

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self, deliver: Deliver) -> None:
        if self._api_base_url:
            discord.http.Route.BASE = self._api_base_url.rstrip("/")
        if self._gateway_url:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self._gateway_url)
        client = self._new_client()
        tree = app_commands.CommandTree(client)
        self._slash.register(tree)
        client.event(self.on_message)
        self._client, self._deliver = client, deliver
        try:
            await client.login(self._token)
        except discord.LoginFailure:
            await client.close()
            raise AdapterStartError(
                "discord: the bot token was rejected: check adapters.discord.token "
                "(Developer Portal > Bot > Reset Token)"
            ) from None
        except (discord.HTTPException, OSError) as exc:
            await client.close()
            raise AdapterStartError(f"discord: cannot reach the API: {exc}") from None
        syncs = syncs_commands(self._shards)
        if self._shards is not None:
            log.info("discord.shards", held=list(self._shards), count=self._shard_count,
                     syncs_commands=syncs)  # fmt: skip
        self._task = asyncio.create_task(client.connect(reconnect=True), name="discord-gateway")
        await self._wait_ready(client)
        self._ready_at = time.time()
        self._open = True
        self._admitted.set()
        if self._held:
            log.info("discord.held_delivered", events=self._held)
        if not syncs:  # the process holding shard 0 does (app commands are global)
            return
        try:
            synced = await tree.sync()
            log.info("discord.commands_synced", commands=[c.name for c in synced])
        except discord.HTTPException as exc:
            log.warning("adapter.error", adapter=self.name, stage="sync_commands", error=str(exc))

    def _new_client(self) -> discord.Client:
        """An unsharded client, or a sharded one holding this process's shards; its
        HTTP connections at most `HTTP_CONNECTIONS` to a host (discord.py's own
        connector has no limit: a burst of replies opened one connection each)."""
        intents = discord.Intents.default()
        intents.message_content = True
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=HTTP_CONNECTIONS)
        options: dict[str, Any] = {
            "intents": intents, "allowed_mentions": _SAFE_MENTIONS, "connector": connector,
            "guild_ready_timeout": self._guild_ready_timeout,
        }  # fmt: skip
        if self._shards is None:
            return discord.Client(**options)
        return ShardedClient(identify_pause_s=self._identify_pause_s,
                             shard_count=self._shard_count, shard_ids=list(self._shards),
                             **options)  # fmt: skip

    async def _wait_ready(self, client: discord.Client) -> None:
        """Until the client is ready: every shard it holds has had its READY and its
        guilds (discord.py's `on_ready` comes once, for all of them)."""
        assert self._task is not None
        shards = len(self._shards) if self._shards is not None else 1
        waited = READY_TIMEOUT_S + self._identify_pause_s * (shards - 1)
        ready = asyncio.create_task(client.wait_until_ready())
        await asyncio.wait({ready, self._task}, timeout=waited,
                           return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        ready.cancel()
        if self._task.done():
            error = self._task.exception()
            await client.close()
            if isinstance(error, discord.PrivilegedIntentsRequired):
                raise AdapterStartError(
                    "discord: the message content intent is off: turn on 'Message Content "
                    "Intent' in the Developer Portal (Bot page) and start again"
                )
            raise AdapterStartError(f"discord: the gateway connection ended: {error!r}")
        if not client.is_ready():
            log.warning("discord.not_ready", waited_s=waited,
                        note="still connecting in the background")  # fmt: skip

    async def stop(self) -> None:
        self._open = False
        self._admitted.set()  # anything still held is dropped: the intake is over

    async def close(self) -> None:
        self._open = False
        self._admitted.set()
        client, self._client = self._client, None
        self._slash.close()
        if client is not None:
            await client.close()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def connected(self) -> bool:
        """Started, not stopped, the client not closed (it may be reconnecting)."""
        client = self._client
        return self._open and client is not None and not client.is_closed()

    def last_seen(self) -> float | None:
        """When the gateway last sent anything (a heartbeat answer, an event) on
        its quietest connection (of each shard held), else when READY came (also
        while a connection is down); None before then."""
        return last_seen(self._client, self._shards, self._ready_at)

    # -- inbound ------------------------------------------------------------------------

    def _intake(self) -> Deliver | None:
        """Where a slash command goes: the core's deliver; None before start and
        once stopped."""
        if self._admitted.is_set() and not self._open:
            return None
        return self._deliver

    async def _admit(self) -> bool:
        """Wait until start() is done (an event from before then is held, not
        dropped; waiters resume in the order they came); False once stopped."""
        if not self._admitted.is_set():
            self._held += 1
            await self._admitted.wait()
        return self._open

    async def on_message(self, message: discord.Message) -> None:
        if message.type not in _MESSAGE_TYPES or not await self._admit():
            return
        client = self._client
        if client is None or self._deliver is None or client.user is None:
            return
        if message.author.id == client.user.id:
            return  # our own: never answered (another bot's: the router's `respond_to_bots`)
        try:
            inbound = self._inbound(message, client.user)
            if inbound.text.strip() or inbound.images or inbound.audio or inbound.media:
                await self._deliver(inbound)  # addressed or not: the router gates it
        except Exception as exc:  # one message never stops the client
            log.error("adapter.error", adapter=self.name, stage="message",
                      error=f"{type(exc).__name__}: {exc}")  # fmt: skip

    def _inbound(self, message: discord.Message, me: discord.ClientUser) -> Inbound:
        mentioned = me in message.mentions
        text = (
            re.sub(rf"<@!?{me.id}>", "", message.content).strip() if mentioned else message.content
        )
        if text.startswith(self._prefix) and self._is_command(text[len(self._prefix) :]):
            text = "/" + text[len(self._prefix) :]
        if message.stickers:
            text = " ".join([text, *discord_media.sticker_tags(message)]).strip()
        images = discord_media.images(message.attachments)
        audio = discord_media.audio(message)
        others = any(
            discord_media.image_type(a) is None and not discord_media.is_audio(a)
            for a in message.attachments
        )
        quote = discord_media.quote(message, me)
        reference = message.reference
        channel = message.channel
        in_thread = isinstance(channel, discord.Thread)
        return Inbound(
            platform=self.name,
            chat_id=str(channel.parent_id if isinstance(channel, discord.Thread) else channel.id),
            user_id=str(message.author.id),
            user_name=message.author.display_name,
            text=text,
            is_dm=message.guild is None,
            mentions_bot=mentioned,
            reply_to_bot=quote is not None and quote.from_bot,
            message_id=str(message.id),
            thread_id=str(channel.id) if in_thread else None,
            guild_id=str(message.guild.id) if message.guild else None,
            ts=message.created_at.timestamp(),
            private_thread=in_thread and channel.type == discord.ChannelType.private_thread,
            media=others and not text.strip() and not images and not audio,
            quote=quote,
            reply_to_id=str(reference.message_id) if reference and reference.message_id else None,
            images=images,
            audio=audio,
            from_bot=message.author.bot,
        )

    def _is_command(self, rest: str) -> bool:
        word = rest.split(maxsplit=1)[0].lower() if rest.strip() else ""
        return word in {name for name, _ in self._commands}

    # -- outbound -----------------------------------------------------------------------

    def typing(self, chat: Inbound) -> AbstractAsyncContextManager[None]:
        client = self._client
        if client is None:
            return contextlib.nullcontext()
        channel = client.get_partial_messageable(int(chat.thread_id or chat.chat_id))
        return repeating(lambda: client.http.send_typing(channel.id), TYPING_EVERY_S)

    async def send(self, message: Outbound) -> list[str]:
        client = self._client
        if client is None:
            raise RuntimeError("the Discord adapter is not started")
        chunks = split_message(message.text, LIMIT)
        file = message.attachment
        asked = Asked.parse(message.reply_to)
        if asked is not None and message.voice is not None:  # a follow-up takes no voice message
            file = file or Attachment(FILE_FILENAME, message.voice.data, "audio/ogg")
        if file is not None and not chunks:
            chunks = [""]
        if asked is not None:
            return await self._answer_privately(client, asked, chunks, file)
        channel = client.get_partial_messageable(int(message.thread_id or message.chat_id))
        reference: Any = _reference(message, channel.id)  # None: no reference (typed MISSING)
        ids: list[str] = []
        left = len(chunks)

        async def send_one(chunk: str) -> None:
            nonlocal reference, left
            left -= 1
            nonce = secrets.randbits(63)  # the same for each try of this chunk
            extra = _with_file(left == 0, file)
            sent = await self._retried(lambda: channel.send(
                chunk or None, reference=reference, nonce=nonce, **extra()
            ))  # fmt: skip
            ids.append(str(sent.id))
            reference = None

        await send_chunks(chunks, send_one)
        if message.voice is not None:
            try:
                ids.append(await send_voice(client, channel, message.voice, reference,
                                            self._retried, self._voice_refused))  # fmt: skip
            except Exception as exc:
                raise SendFailed(1, len(chunks) + 1, exc) from exc
        return ids

    async def _answer_privately(
        self, client: discord.Client, asked: Asked, chunks: list[str], file: Attachment | None
    ) -> list[str]:
        """A reply to a slash command, for the person who asked only: ephemeral
        follow-ups while the interaction lives, else their DM."""
        ids: list[str] = []
        left = len(chunks)
        followup = self._slash.answering(asked)
        if followup is not None:

            async def follow_up(chunk: str) -> None:
                nonlocal left
                left -= 1
                extra = _with_file(left == 0, file)
                sent = await self._retried(
                    lambda: followup.send(chunk, ephemeral=True, wait=True, **extra())
                )
                ids.append(str(sent.id))

            await send_chunks(chunks, follow_up)
            return ids
        log.info("discord.interaction_expired", user_id=str(asked.user_id))
        dm = await self._retried(lambda: client.create_dm(discord.Object(asked.user_id)))

        async def send_one(chunk: str) -> None:
            nonlocal left
            left -= 1
            nonce = secrets.randbits(63)
            extra = _with_file(left == 0, file)
            sent = await self._retried(lambda: dm.send(chunk or None, nonce=nonce, **extra()))
            ids.append(str(sent.id))

        await send_chunks(chunks, send_one)
        return ids

    def stream(self, message: Outbound) -> ReplyStream | None:
        """A reply posted early and edited (at most once a second), or None when
        streaming is off, for a slash command's answer (sent whole, privately)
        and for a reply that carries a file."""
        client = self._client
        if (not self._streaming or client is None or message.attachment is not None
                or Asked.parse(message.reply_to) is not None):  # fmt: skip
            return None
        channel = client.get_partial_messageable(int(message.thread_id or message.chat_id))
        editable = _Edited(channel, _reference(message, channel.id), self._retried)
        return EditedReply(editable, limit=LIMIT, every_s=EVERY_S, adapter=self.name)

    def notes(self) -> list[str]:
        """Nothing to say: Discord has no privacy mode, and the message content
        intent is checked at start (a start without it fails)."""
        return []

    async def _retried(self, call: Callable[[], Awaitable[T]]) -> T:
        return await retried(call, transient=_transient, backoff=self._backoff, adapter=self.name)


class _Edited:
    """The `Editable` of a streamed reply in one channel (adapters/stream.py):
    each call through the adapter's retries."""

    def __init__(
        self,
        channel: discord.PartialMessageable,
        reference: discord.MessageReference | None,
        retried: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]],
    ) -> None:
        self._channel = channel
        self._reference = reference
        self._retried = retried

    async def post(self, text: str, first: bool) -> str:
        nonce = secrets.randbits(63)  # the same for each try, as in send
        reference: Any = self._reference if first else None  # None: none (typed MISSING)
        sent = await self._retried(lambda: self._channel.send(
            text, reference=reference, nonce=nonce, allowed_mentions=_SAFE_MENTIONS
        ))  # fmt: skip
        return str(sent.id)

    async def edit(self, message_id: str, text: str) -> None:
        partial = self._channel.get_partial_message(int(message_id))
        try:
            await self._retried(lambda: partial.edit(content=text, allowed_mentions=_SAFE_MENTIONS))
        except discord.NotFound as exc:
            if exc.code == UNKNOWN_MESSAGE:  # a moderator deleted it
                raise MessageGone(str(exc)) from exc
            raise

    async def delete(self, message_id: str) -> None:
        try:
            await self._retried(self._channel.get_partial_message(int(message_id)).delete)
        except discord.NotFound:  # gone already (a try whose answer was lost deleted it)
            return


def _reference(message: Outbound, channel_id: int) -> discord.MessageReference | None:
    """The reference of a reply's first message: to the message it answers."""
    if not (message.reply_to and message.reply_to.isdigit()):
        return None
    return discord.MessageReference(
        message_id=int(message.reply_to), channel_id=channel_id, fail_if_not_exists=False
    )


def _with_file(last: bool, file: Attachment | None) -> Callable[[], dict[str, Any]]:
    """The keyword arguments of a send that carry `file` (on the `last` chunk
    only), made afresh by each call: a `discord.File` is read by its upload."""
    if not last or file is None:
        return dict
    return lambda: {"file": discord.File(io.BytesIO(file.data), filename=file.filename)}


def _transient(error: BaseException) -> bool:
    """Worth another try: a 5xx that discord.py did not already try five times,
    a lost connection, a timeout."""
    if isinstance(error, discord.DiscordServerError):
        return error.status not in _RETRIED_BY_DISCORD_PY
    return isinstance(error, aiohttp.ClientError | TimeoutError)
