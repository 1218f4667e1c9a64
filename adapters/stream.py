"""Replies shown while the model writes them (`ReplyStream`, bot/types.py).

`Paced` shows a growing text through a `show` coroutine at most once every
`every_s` seconds (one second: Discord's and Telegram's edit rates), counted
from when the platform answered the last show, the latest text winning; what
came between two shows is never shown on its own.
The first show waits a pace too: an answer that is whole within a second is
never previewed, only sent (no message that changes under the reader's eyes,
and no wait for the pace at its end). `settle` ends the previews and, when one
was shown, waits out the pace, so the final edit keeps it too.

`EditedReply` is the way of Discord and of Telegram groups: the text so far is
split at the platform's limit (`split_message`, so every chunk closes the code
fence it opens and the next reopens it), the first chunk is posted as soon as
there is text, and each later show edits the chunks that changed and posts
the new ones; `finish` makes the same edit with the final text, and deletes
preview messages the final text no longer needs (an answer that shrank).
A failed preview is logged (`adapter.preview_failed`) and ends the previews;
`finish` still makes the chat end with the final text, or raises `SendFailed`.
A preview message someone else deleted (a group's moderator, Telegram's
anti-spam) is `MessageGone` when edited: a preview does not come back (it ends
the previews), and `finish` posts that chunk and those after it as new messages,
so the answer still arrives, in order (the first still replying to the question).
The final text is sent only by an edit or a post: a preview deleted after it
already showed the whole final text is not noticed.

A turn cancelled mid-answer (`/forget`, a shutdown past its deadline) calls
`abort`: the task that shows previews, which each `Paced` owns, is cancelled and
awaited, so nothing is shown after it, and the preview messages are deleted. A
preview is not an answer: the history stores none for a cancelled turn, so the
chat keeps none either (after a shutdown the message is answered at the next
start; after `/forget` nothing of the conversation should be left).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import structlog

from adapters import texts
from adapters.retry import SendFailed
from adapters.split import Measure, split_message
from bot.types import Outbound

log = structlog.get_logger(__name__)

EVERY_S = 1.0


class MessageGone(Exception):
    """A message to edit is no longer there: someone else deleted it."""


class Paced:
    """Calls `show(text)` with the latest text, at most once every `every_s`."""

    def __init__(
        self,
        show: Callable[[str], Awaitable[None]],
        every_s: float = EVERY_S,
        adapter: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._show = show
        self._every_s = every_s
        self._adapter = adapter
        self._clock = clock
        self._latest: str | None = None
        self._shown: str | None = None
        self._last = float("-inf")
        self._failed = False
        self._waiting = False  # the task sleeps until a show's time
        self._task: asyncio.Task[None] | None = None

    @property
    def shown(self) -> str | None:
        """The text the last successful show showed."""
        return self._shown

    async def update(self, text: str) -> None:
        """Show `text` when the pace allows (never raises)."""
        if self._failed:
            return
        if self._latest is None and self._shown is None:
            self._last = self._clock()  # the first show waits a pace too
        self._latest = text
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"preview:{self._adapter}")

    async def _run(self) -> None:
        while self._latest is not None and self._latest != self._shown:
            self._waiting = True
            await asyncio.sleep(max(0.0, self._last + self._every_s - self._clock()))
            self._waiting = False
            text = self._latest
            try:
                await self._show(text)
            except Exception as exc:  # a preview is a nicety: the final reply still comes
                log.warning("adapter.preview_failed", adapter=self._adapter,
                            error=f"{type(exc).__name__}: {exc}")  # fmt: skip
                self._failed = True
                return
            finally:
                # The pace runs from when the platform answered: the next show leaves a
                # pace after the platform had this one, so it arrives a pace later there
                # too, however long the request took on its way.
                self._last = self._clock()
            self._shown = text

    async def settle(self) -> None:
        """End the previews: drop one still waiting for its time, wait for one
        under way, then, when one was shown, for the pace, so whatever is shown
        next keeps it."""
        self._latest = None
        if self._task is not None:
            if self._waiting:
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._shown is not None or self._failed:
            await asyncio.sleep(max(0.0, self._last + self._every_s - self._clock()))

    async def cancel(self) -> None:
        """End the previews at once: cancel a show waiting or under way, and
        wait for its task to end; nothing is shown after this returns."""
        self._latest = None
        self._failed = True  # an update after this shows nothing
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class Editable(Protocol):
    """What a platform does for an `EditedReply`."""

    async def post(self, text: str, first: bool) -> str:
        """Send a new message (`first`: the reply's first, which quotes the
        message the turn answers); returns its id."""

    async def edit(self, message_id: str, text: str) -> None:
        """Change a message this reply posted; raises MessageGone when it was
        deleted."""

    async def delete(self, message_id: str) -> None:
        """Delete a message this reply posted (one deleted already is no error)."""


class EditedReply:
    """A `ReplyStream` made of messages posted early and edited (see the module doc)."""

    def __init__(
        self,
        platform: Editable,
        limit: int,
        measure: Measure = len,
        every_s: float = EVERY_S,
        adapter: str = "",
    ) -> None:
        self._platform = platform
        self._limit = limit
        self._measure = measure
        self._adapter = adapter
        self._posted: list[tuple[str, str]] = []  # (message id, text shown), in order
        self._paced = Paced(self._show, every_s, adapter)

    async def update(self, text: str) -> None:
        await self._paced.update(text)

    async def _show(self, text: str) -> None:
        await self._apply(split_message(text, self._limit, self._measure))

    async def _apply(self, chunks: list[str], repost: bool = False) -> None:
        """Make the posted messages show `chunks`; with `repost`, a message
        someone deleted is posted anew (with those after it, to keep the order),
        else its `MessageGone` is raised."""
        for index, chunk in enumerate(chunks):
            if index < len(self._posted) and await self._edit(index, chunk, repost):
                continue
            message_id = await self._platform.post(chunk, first=index == 0)
            self._posted.append((message_id, chunk))
        await self._delete_from(max(len(chunks), 1))

    async def _edit(self, index: int, chunk: str, repost: bool) -> bool:
        """Make posted message `index` show `chunk`; False when it is gone (with
        `repost`: it and those after it are dropped, to be posted again)."""
        message_id, shown = self._posted[index]
        if shown == chunk:
            return True
        try:
            await self._platform.edit(message_id, chunk)
        except MessageGone:
            if not repost:
                raise
            await self._delete_from(index + 1)
            self._posted.pop()
            return False
        self._posted[index] = (message_id, chunk)
        return True

    async def _delete_from(self, index: int) -> None:
        """Delete the posted messages from `index` on, the last first."""
        while len(self._posted) > index:
            await self._platform.delete(self._posted[-1][0])
            self._posted.pop()

    async def finish(self, message: Outbound) -> list[str]:
        """Edit (and post, and delete) until the chat shows `message.text`;
        raises SendFailed naming how many chunks are not as they should be."""
        await self._paced.settle()
        chunks = split_message(message.text, self._limit, self._measure)
        try:
            await self._apply(chunks, repost=True)
        except Exception as exc:
            done = sum(1 for (_, shown), chunk in zip(self._posted, chunks, strict=False)
                       if shown == chunk)  # fmt: skip
            raise SendFailed(len(chunks) - done, len(chunks), exc) from exc
        return [message_id for message_id, _ in self._posted]

    async def abort(self) -> None:
        """End the reply unfinished: no preview after this, and the messages
        posted are deleted (each failure logged, never raised)."""
        await self._paced.cancel()
        for message_id, _ in reversed(self._posted):
            try:
                await self._platform.delete(message_id)
            except Exception as exc:  # the turn is over either way
                log.warning("adapter.preview_left", adapter=self._adapter, message_id=message_id,
                            error=f"{type(exc).__name__}: {exc}")  # fmt: skip
        self._posted.clear()


async def replace_reply(
    platform: Editable,
    message_ids: Sequence[str],
    message: Outbound,
    limit: int,
    measure: Measure = len,
    adapter: str = "",
) -> list[str]:
    """Make the bot's messages `message_ids` (a reply sent earlier, in order)
    show `message.text` instead (`/retry`): each is edited to its new chunk, the
    chunks past them are posted, the messages past the chunks taken back
    (`delete_messages`); one deleted meanwhile is posted anew with those after
    it, so the order holds. When an edit fails otherwise (`adapter.replace_failed`),
    what is left of the old reply is taken back and the whole reply is posted
    anew. Returns the ids of the reply's messages; raises SendFailed when the
    posts fail."""
    chunks = split_message(message.text, limit, measure)
    reply = EditedReply(platform, limit, measure, adapter=adapter)
    reply._posted = [(message_id, "") for message_id in message_ids[: len(chunks)]]
    extra = list(message_ids[len(chunks) :])
    try:
        await reply._apply(chunks, repost=True)
    except Exception as exc:
        log.warning("adapter.replace_failed", adapter=adapter,
                    error=f"{type(exc).__name__}: {exc}")  # fmt: skip
        await delete_messages(platform, [m for m, _ in reply._posted] + extra, adapter)
        return await EditedReply(platform, limit, measure, adapter=adapter).finish(message)
    await delete_messages(platform, extra, adapter)
    return [message_id for message_id, _ in reply._posted]


async def delete_messages(platform: Editable, message_ids: Sequence[str], adapter: str = "") -> int:
    """Take the bot's messages `message_ids` out of the chat, the last first:
    deleted, or, where the platform keeps one (Telegram lets a bot delete for
    48 hours), edited to say it was taken back; a failure of both is logged as
    `adapter.retract_failed`, never raised. Returns how many were deleted."""
    deleted = 0
    for message_id in reversed(message_ids):
        try:
            await platform.delete(message_id)
        except Exception as exc:
            try:
                await platform.edit(message_id, texts.TAKEN_BACK)
            except Exception:  # it stays as it was; the history and memory let go of it
                log.warning("adapter.retract_failed", adapter=adapter, message_id=message_id,
                            error=f"{type(exc).__name__}: {exc}")  # fmt: skip
            continue
        deleted += 1
    return deleted
