"""Telegram, through python-telegram-bot: long polling inside our event loop.

What arrives: new messages only (`allowed_updates=["message"]`): edits,
channel posts and service messages (members joining, pins, ...) are ignored.
A text message becomes an `Inbound`; in a group, `mentions_bot` is an
@username mention of the bot (removed from the text) or a `/command@bot`,
`reply_to_bot` a reply to one of its messages. A command addressed to another
bot (`/help@other_bot`) is ignored. A forum topic is a session of its own
(`thread_id` is the topic). A photo, voice note, sticker or other media gets
one line saying that only text is read (in a group only when it is a reply to
the bot).

Replies are split at 4,096 UTF-16 code units, formatted as Telegram HTML, and
sent again as plain text when Telegram refuses the entities; the first chunk
replies to the message that started the turn. An attachment goes after the
text as a document (`sendDocument`, multipart), replying to that message when
there was no text. `RetryAfter` (flood control) is
waited out by PTB's AIORateLimiter, which also keeps under Telegram's rates. A
chunk that meets a network error (`NetworkError`, `TimedOut`: a lost
connection, a timeout, a 5xx; not `BadRequest`) is tried again with backoff
(adapters/retry.py); one that still fails raises `SendFailed`, which says how
many chunks were not delivered. A chunk whose answer was lost after Telegram
took it may arrive twice: the Bot API has no idempotency key.
`typing` sends the typing action every 4.5 s while a turn runs (Telegram shows
it for 5 s). The command menu is set with `setMyCommands` on start.

Polling errors are one line each (`adapter.error`, `stage: polling`) rather than
PTB's traceback per retry; 409 `Conflict` (another process polls with this
token) is logged once, with what to do, until an update comes through again.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import structlog
from telegram import BotCommand, InputFile, Message, MessageEntity, ReplyParameters, Update
from telegram.constants import ChatAction, ChatType, ParseMode
from telegram.error import BadRequest, Conflict, InvalidToken, NetworkError, TelegramError
from telegram.ext import AIORateLimiter, Application, ApplicationBuilder, TypeHandler

from adapters.base import Deliver, repeating
from adapters.retry import BACKOFF, Backoff, SendFailed, retried, send_chunks
from adapters.split import split_message, utf16_len
from adapters.telegram_format import to_html
from bot.types import AdapterStartError, Attachment, Inbound, Outbound

log = structlog.get_logger(__name__)

# PTB 22 warns that RetryAfter.retry_after becomes a timedelta, from inside its
# own rate limiter; this is PTB's documented opt-in to that future behaviour.
os.environ.setdefault("PTB_TIMEDELTA", "1")

LIMIT = 4096
TYPING_EVERY_S = 4.5
DEFAULT_BASE_URL = "https://api.telegram.org/bot"
ANOTHER_POLLER = (
    "another process polls with this token (a second soulbot, or another program using "
    "this bot): Telegram gives each update to one of them only; stop the other, or give "
    "this bot a token of its own (BotFather's /token)"
)
_MEDIA = ("photo", "voice", "sticker", "video", "video_note", "audio", "document", "animation")


def api_url(base_url: str | None) -> str:
    """PTB's base URL (ending in /bot) for `adapters.telegram.base_url`, which
    may be given with or without the /bot suffix."""
    if not base_url:
        return DEFAULT_BASE_URL
    base = base_url.rstrip("/")
    return base if base.endswith("/bot") else base + "/bot"


class TelegramAdapter:
    """A Telegram bot."""

    name = "telegram"

    def __init__(
        self,
        token: str,
        base_url: str | None = None,
        commands: Sequence[tuple[str, str]] = (),
        poll_timeout_s: int = 10,
        backoff: Backoff = BACKOFF,
    ) -> None:
        self._token = token
        self._base_url = api_url(base_url)
        self._commands = commands
        self._poll_timeout_s = poll_timeout_s
        self._backoff = backoff
        self._app: Application[Any, Any, Any, Any, Any, Any] | None = None
        self._deliver: Deliver | None = None
        self._username = ""
        self._bot_id = 0
        self._polling = False
        self._conflicted = False  # a 409 was logged; again only after an update came through

    async def start(self, deliver: Deliver) -> None:
        app = (
            ApplicationBuilder()
            .token(self._token)
            .base_url(self._base_url)
            .rate_limiter(AIORateLimiter(max_retries=3))
            .build()
        )
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
        self._username = (app.bot.username or "").lower()
        self._bot_id = app.bot.id
        app.add_handler(TypeHandler(Update, self._on_update))
        await app.start()
        if self._commands:
            try:
                await app.bot.set_my_commands([BotCommand(n, d) for n, d in self._commands])
            except TelegramError as exc:
                log.warning("adapter.error", adapter=self.name, stage="set_my_commands",
                            error=str(exc))  # fmt: skip
        assert app.updater is not None  # built by ApplicationBuilder
        await app.updater.start_polling(timeout=self._poll_timeout_s, allowed_updates=["message"],
                                        error_callback=self._poll_failed)  # fmt: skip
        self._polling = True
        log.info("telegram.ready", username=self._username)

    async def stop(self) -> None:
        app = self._app
        if app is None or not self._polling:
            return
        self._polling = False
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

    def _poll_failed(self, error: TelegramError) -> None:
        """PTB's polling loop calls this for each failed getUpdates, then polls
        again (after 1 s, growing to 30 s): one line per failure instead of its
        traceback, and one for a run of 409 Conflicts (another poller)."""
        if isinstance(error, Conflict):
            if not self._conflicted:
                self._conflicted = True
                log.error("adapter.error", adapter=self.name, stage="polling",
                          reason=ANOTHER_POLLER, error=f"Conflict: {error}")  # fmt: skip
            return
        log.warning("adapter.error", adapter=self.name, stage="polling",
                    error=f"{type(error).__name__}: {error}")  # fmt: skip

    # -- inbound ------------------------------------------------------------------------

    async def _on_update(self, update: Update, _context: object) -> None:
        self._conflicted = False  # polls come through again
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
        parent = message.reply_to_message
        if parent is None or parent.from_user is None:
            return False
        # In a forum topic every message "replies" to the topic's first message.
        if message.is_topic_message and parent.message_id == message.message_thread_id:
            return False
        return parent.from_user.id == self._bot_id

    def _is_media_for_us(self, message: Message) -> bool:
        if not any(getattr(message, kind, None) for kind in _MEDIA):
            return False
        return message.chat.type == ChatType.PRIVATE or self._replies_to_bot(message)

    def _inbound(self, message: Message) -> Inbound | None:
        text = message.text
        user = message.from_user
        if user is None or (text is None and not self._is_media_for_us(message)):
            return None
        is_dm = message.chat.type == ChatType.PRIVATE
        mentioned = False
        if text is None:  # media for us: the router gates it, then says it reads text only
            text = ""
        elif text.startswith("/"):
            head, _, rest = text.partition(" ")
            command, _, target = head.partition("@")
            if target and target.lower() != self._username:
                return None  # a command for another bot
            mentioned = bool(target)
            text = f"{command} {rest}".strip()
        else:
            text, mentioned = self._strip_mentions(message, text)
        return Inbound(
            platform=self.name,
            chat_id=str(message.chat.id),
            user_id=str(user.id),
            user_name=user.full_name or user.username or str(user.id),
            text=text,
            is_dm=is_dm,
            mentions_bot=mentioned,
            reply_to_bot=self._replies_to_bot(message),
            message_id=str(message.message_id),
            thread_id=str(message.message_thread_id) if message.is_topic_message else None,
            ts=message.date.timestamp(),
            media=message.text is None,
        )

    def _strip_mentions(self, message: Message, text: str) -> tuple[str, bool]:
        """The text without the bot's @mentions, and whether there was one."""
        found = False
        spans = []
        for entity, value in message.parse_entities(
            [MessageEntity.MENTION, MessageEntity.TEXT_MENTION]
        ).items():
            ours = (
                entity.type == MessageEntity.MENTION and value[1:].lower() == self._username
            ) or (entity.user is not None and entity.user.id == self._bot_id)
            if ours:
                found = True
                if entity.type == MessageEntity.MENTION:
                    spans.append(value)
        for value in spans:
            text = re.sub(rf"{re.escape(value)}\b ?", "", text, count=1)
        return text.strip(), found

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

    async def send(self, message: Outbound) -> None:
        """Send the chunks in order, then the attachment, each tried again after
        network errors; raises SendFailed (how many chunks, the attachment
        counted as one, were not delivered) when one still fails."""
        if self._app is None:
            raise RuntimeError("the Telegram adapter is not started")
        bot = self._app.bot
        chat = int(message.chat_id)
        thread = int(message.thread_id) if message.thread_id else None
        reply_to = message.reply_to

        async def send_one(chunk: str) -> None:
            nonlocal reply_to
            replying = (
                ReplyParameters(int(reply_to), allow_sending_without_reply=True)
                if reply_to and reply_to.isdigit()
                else None
            )
            try:
                await self._retried(lambda: bot.send_message(
                    chat, to_html(chunk), parse_mode=ParseMode.HTML, message_thread_id=thread,
                    reply_parameters=replying,
                ))  # fmt: skip
            except BadRequest as exc:
                if "entit" not in str(exc).lower() and "tag" not in str(exc).lower():
                    raise
                log.info("telegram.plain_fallback", error=str(exc))
                await self._retried(lambda: bot.send_message(
                    chat, chunk, message_thread_id=thread, reply_parameters=replying
                ))  # fmt: skip
            reply_to = None

        chunks = split_message(message.text, LIMIT, utf16_len)
        await send_chunks(chunks, send_one)
        if message.attachment is not None:
            try:
                await self._send_document(chat, thread, reply_to, message.attachment)
            except Exception as exc:
                raise SendFailed(1, len(chunks) + 1, exc) from exc

    async def _send_document(
        self, chat: int, thread: int | None, reply_to: str | None, file: Attachment
    ) -> None:
        assert self._app is not None  # checked by send
        bot = self._app.bot
        replying = (
            ReplyParameters(int(reply_to), allow_sending_without_reply=True)
            if reply_to and reply_to.isdigit()
            else None
        )

        def document() -> InputFile:
            upload = InputFile(file.data, filename=file.filename)
            upload.mimetype = file.mime
            return upload

        await self._retried(lambda: bot.send_document(
            chat, document(), message_thread_id=thread, reply_parameters=replying
        ))  # fmt: skip

    async def _retried(self, call: Callable[[], Awaitable[Message]]) -> Message:
        return await retried(call, transient=_transient, backoff=self._backoff, adapter=self.name)


def _transient(error: BaseException) -> bool:
    """A network error worth another try: a lost connection, a timeout, a 5xx
    (PTB raises NetworkError for those, TimedOut for timeouts); BadRequest is
    a NetworkError in PTB's tree too, but trying it again changes nothing."""
    return isinstance(error, NetworkError) and not isinstance(error, BadRequest)
