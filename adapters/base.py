"""The seam between platforms and the runtime.

An adapter turns a platform event into an `Inbound` and hands it to the
`deliver` callback it was started with; the runtime answers with `send`, or
with `stream` (a reply shown while the model writes it, adapters/stream.py)
where the platform and the config allow it.
`stop` ends the intake (replies to turns in flight can still be sent);
`close` releases everything once the last reply is out.
`connected` and `last_seen` are what the health file and the metrics say of it:
whether the connection is up as far as the platform library knows, and when the
platform was last heard from, so a connection that is up but hears nothing (deaf)
shows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import structlog

from bot.types import Inbound, Outbound, ReplyStream

log = structlog.get_logger(__name__)


@contextlib.asynccontextmanager
async def repeating(action: Callable[[], Awaitable[object]], every_s: float) -> AsyncIterator[None]:
    """Run `action` now and every `every_s` seconds while the context is open
    (a typing indicator); the first failure ends the repeats, quietly."""

    async def repeat() -> None:
        while True:
            try:
                await action()
            except Exception as exc:  # an indicator is a nicety, never a failure
                log.debug("adapter.typing_failed", error=f"{type(exc).__name__}: {exc}")
                return
            await asyncio.sleep(every_s)

    task = asyncio.create_task(repeat())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


Deliver = Callable[[Inbound], Coroutine[Any, Any, None]]


class Adapter(Protocol):
    """A platform connection."""

    name: str

    async def start(self, deliver: Deliver) -> None:
        """Connect and begin handing inbound messages to `deliver`."""

    async def stop(self) -> None:
        """Take no more messages; `send` keeps working. Idempotent."""

    async def send(self, message: Outbound) -> list[str]:
        """Deliver a reply, split to the platform's limit; returns the platform
        ids of the messages sent (for replies to them, after a restart too).
        Raises on failure."""

    def stream(self, message: Outbound) -> ReplyStream | None:
        """A reply to stream into the chat `message` addresses (its text is
        ignored), or None where this adapter does not stream (streaming off,
        or not possible there): the reply is then sent whole with `send`."""

    def notes(self) -> list[str]:
        """Lines for `/soul status` about what the platform lets the bot see
        (Telegram's privacy mode); [] when there is nothing to say."""

    def typing(self, chat: Inbound) -> AbstractAsyncContextManager[None]:
        """Show "typing" in the chat of `chat` while the context is open;
        never raises (a failed indicator is not worth a failed turn)."""

    def connected(self) -> bool:
        """Whether the connection is up as far as the platform library knows
        (started, not stopped, not given up); cheap, and safe to call from
        another thread (the metrics endpoint's)."""

    def last_seen(self) -> float | None:
        """When the platform was last heard from (`time.time()`): a message, or
        whatever shows the connection alive with nothing to deliver (an answered
        Telegram poll, a Discord gateway message or heartbeat answer); None when
        there is no platform to fall silent (the terminal) or before the first.
        Cheap, and safe to call from another thread."""

    async def close(self) -> None:
        """Release the connection. Idempotent."""
