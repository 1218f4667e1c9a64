"""Telegram, through python-telegram-bot: long polling inside our event loop, or a
webhook (`Webhook`: Telegram posts each update to a URL of ours).

What arrives: new messages only (`allowed_updates=["message"]`): edits,
channel posts and service messages (members joining, pins, ...) are ignored.
Every message of a DM or a group becomes an `Inbound`, addressed or not (the
router keeps unaddressed group messages as the chat's context and decides
what to answer): a text; a caption, which is the text of a photo or a file;
a sticker, whose emoji is its text ("[sticker]" without one). In a group,
`mentions_bot` is an @username mention of the bot in the text or the caption
(removed from it) or a `/command@bot`, `reply_to_bot` a reply to one of its
messages. A command addressed to another bot (`/help@other_bot`) is ignored.
A forum topic is a session of its own (`thread_id` is the topic).

Media (adapters/telegram_media.py): a photo is one `Media` ("photo",
image/jpeg) in the largest size Telegram announces at most `IMAGE_BYTES`
(bot/types.py; when none fits, the smallest, which the core refuses by its
size); a PNG, JPEG, GIF or WebP sent as a file is a `Media` ("image"). The
core holds images to the size the model takes. Nothing is downloaded until the
core calls `fetch` (getFile, then the file from `base_file_url`). A voice
note, video, audio, animation or other file sets `media` (the router answers
it with one line). A reply to a message (not the forum topic's first
message, which every message of a topic "replies" to) carries `reply_to_id`
and a `Quote`: the parent's sender, the part quoted when the person picked
one, else the parent's text or caption, else "[photo]", "[sticker 😀]" or
"[file]"; not cut (the core cuts it).

Privacy mode: getMe's `can_read_all_group_messages` false means Telegram
delivers only commands, mentions and replies from groups; the adapter then
logs `telegram.privacy_mode` once at start with what to do, and `notes()`
says it for `/soul status`. `privacy_mode_on` asks getMe once, for
`soulbot check`.

Replies are split at 4,096 UTF-16 code units, formatted as Telegram HTML, and
sent again as plain text when Telegram refuses the entities; the first chunk
replies to the message that started the turn. An attachment goes after the
text as a document (`sendDocument`, multipart), replying to that message when
there was no text. `send` returns the ids of the messages sent. `RetryAfter`
(flood control) is
waited out by PTB's AIORateLimiter, which also keeps under Telegram's rates. A
chunk that meets a network error (`NetworkError`, `TimedOut`: a lost
connection, a timeout, a 5xx; not `BadRequest`) is tried again with backoff
(adapters/retry.py); one that still fails raises `SendFailed`, which says how
many chunks were not delivered. A chunk whose answer was lost after Telegram
took it may arrive twice: the Bot API has no idempotency key.
`typing` sends the typing action every 4.5 s while a turn runs (Telegram shows
it for 5 s). The command menu is set with `setMyCommands` on start.

Streaming (`streaming=True`, adapters/stream.py), at most one show a second:
in a private chat (a positive chat id: Telegram's users and private chats
have positive ids, groups and channels negative ones) the text so far is a
draft (`sendMessageDraft`, one random draft id per reply, the last chunk of
what is written so far), and `finish` sends the reply as `send` does, so the
chat ends with exactly the messages it would have had without streaming. In
a group the reply is posted early and edited (`EditedReply`: sendMessage,
editMessageText, deleteMessage; "message is not modified" is no error), the
last edit making it the final text; an attachment goes after it as a document.
Both fall back to plain text when Telegram refuses the HTML, and retry network
errors as `send` does.

Webhook (`webhook=Webhook(...)`): PTB's own webhook server (tornado, the
`webhooks` extra) listens on `host`:`port` for posts to `path` (a proxy in
front takes Telegram's HTTPS at `url` and forwards them here), and
`start_webhook` calls setWebhook with `url`, `allowed_updates=["message"]`, the
secret and `drop_pending_updates=False`. PTB answers 403 to a post without the
`X-Telegram-Bot-Api-Secret-Token` header or with another value, and to a body
that is not `application/json`; such a post is never delivered. PTB answers 200
once the update is queued, and the Application handles it as a polled one:
handlers, sending, streaming, dedupe and commands are the same in both modes.
`stop` closes the server and deletes the webhook at Telegram (pending updates
kept): Telegram holds the updates that come while the process is down (up to
24 h) either way, and the next start's setWebhook has them posted, so a restart
loses nothing; deleting it lets a poller with this token (the config switched
back to polling, or one waiting on a 409, below) take the updates at once, and
Telegram stops posting to a process that is gone. After a crash the webhook
stays set, and the next start (or a poller's start) sets it again or deletes it.

Liveness (`last_seen`): polling, the time of the last getUpdates Telegram
answered with 200, messages or none (a long poll that ends empty after
`poll_timeout_s` is Telegram heard from), read from getUpdates' own HTTP
request object (`_Polls`); at start, the time getMe answered. A run of failed
polls (a lost network, a 409 from another poller, which takes the updates)
leaves it where it was. With a webhook: the last update received, setWebhook's
answer, and a getWebhookInfo asked every `WEBHOOK_CHECK_S` (60 s) that shows
our URL; one that shows no webhook or another URL is no sign of life, since the
updates go elsewhere (sends are not counted: they succeed for a bot that hears
nothing). When getWebhookInfo reports an error newer than the start and than
the last one logged (Telegram could not reach the URL, the proxy answered 502),
one `telegram.webhook_error` line gives Telegram's `last_error_message`.
`connected` is PTB's updater running: polling, or the webhook server serving.

Polling errors are one line each (`adapter.error`, `stage: polling`) rather than
PTB's traceback per retry.

One process per token: Telegram gives each update to one taker. Two pollers end
each other's long polls with 409 `Conflict`; PTB's polling start deletes any
webhook (its bootstrap calls deleteWebhook), so a poller started beside a
webhook process takes its updates silently, and getUpdates answers 409 while a
webhook is set. So the webhook check sets our webhook again when it finds it
deleted (the webhook process wins, and the poller meets 409s from then on), and
leaves a webhook set to another URL alone (the last setWebhook wins). Each
process that meets another (a 409 on getUpdates, our webhook deleted or
replaced) logs one `adapter.error` line, `reason` `ANOTHER_PROCESS`, for a run
of such meetings: again only after `CONFLICT_QUIET_S` without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog
from telegram import Bot, BotCommand, InputFile, Message, ReplyParameters, Update
from telegram.constants import ChatAction, ChatType, ParseMode
from telegram.error import BadRequest, Conflict, InvalidToken, NetworkError, TelegramError
from telegram.ext import AIORateLimiter, Application, ApplicationBuilder, TypeHandler
from telegram.request import HTTPXRequest

from adapters import texts
from adapters.base import Deliver, repeating
from adapters.retry import BACKOFF, Backoff, SendFailed, retried, send_chunks
from adapters.split import split_message, utf16_len
from adapters.stream import EVERY_S, EditedReply, Paced
from adapters.telegram_format import to_html
from adapters.telegram_media import (
    body,
    carried,
    parent_of,
    quote_of,
    sticker_text,
    strip_mentions,
)
from bot.types import AdapterStartError, Attachment, Inbound, Outbound, ReplyStream

log = structlog.get_logger(__name__)

T = TypeVar("T")

# PTB 22 warns that RetryAfter.retry_after becomes a timedelta, from inside its
# own rate limiter; this is PTB's documented opt-in to that future behaviour.
os.environ.setdefault("PTB_TIMEDELTA", "1")

LIMIT = 4096
TYPING_EVERY_S = 4.5
DEFAULT_BASE_URL = "https://api.telegram.org/bot"
ALLOWED_UPDATES = ("message",)
WEBHOOK_CHECK_S = 60.0  # how often getWebhookInfo is asked, with a webhook
CONFLICT_QUIET_S = 600.0  # a run of meetings with another process ends after this long without
ANOTHER_PROCESS = (
    "another process polls with this token or takes its updates by webhook (a second "
    "soulbot, or another program using this bot): only one process may run the Telegram "
    "adapter with a token, as Telegram gives each update to one of them; stop the other, "
    "or give this bot a token of its own (BotFather's /token)"
)
PRIVACY_FIX = "BotFather: /setprivacy -> Disable, then remove and re-add the bot to each group"

# A formatted send: called with the text and its parse mode (None: plain text).
Formatted = Callable[[str, str | None], Awaitable[T]]


def api_url(base_url: str | None) -> str:
    """PTB's base URL (ending in /bot) for `adapters.telegram.base_url`, which
    may be given with or without the /bot suffix."""
    if not base_url:
        return DEFAULT_BASE_URL
    base = base_url.rstrip("/")
    return base if base.endswith("/bot") else base + "/bot"


def file_url(base_file_url: str | None, base_url: str | None) -> str | None:
    """Where PTB downloads files from: `base_file_url` when given, else the
    `/file/bot` of a local Bot API server at `base_url` (where it serves
    them), else None (PTB's default, Telegram's)."""
    if base_file_url:
        return base_file_url
    if not base_url:
        return None
    root = api_url(base_url).removesuffix("/bot")
    return root + "/file/bot"


async def privacy_mode_on(token: str, base_url: str | None, timeout_s: float = 5.0) -> bool | None:
    """Whether privacy mode is on for the bot of `token` (getMe's
    `can_read_all_group_messages` is false), asked once; None when it cannot
    be asked (no answer within `timeout_s`, a rejected token, no such field)."""
    try:
        async with asyncio.timeout(timeout_s):
            async with Bot(token, base_url=api_url(base_url)) as bot:
                can_read = bot.bot.can_read_all_group_messages
    except (TelegramError, TimeoutError, OSError) as exc:
        log.debug("telegram.get_me_failed", error=f"{type(exc).__name__}: {exc}")
        return None
    return None if can_read is None else not can_read


class _Polls(HTTPXRequest):
    """getUpdates' HTTP requests (PTB's default for them: one connection), calling
    `answered` after each that Telegram answered with 200."""

    def __init__(self, answered: Callable[[], None]) -> None:
        super().__init__()
        self._answered = answered

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        status, payload = await super().do_request(*args, **kwargs)
        if status == 200:
            self._answered()
        return status, payload


@dataclass(frozen=True)
class Webhook:
    """Where Telegram posts the updates (`adapters.telegram.webhook`): `url` is
    the public HTTPS URL given to Telegram, which a proxy forwards to `path` on
    `host`:`port`, where this process listens; `secret_token` comes with every
    post and is checked on each. `check_every_s` is how often getWebhookInfo is
    asked. Raises ValueError without a secret: the server would take any post."""

    url: str
    host: str
    port: int
    path: str = "/telegram"
    secret_token: str = field(default="", repr=False)
    check_every_s: float = WEBHOOK_CHECK_S

    def __post_init__(self) -> None:
        if not self.secret_token:
            raise ValueError("a Telegram webhook needs a secret_token")


class TelegramAdapter:
    """A Telegram bot, polling or, given a `Webhook`, posted to."""

    name = "telegram"

    def __init__(
        self,
        token: str,
        base_url: str | None = None,
        commands: Sequence[tuple[str, str]] = (),
        poll_timeout_s: int = 10,
        backoff: Backoff = BACKOFF,
        *,
        base_file_url: str | None = None,
        streaming: bool = True,
        webhook: Webhook | None = None,
    ) -> None:
        self._token = token
        self._base_url = api_url(base_url)
        self._base_file_url = file_url(base_file_url, base_url)
        self._commands = commands
        self._poll_timeout_s = poll_timeout_s
        self._backoff = backoff
        self._streaming = streaming
        self._webhook = webhook
        self._app: Application[Any, Any, Any, Any, Any, Any] | None = None
        self._deliver: Deliver | None = None
        self._username = ""
        self._bot_id = 0
        self._privacy_mode = False
        self._receiving = False  # polling, or the webhook server serving
        self._met_other: float | None = None  # when another process was last met (monotonic)
        self._heard: float | None = None  # when Telegram was last heard from (last_seen)
        self._watch: asyncio.Task[None] | None = None  # the webhook check
        self._errors_after = 0.0  # webhook errors up to this time are not news (start, last)

    async def start(self, deliver: Deliver) -> None:
        builder = (
            ApplicationBuilder()
            .token(self._token)
            .base_url(self._base_url)
            .rate_limiter(AIORateLimiter(max_retries=3))
            .get_updates_request(_Polls(self._answered))
        )
        if self._base_file_url:
            builder = builder.base_file_url(self._base_file_url)
        app = builder.build()
        try:
            await app.initialize()
        except InvalidToken:
            raise AdapterStartError(
                "telegram: the bot token was rejected: check adapters.telegram.token "
                "(BotFather's /token)"
            ) from None
        except TelegramError as exc:
            raise AdapterStartError(f"telegram: cannot reach the Bot API: {exc}") from None
        self._app, self._deliver = app, deliver
        self._answered()  # getMe was answered
        self._username = (app.bot.username or "").lower()
        self._bot_id = app.bot.id
        self._privacy_mode = app.bot.can_read_all_group_messages is False  # None: not said
        if self._privacy_mode:
            log.warning("telegram.privacy_mode", username=self._username,
                        reason="in groups Telegram delivers only commands, mentions and replies",
                        fix=PRIVACY_FIX)  # fmt: skip
        app.add_handler(TypeHandler(Update, self._on_update))
        await app.start()
        if self._commands:
            try:
                await app.bot.set_my_commands([BotCommand(n, d) for n, d in self._commands])
            except TelegramError as exc:
                log.warning("adapter.error", adapter=self.name, stage="set_my_commands",
                            error=str(exc))  # fmt: skip
        assert app.updater is not None  # built by ApplicationBuilder
        if self._webhook is None:
            await app.updater.start_polling(timeout=self._poll_timeout_s,
                                            allowed_updates=ALLOWED_UPDATES,
                                            error_callback=self._poll_failed)  # fmt: skip
        else:
            await self._start_webhook(app, self._webhook)
        self._receiving = True
        log.info("telegram.ready", username=self._username,
                 mode="polling" if self._webhook is None else "webhook")  # fmt: skip

    async def _start_webhook(self, app: Application[Any, Any, Any, Any, Any, Any],
                             hook: Webhook) -> None:  # fmt: skip
        """Set the webhook at Telegram, serve it, and start its check. Raises
        AdapterStartError when Telegram refuses it or the address is taken."""
        assert app.updater is not None
        self._errors_after = int(time.time()) - 0.5  # Telegram's dates are whole seconds
        try:
            await app.updater.start_webhook(
                listen=hook.host, port=hook.port, url_path=re.escape(hook.path),
                webhook_url=hook.url, secret_token=hook.secret_token,
                allowed_updates=ALLOWED_UPDATES, drop_pending_updates=False,
            )  # fmt: skip
        except TelegramError as exc:
            raise AdapterStartError(
                f"telegram: Telegram refused the webhook {hook.url} "
                f"(adapters.telegram.webhook.url): {exc}"
            ) from None
        except OSError as exc:
            raise AdapterStartError(
                f"telegram: cannot listen for the webhook on {hook.host}:{hook.port} "
                f"(adapters.telegram.webhook.listen): {exc.strerror or exc}"
            ) from None
        self._answered()  # setWebhook was answered
        self._watch = asyncio.create_task(self._watch_webhook(hook), name="telegram.webhook")

    async def stop(self) -> None:
        """Take no more updates: stop polling, or delete the webhook at Telegram
        (pending updates kept for the next start) and close its server."""
        app = self._app
        if app is None or not self._receiving:
            return
        self._receiving = False
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
        if self._webhook is not None:
            try:
                await app.bot.delete_webhook(drop_pending_updates=False)
            except TelegramError as exc:  # it stays set: Telegram keeps the updates all the same
                log.warning("adapter.error", adapter=self.name, stage="delete_webhook",
                            error=f"{type(exc).__name__}: {exc}")  # fmt: skip
        if app.updater is not None and app.updater.running:
            await app.updater.stop()

    async def close(self) -> None:
        await self.stop()
        app, self._app = self._app, None
        if app is None:
            return
        if app.running:
            await app.stop()
        await app.shutdown()

    def _answered(self) -> None:
        self._heard = time.time()

    def connected(self) -> bool:
        """Started, not stopped, PTB's updater running (polling, or the webhook
        server serving)."""
        app = self._app
        updater = app.updater if app is not None else None
        return self._receiving and updater is not None and updater.running

    def last_seen(self) -> float | None:
        """When Telegram was last heard from: polling, an answered poll; with a
        webhook, an update, setWebhook, or a getWebhookInfo showing our URL; at
        start, getMe."""
        return self._heard

    def notes(self) -> list[str]:
        """A line when privacy mode is on (read at start), one for a webhook."""
        notes = [texts.PRIVACY_MODE] if self._privacy_mode else []
        if self._webhook is not None:
            notes.append(texts.TELEGRAM_WEBHOOK.format(url=self._webhook.url))
        return notes

    def _poll_failed(self, error: TelegramError) -> None:
        """PTB's polling loop calls this for each failed getUpdates, then polls
        again (after 1 s, growing to 30 s): one line per failure instead of its
        traceback, and one for a run of 409 Conflicts (another process)."""
        if isinstance(error, Conflict):
            self._met_another("polling", str(error))
            return
        log.warning("adapter.error", adapter=self.name, stage="polling",
                    error=f"{type(error).__name__}: {error}")  # fmt: skip

    def _met_another(self, stage: str, error: str) -> None:
        """Another process takes this token's updates: one line for a run of
        such meetings, again only after `CONFLICT_QUIET_S` without one."""
        now = time.monotonic()
        quiet = self._met_other is None or now - self._met_other > CONFLICT_QUIET_S
        self._met_other = now
        if quiet:
            log.error("adapter.error", adapter=self.name, stage=stage, reason=ANOTHER_PROCESS,
                      error=error)  # fmt: skip

    # -- the webhook check --------------------------------------------------------------

    async def _watch_webhook(self, hook: Webhook) -> None:
        """Ask getWebhookInfo every `check_every_s` until cancelled (by `stop`);
        a failed check is one line and the next goes on."""
        while True:
            await asyncio.sleep(hook.check_every_s)
            try:
                await self._check_webhook(hook)
            except Exception as exc:  # one check never ends the watch
                log.warning("adapter.error", adapter=self.name, stage="webhook_info",
                            error=f"{type(exc).__name__}: {exc}")  # fmt: skip

    async def _check_webhook(self, hook: Webhook) -> None:
        """One getWebhookInfo: ours (heard; a new delivery error logged), deleted
        (another process polls: set again), or another URL (left to it)."""
        bot = self._bot()
        info = await bot.get_webhook_info()
        if info.url and info.url != hook.url:
            self._met_another("webhook", f"getWebhookInfo: the webhook is set to {info.url}, "
                                         f"not {hook.url}; left to it")  # fmt: skip
            return
        if not info.url:
            self._met_another("webhook", "getWebhookInfo: the webhook was deleted (a poller's "
                                         "start deletes it); set again")  # fmt: skip
            await bot.set_webhook(hook.url, allowed_updates=ALLOWED_UPDATES,
                                  secret_token=hook.secret_token,
                                  drop_pending_updates=False)  # fmt: skip
            self._answered()
            return
        self._answered()
        when = info.last_error_date
        if when is None or when.timestamp() <= self._errors_after:
            return
        self._errors_after = when.timestamp()
        log.warning("telegram.webhook_error", url=hook.url, error=info.last_error_message,
                    at=when.isoformat(), pending=info.pending_update_count)  # fmt: skip

    # -- inbound ------------------------------------------------------------------------

    async def _on_update(self, update: Update, _context: object) -> None:
        self._answered()  # an update: Telegram heard from (posted, or in an answered poll)
        message = update.message
        if message is None or self._deliver is None or message.from_user is None:
            return
        try:
            inbound = self._inbound(message)
            if inbound is not None:
                await self._deliver(inbound)
        except Exception as exc:  # one update never stops the polling
            log.error("adapter.error", adapter=self.name, stage="update",
                      error=f"{type(exc).__name__}: {exc}")  # fmt: skip

    def _replies_to_bot(self, message: Message) -> bool:
        parent = parent_of(message)
        return (
            parent is not None
            and parent.from_user is not None
            and (parent.from_user.id == self._bot_id)
        )

    def _inbound(self, message: Message) -> Inbound | None:
        """The `Inbound` of any message with a text, a caption, a sticker or
        media; None for the rest (service messages) and commands for another bot."""
        user = message.from_user
        if user is None or self._app is None:
            return None
        text, entities = body(message)
        sticker = sticker_text(message)
        things = carried(message, self._app.bot)
        if text is None and sticker is None and not things.anything:
            return None
        mentioned = False
        if text is None:
            text = sticker or ""
        elif text.startswith("/"):
            head, _, rest = text.partition(" ")
            command, _, target = head.partition("@")
            if target and target.lower() != self._username:
                return None  # a command for another bot
            mentioned = bool(target)
            text = f"{command} {rest}".strip()
        else:
            text, mentioned = strip_mentions(text, entities, self._username, self._bot_id)
        parent = parent_of(message)
        return Inbound(
            platform=self.name,
            chat_id=str(message.chat.id),
            user_id=str(user.id),
            user_name=user.full_name or user.username or str(user.id),
            text=text,
            is_dm=message.chat.type == ChatType.PRIVATE,
            mentions_bot=mentioned,
            reply_to_bot=self._replies_to_bot(message),
            message_id=str(message.message_id),
            thread_id=str(message.message_thread_id) if message.is_topic_message else None,
            ts=message.date.timestamp(),
            media=things.unread,
            quote=quote_of(message, parent, self._bot_id) if parent is not None else None,
            reply_to_id=str(parent.message_id) if parent is not None else None,
            images=things.images,
        )

    # -- outbound -----------------------------------------------------------------------

    def typing(self, chat: Inbound) -> AbstractAsyncContextManager[None]:
        app = self._app
        if app is None:
            return contextlib.nullcontext()
        thread = int(chat.thread_id) if chat.thread_id else None
        return repeating(
            lambda: app.bot.send_chat_action(
                int(chat.chat_id), ChatAction.TYPING, message_thread_id=thread
            ),
            TYPING_EVERY_S,
        )

    def _bot(self) -> Bot:
        if self._app is None:
            raise RuntimeError("the Telegram adapter is not started")
        bot: Bot = self._app.bot
        return bot

    async def send(self, message: Outbound) -> list[str]:
        """Send the chunks in order, then the attachment, each tried again after
        network errors; returns the ids of the messages sent. Raises SendFailed
        (how many chunks, the attachment counted as one, were not delivered)
        when one still fails."""
        bot = self._bot()
        chat = int(message.chat_id)
        thread = int(message.thread_id) if message.thread_id else None
        reply_to = message.reply_to
        ids: list[str] = []

        async def send_one(chunk: str) -> None:
            nonlocal reply_to
            replying = _replying(reply_to)
            sent = await self._formatted(lambda text, mode: bot.send_message(
                chat, text, parse_mode=mode, message_thread_id=thread, reply_parameters=replying
            ), chunk)  # fmt: skip
            ids.append(str(sent.message_id))
            reply_to = None

        chunks = split_message(message.text, LIMIT, utf16_len)
        await send_chunks(chunks, send_one)
        if message.attachment is not None:
            try:
                document = await self._send_document(chat, thread, reply_to, message.attachment)
            except Exception as exc:
                raise SendFailed(1, len(chunks) + 1, exc) from exc
            ids.append(str(document.message_id))
        return ids

    async def _send_document(
        self, chat: int, thread: int | None, reply_to: str | None, file: Attachment
    ) -> Message:
        bot = self._bot()
        replying = _replying(reply_to)

        def document() -> InputFile:
            upload = InputFile(file.data, filename=file.filename)
            upload.mimetype = file.mime
            return upload

        return await self._retried(lambda: bot.send_document(
            chat, document(), message_thread_id=thread, reply_parameters=replying
        ))  # fmt: skip

    def stream(self, message: Outbound) -> ReplyStream | None:
        """A draft in a private chat, a message edited as it grows in a group;
        None with streaming off, for a reply with an attachment (a stream
        carries text), or before `start`."""
        if not self._streaming or self._app is None or message.attachment is not None:
            return None
        try:
            chat = int(message.chat_id)
        except ValueError:
            return None
        thread = int(message.thread_id) if message.thread_id else None
        if chat > 0:  # a private chat: its id is the person's, positive; groups' are negative
            return _Draft(self, chat, thread)
        return EditedReply(_Edits(self, chat, thread, message.reply_to), LIMIT, utf16_len,
                           EVERY_S, self.name)  # fmt: skip

    async def _formatted(self, call: Formatted[T], chunk: str) -> T:
        """`call` with the chunk as Telegram HTML, again as plain text when
        Telegram refuses the entities; each tried again after network errors."""
        try:
            return await self._retried(lambda: call(to_html(chunk), ParseMode.HTML))
        except BadRequest as exc:
            if "entit" not in str(exc).lower() and "tag" not in str(exc).lower():
                raise
            log.info("telegram.plain_fallback", error=str(exc))
            return await self._retried(lambda: call(chunk, None))

    async def _retried(self, call: Callable[[], Awaitable[T]]) -> T:
        return await retried(call, transient=_transient, backoff=self._backoff, adapter=self.name)


class _Draft:
    """A reply in a private chat: drafts while the model writes, then the
    reply sent as `send` sends it."""

    def __init__(self, adapter: TelegramAdapter, chat: int, thread: int | None) -> None:
        self._adapter = adapter
        self._chat = chat
        self._thread = thread
        self._draft_id = random.randint(1, 2**31 - 1)  # an id, not a secret
        self._paced = Paced(self._show, EVERY_S, adapter.name)

    async def update(self, text: str) -> None:
        await self._paced.update(text)

    async def _show(self, text: str) -> None:
        chunks = split_message(text, LIMIT, utf16_len)
        if not chunks:
            return
        bot = self._adapter._bot()
        await self._adapter._formatted(lambda body, mode: bot.send_message_draft(
            self._chat, self._draft_id, text=body, parse_mode=mode,
            message_thread_id=self._thread,
        ), chunks[-1])  # fmt: skip

    async def finish(self, message: Outbound) -> list[str]:
        await self._paced.settle()
        return await self._adapter.send(message)


class _Edits:
    """What an `EditedReply` does in a Telegram group (an `Editable`)."""

    def __init__(
        self, adapter: TelegramAdapter, chat: int, thread: int | None, reply_to: str | None
    ) -> None:
        self._adapter = adapter
        self._chat = chat
        self._thread = thread
        self._reply_to = reply_to

    async def post(self, text: str, first: bool) -> str:
        bot = self._adapter._bot()
        replying = _replying(self._reply_to) if first else None
        sent = await self._adapter._formatted(lambda body, mode: bot.send_message(
            self._chat, body, parse_mode=mode, message_thread_id=self._thread,
            reply_parameters=replying,
        ), text)  # fmt: skip
        return str(sent.message_id)

    async def edit(self, message_id: str, text: str) -> None:
        bot = self._adapter._bot()
        try:
            await self._adapter._formatted(lambda body, mode: bot.edit_message_text(
                body, chat_id=self._chat, message_id=int(message_id), parse_mode=mode
            ), text)  # fmt: skip
        except BadRequest as exc:
            if "not modified" not in str(exc).lower():
                raise

    async def delete(self, message_id: str) -> None:
        bot = self._adapter._bot()
        await self._adapter._retried(lambda: bot.delete_message(self._chat, int(message_id)))


def _replying(reply_to: str | None) -> ReplyParameters | None:
    if reply_to and reply_to.isdigit():
        return ReplyParameters(int(reply_to), allow_sending_without_reply=True)
    return None


def _transient(error: BaseException) -> bool:
    """A network error worth another try: a lost connection, a timeout, a 5xx
    (PTB raises NetworkError for those, TimedOut for timeouts); BadRequest is
    a NetworkError in PTB's tree too, but trying it again changes nothing."""
    return isinstance(error, NetworkError) and not isinstance(error, BadRequest)
