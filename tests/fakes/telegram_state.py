"""The state of the Bot API fake (tests/fakes/telegram_fake.py), which its parts
share: chats, messages, queued updates, files, the webhook, what it recorded;
and the helpers more than one part uses (the bot's user, waking waiters, a
chat by id, a message to reply to, which updates are wanted).

Messages: message ids count up per chat, shared by pushed and sent messages.
Every message pushed or sent is remembered as it is now (edits applied, deleted
ones left out). ``allowed_updates`` (from getUpdates or setWebhook) persists;
by default every kind of update is wanted except ``chat_member``,
``message_reaction`` and ``message_reaction_count``, as on Telegram.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

import aiohttp

from tests.fakes.server import LoopbackServer
from tests.fakes.telegram_http import ApiError, Failure, Hold
from tests.fakes.telegram_records import (
    JSON,
    Call,
    Deletion,
    Document,
    Download,
    Draft,
    Edit,
    Push,
    UserFile,
    Webhook,
)

MAX_UPLOAD_BYTES = 50 * 1000 * 1000  # the Bot API's cap on a file a bot sends

PUSH_TRIES = 3  # posts of one update before it waits for the next change
PUSH_RETRY_S = 0.05

DEFAULT_EXCLUDED_UPDATES = frozenset({"chat_member", "message_reaction", "message_reaction_count"})


def _kind(update: JSON) -> str:
    return next((k for k in update if k != "update_id"), "")


class TelegramState(LoopbackServer):
    """The fake's state, and the helpers its parts share (`FakeTelegram` is all
    of them). ``privacy_mode``, ``can_join_groups`` and ``supports_inline_queries``
    are what getMe answers; ``strict_html`` refuses bad HTML."""

    def __init__(
        self,
        token: str = "123456:TEST-TOKEN",
        bot_id: int = 999000,
        username: str = "soul_test_bot",
        first_name: str = "Soul",
        *,
        strict_html: bool = False,
        max_upload_bytes: int = MAX_UPLOAD_BYTES,
    ) -> None:
        self.token = token
        self.max_upload_bytes = max_upload_bytes
        self.bot_id = bot_id
        self.username = username
        self.first_name = first_name
        self.strict_html = strict_html
        self.calls: list[Call] = []
        self.commands: list[JSON] = []
        self.documents: list[Document] = []
        self.downloads: list[Download] = []
        self.drafts: list[Draft] = []
        self.edits: list[Edit] = []
        self.deleted: list[Deletion] = []
        self.privacy_mode = True
        self.webhook: Webhook | None = None
        self.pushes: list[Push] = []
        self.push_tries = PUSH_TRIES
        self.push_retry_s = PUSH_RETRY_S
        self._last_error: tuple[int, str] | None = None  # a failed post: date, message
        self._push_wake = asyncio.Event()  # a queued update or a webhook change
        self._pusher: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None
        self.can_join_groups = True
        self.supports_inline_queries = False
        self._files: dict[str, UserFile] = {}
        self._hangs: list[float] = []  # seconds each next download is held
        self._updates: list[JSON] = []
        self._next_update_id = 10001
        self._allowed: frozenset[str] | None = None
        self._chats: dict[int, JSON] = {}
        self._messages: dict[tuple[int, int], JSON] = {}
        self._message_ids: dict[int, itertools.count[int]] = {}
        self._failures: list[Failure] = []
        self._holds: list[Hold] = []
        self._held = 0  # calls waiting on a hold now
        self._polls = 0  # getUpdates requests issued, to let a newer one end older ones
        self._waiting_polls = 0
        self._changed = asyncio.Event()
        self._closing = False

    # -- what the parts share ----------------------------------------------------
    @property
    def bot_user(self) -> JSON:
        """The bot's User object, as getMe answers and sent messages carry in ``from``."""
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": self.first_name,
            "username": self.username,
        }

    def _notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def _wait_change(self, seconds: float) -> None:
        """Return on the next change, or after ``seconds``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._changed.wait()

    def _wanted(self, update: JSON) -> bool:
        kind = _kind(update)
        if self._allowed is None:
            return kind not in DEFAULT_EXCLUDED_UPDATES
        return kind in self._allowed

    def _chat(self, params: JSON) -> JSON:
        try:
            chat_id = int(params["chat_id"])
        except (KeyError, TypeError, ValueError):
            raise ApiError(400, "Bad Request: chat not found") from None
        if chat_id not in self._chats:
            chat: JSON = {"id": chat_id, "type": "private", "first_name": "Ann"}
            if chat_id < 0:
                chat = {"id": chat_id, "type": "supergroup", "title": f"Group {chat_id}"}
            self._chats[chat_id] = chat
        return self._chats[chat_id]

    def _next_message_id(self, chat_id: int) -> int:
        return next(self._message_ids.setdefault(chat_id, itertools.count(1)))

    def _reply_target(self, chat: JSON, message_id: int) -> JSON:
        found = self._messages.get((chat["id"], message_id))
        if found is None:
            return {"message_id": message_id, "date": int(time.time()), "chat": chat}
        return {k: v for k, v in found.items() if k != "reply_to_message"}
