"""Telegram's streamed replies (`ReplyStream`, adapters/stream.py), which
`TelegramAdapter.stream` (adapters/telegram_adapter.py) picks, at most one show a
second.

In a private chat (a positive chat id: Telegram's users and private chats have
positive ids, groups and channels negative ones) the text so far is a draft
(`Draft`: `sendMessageDraft`, one random draft id per reply, the last chunk of
what is written so far), and `finish` sends the reply as `send` does, so the chat
ends with exactly the messages it would have had without streaming. In a group
the reply is posted early and edited (`EditedReply` through `Edits`:
sendMessage, editMessageText, deleteMessage; "message is not modified" is no
error, "message to edit not found" is `MessageGone`: an admin or Telegram's
anti-spam deleted it), the last edit making it the final text; an attachment goes after it as a
document. Both go through the adapter's formatted send, so they fall back to
plain text when Telegram refuses the HTML and retry network errors as `send`
does.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from telegram import Bot, ReplyParameters
from telegram.error import BadRequest

from adapters.split import split_message, utf16_len
from adapters.stream import EVERY_S, MessageGone, Paced
from bot.types import Outbound

T = TypeVar("T")

# A formatted send: called with the text and its parse mode (None: plain text).
Formatted = Callable[[str, str | None], Awaitable[T]]
# The adapter's formatted send (HTML, then plain text; retried) and its retries.
Formats = Callable[[Formatted[Any], str], Awaitable[Any]]
Retries = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]


class Draft:
    """A reply in a private chat: drafts while the model writes, then the
    reply sent as `send` sends it."""

    def __init__(
        self,
        bot: Callable[[], Bot],
        formatted: Formats,
        send: Callable[[Outbound], Awaitable[list[str]]],
        chat: int,
        thread: int | None,
        *,
        limit: int,
        adapter: str,
    ) -> None:
        self._bot = bot
        self._formatted = formatted
        self._send = send
        self._chat = chat
        self._thread = thread
        self._limit = limit
        self._draft_id = random.randint(1, 2**31 - 1)  # an id, not a secret
        self._paced = Paced(self._show, EVERY_S, adapter)

    async def update(self, text: str) -> None:
        await self._paced.update(text)

    async def _show(self, text: str) -> None:
        chunks = split_message(text, self._limit, utf16_len)
        if not chunks:
            return
        bot = self._bot()
        await self._formatted(lambda body, mode: bot.send_message_draft(
            self._chat, self._draft_id, text=body, parse_mode=mode,
            message_thread_id=self._thread,
        ), chunks[-1])  # fmt: skip

    async def finish(self, message: Outbound) -> list[str]:
        await self._paced.settle()
        return await self._send(message)

    async def abort(self) -> None:
        """No draft after this; the one shown stays until Telegram drops it (a
        draft cannot be taken back: its text may not be empty)."""
        await self._paced.cancel()


class Edits:
    """What an `EditedReply` does in a Telegram group (an `Editable`); its first
    message replies with `replying`."""

    def __init__(
        self,
        bot: Callable[[], Bot],
        formatted: Formats,
        retried: Retries,
        chat: int,
        thread: int | None,
        replying: ReplyParameters | None,
    ) -> None:
        self._bot = bot
        self._formatted = formatted
        self._retried = retried
        self._chat = chat
        self._thread = thread
        self._replying = replying

    async def post(self, text: str, first: bool) -> str:
        bot = self._bot()
        replying = self._replying if first else None
        sent = await self._formatted(lambda body, mode: bot.send_message(
            self._chat, body, parse_mode=mode, message_thread_id=self._thread,
            reply_parameters=replying,
        ), text)  # fmt: skip
        return str(sent.message_id)

    async def edit(self, message_id: str, text: str) -> None:
        bot = self._bot()
        try:
            await self._formatted(lambda body, mode: bot.edit_message_text(
                body, chat_id=self._chat, message_id=int(message_id), parse_mode=mode
            ), text)  # fmt: skip
        except BadRequest as exc:
            if "message to edit not found" in str(exc).lower():
                raise MessageGone(str(exc)) from exc
            if "not modified" not in str(exc).lower():
                raise

    async def delete(self, message_id: str) -> None:
        bot = self._bot()
        try:
            await self._retried(lambda: bot.delete_message(self._chat, int(message_id)))
        except BadRequest as exc:
            if "message to delete not found" not in str(exc).lower():  # else: gone already
                raise
