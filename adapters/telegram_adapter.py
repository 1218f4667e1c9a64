"""Telegram, through python-telegram-bot: long polling inside our event loop, or a
webhook (adapters/telegram_webhook.py: Telegram posts each update to a URL of ours).

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
note or an audio file is an `Audio` (its announced duration, size and type),
downloaded, when the core hears it, no further than the core's byte cap. A
video, animation or other file sets `media` (the router answers it with one
line). A reply to a message (not the forum topic's first
message, which every message of a topic "replies" to) carries `reply_to_id`
and a `Quote`: the parent's sender, the part quoted when the person picked
one, else the parent's text or caption, else "[photo]", "[sticker 😀]",
"[voice note]" or "[file]"; not cut (the core cuts it).

Privacy mode: getMe's `can_read_all_group_messages` false means Telegram
delivers only commands, mentions and replies from groups; the adapter then
logs `telegram.privacy_mode` once at start with what to do, and `notes()`
says it for `/soul status`. `privacy_mode_on` asks getMe once, for
`soulbot check`.

Replies are split at 4,096 UTF-16 code units, formatted as Telegram HTML, and sent
again as plain text when Telegram refuses the entities; the first chunk replies to
the message that started the turn. An attachment goes after the text as a document
(`sendDocument`, multipart), an image after that as a photo (`sendPhoto`,
multipart), a voice note after that as a voice message (`sendVoice`: OGG/Opus,
multipart, its duration in whole seconds), each replying to that message when
nothing went before it. `send` returns the ids of the messages
sent. `RetryAfter` (flood control) is waited out by PTB's AIORateLimiter, which also
keeps under Telegram's rates. A chunk that meets a network error (`NetworkError`,
`TimedOut`: a lost connection, a timeout, a 5xx; not `BadRequest`) is tried again
with backoff (adapters/retry.py); one that still fails raises `SendFailed`, which
says how many chunks were not delivered. A chunk whose answer was lost after
Telegram took it may arrive twice: the Bot API has no idempotency key. `typing`
sends the typing action every 4.5 s while a turn runs (Telegram shows it for 5 s).
The command menu is set with `setMyCommands` on start.

Streaming (`streaming=True`, adapters/telegram_stream.py), at most one show a
second: a draft in a private chat, a message edited as it grows in a group.

Webhook (`webhook=Webhook(...)`, adapters/telegram_webhook.py): our webhook
server (adapters/telegram_posts.py) takes Telegram's posts in place of polling,
the updates handled as polled ones; `stop` deletes the webhook at Telegram, pending updates kept.

Liveness (`last_seen`): polling, the time of the last getUpdates Telegram
answered with 200, messages or none (a long poll that ends empty after
`poll_timeout_s` is Telegram heard from), read from getUpdates' own HTTP
request object (`_Polls`); at start, the time getMe answered. A run of failed
polls (a lost network, a 409 from another poller, which takes the updates)
leaves it where it was. With a webhook: updates, setWebhook and getWebhookInfo
(adapters/telegram_webhook.py). `connected` is PTB's updater polling, or the
webhook server serving.

Polling errors are one line each (`adapter.error`, `stage: polling`) rather than
PTB's traceback per retry; a 409 `Conflict` (another process polls with this
token) is one line for a run of them (`AnotherProcess`,
adapters/telegram_webhook.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
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
from adapters.stream import EVERY_S, EditedReply, delete_messages, replace_reply
from adapters.telegram_format import to_html
from adapters.telegram_media import (
    body,
    carried,
    parent_of,
    quote_of,
    sticker_text,
    strip_mentions,
)
from adapters.telegram_stream import Draft, Edits, Formatted
from adapters.telegram_webhook import ANOTHER_PROCESS, AnotherProcess, Webhook, WebhookServer
from bot.types import AdapterStartError, Attachment, Inbound, Outbound, ReplyStream, VoiceNote

# Webhook and ANOTHER_PROCESS are adapters/telegram_webhook.py's, named here with the adapter.
__all__ = [
    "ANOTHER_PROCESS",
    "LIMIT",
    "TelegramAdapter",
    "Webhook",
    "api_url",
    "file_url",
    "privacy_mode_on",
]

log = structlog.get_logger(__name__)

T = TypeVar("T")

# PTB 22 warns that RetryAfter.retry_after becomes a timedelta, from inside its
# own rate limiter; this is PTB's documented opt-in to that future behaviour.
os.environ.setdefault("PTB_TIMEDELTA", "1")

LIMIT = 4096
TYPING_EVERY_S = 4.5
DEFAULT_BASE_URL = "https://api.telegram.org/bot"
ALLOWED_UPDATES = ("message",)
PRIVACY_FIX = "BotFather: /setprivacy -> Disable, then remove and re-add the bot to each group"


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
        self._another = AnotherProcess(self.name)
        self._heard: float | None = None  # when Telegram was last heard from (last_seen)
        self._served: WebhookServer | None = None  # the webhook, in place of polling; None: polling
        if webhook is not None:
            self._served = WebhookServer(webhook, allowed_updates=ALLOWED_UPDATES,
                                         answered=self._answered, another=self._another,
                                         adapter=self.name)  # fmt: skip

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
        if self._served is None:
            await app.updater.start_polling(timeout=self._poll_timeout_s,
                                            allowed_updates=ALLOWED_UPDATES,
                                            error_callback=self._poll_failed)  # fmt: skip
        else:
            await self._served.start(app)
        self._receiving = True
        log.info("telegram.ready", username=self._username,
                 mode="polling" if self._webhook is None else "webhook")  # fmt: skip

    async def stop(self) -> None:
        """Take no more updates: stop polling, or delete the webhook at Telegram
        (pending updates kept for the next start) and close its server."""
        app = self._app
        if app is None or not self._receiving:
            return
        self._receiving = False
        if self._served is not None:
            await self._served.stop(app.bot)
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
        """Started, not stopped, and PTB's updater polling or the webhook server
        serving."""
        if self._served is not None:
            return self._receiving and self._served.serving
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
            self._another.met("polling", str(error))
            return
        log.warning("adapter.error", adapter=self.name, stage="polling",
                    error=f"{type(error).__name__}: {error}")  # fmt: skip

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
        if user is None or self._app is None or user.id == self._bot_id:
            return None  # Telegram never sends the bot its own (nor, in fact, other bots')
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
            audio=things.audio,
            # A message sent on behalf of a chat (an anonymous admin, a channel) carries a
            # stand-in sender marked is_bot (GroupAnonymousBot, Channel_Bot): a person's.
            from_bot=user.is_bot and message.sender_chat is None,
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
        """Send the chunks in order, then the attachment, the image and the
        voice note, each tried again after network errors; returns the ids of
        the messages sent. Raises SendFailed (how many chunks, the attachment,
        the image or the voice note counted as one, were not delivered) when
        one still fails."""
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
        for file, by in ((message.attachment, bot.send_document), (message.image, bot.send_photo)):
            if file is None:
                continue
            try:
                posted = await self._send_file(by, chat, thread, reply_to, file)
            except Exception as exc:
                raise SendFailed(1, len(chunks) + 1, exc) from exc
            ids.append(str(posted.message_id))
            reply_to = None
        if message.voice is not None:
            try:
                voice = await self._send_voice(chat, thread, reply_to, message.voice)
            except Exception as exc:
                raise SendFailed(1, len(chunks) + 1, exc) from exc
            ids.append(str(voice.message_id))
        return ids

    async def _send_file(
        self,
        send: Callable[..., Awaitable[Message]],
        chat: int,
        thread: int | None,
        reply_to: str | None,
        file: Attachment,
    ) -> Message:
        """`file` by `send`: the bot's send_document, or its send_photo (Telegram
        shows a photo in the chat)."""
        replying = _replying(reply_to)

        def upload() -> InputFile:
            made = InputFile(file.data, filename=file.filename)
            made.mimetype = file.mime
            return made

        return await self._retried(lambda: send(
            chat, upload(), message_thread_id=thread, reply_parameters=replying
        ))  # fmt: skip

    async def _send_voice(
        self, chat: int, thread: int | None, reply_to: str | None, note: VoiceNote
    ) -> Message:
        """`note` as a voice message (sendVoice: OGG/Opus, its whole seconds)."""
        bot = self._bot()
        replying = _replying(reply_to)

        def voice() -> InputFile:
            upload = InputFile(note.data, filename="voice.ogg")
            upload.mimetype = "audio/ogg"
            return upload

        return await self._retried(lambda: bot.send_voice(
            chat, voice(), duration=max(1, round(note.duration_s)), message_thread_id=thread,
            reply_parameters=replying,
        ))  # fmt: skip

    def stream(self, message: Outbound) -> ReplyStream | None:
        """A draft in a private chat, a message edited as it grows in a group;
        None with streaming off, for a reply with an attachment or an image (a
        stream carries text), or before `start`."""
        if (not self._streaming or self._app is None or message.attachment is not None
                or message.image is not None):  # fmt: skip
            return None
        try:
            chat = int(message.chat_id)
        except ValueError:
            return None
        thread = int(message.thread_id) if message.thread_id else None
        if chat > 0:  # a private chat: its id is the person's, positive; groups' are negative
            return Draft(self._bot, self._formatted, self.send, chat, thread, limit=LIMIT,
                         adapter=self.name)  # fmt: skip
        return EditedReply(self._edits(message), LIMIT, utf16_len, EVERY_S, self.name)

    async def replace(self, message: Outbound, message_ids: Sequence[str]) -> list[str]:
        """Make the reply sent as `message_ids` say `message.text` (`/retry`):
        edited in place (adapters/stream.py `replace_reply`; a bot may edit its
        messages at any age)."""
        return await replace_reply(self._edits(message), message_ids, message, LIMIT, utf16_len,
                                   self.name)  # fmt: skip

    async def delete(self, message: Outbound, message_ids: Sequence[str]) -> int:
        """Delete the bot's messages `message_ids` in the chat `message`
        addresses (`/undo`); returns how many went (Telegram keeps one older
        than 48 hours: it stays, logged)."""
        return await delete_messages(self._edits(message), message_ids, self.name)

    def _edits(self, message: Outbound) -> Edits:
        self._bot()  # raises before `start`
        thread = int(message.thread_id) if message.thread_id else None
        return Edits(self._bot, self._formatted, self._retried, int(message.chat_id), thread,
                     _replying(message.reply_to))  # fmt: skip

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


def _replying(reply_to: str | None) -> ReplyParameters | None:
    if reply_to and reply_to.isdigit():
        return ReplyParameters(int(reply_to), allow_sending_without_reply=True)
    return None


def _transient(error: BaseException) -> bool:
    """A network error worth another try: a lost connection, a timeout, a 5xx
    (PTB raises NetworkError for those, TimedOut for timeouts); BadRequest is
    a NetworkError in PTB's tree too, but trying it again changes nothing."""
    return isinstance(error, NetworkError) and not isinstance(error, BadRequest)
