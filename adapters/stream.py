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
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from adapters.retry import SendFailed
from adapters.split import Measure, split_message
from bot.types import Outbound

log = structlog.get_logger(__name__)

EVERY_S = 1.0


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
            self._task = asyncio.create_task(self._run())

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


class Editable(Protocol):
    """What a platform does for an `EditedReply`."""

    async def post(self, text: str, first: bool) -> str:
        """Send a new message (`first`: the reply's first, which quotes the
        message the turn answers); returns its id."""

    async def edit(self, message_id: str, text: str) -> None:
        """Change a message this reply posted."""

    async def delete(self, message_id: str) -> None:
        """Delete a message this reply posted."""


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
        self._posted: list[tuple[str, str]] = []  # (message id, text shown), in order
        self._paced = Paced(self._show, every_s, adapter)

    async def update(self, text: str) -> None:
        await self._paced.update(text)

    async def _show(self, text: str) -> None:
        await self._apply(split_message(text, self._limit, self._measure))

    async def _apply(self, chunks: list[str]) -> None:
        for index, chunk in enumerate(chunks):
            if index < len(self._posted):
                message_id, shown = self._posted[index]
                if shown != chunk:
                    await self._platform.edit(message_id, chunk)
                    self._posted[index] = (message_id, chunk)
            else:
                message_id = await self._platform.post(chunk, first=index == 0)
                self._posted.append((message_id, chunk))
        while len(self._posted) > max(len(chunks), 1):
            await self._platform.delete(self._posted[-1][0])
            self._posted.pop()

    async def finish(self, message: Outbound) -> list[str]:
        """Edit (and post, and delete) until the chat shows `message.text`;
        raises SendFailed naming how many chunks are not as they should be."""
        await self._paced.settle()
        chunks = split_message(message.text, self._limit, self._measure)
        try:
            await self._apply(chunks)
        except Exception as exc:
            done = sum(1 for (_, shown), chunk in zip(self._posted, chunks, strict=False)
                       if shown == chunk)  # fmt: skip
            raise SendFailed(len(chunks) - done, len(chunks), exc) from exc
        return [message_id for message_id, _ in self._posted]
