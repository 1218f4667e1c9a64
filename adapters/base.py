"""The seam between platforms and the runtime.

An adapter turns a platform event into an `Inbound` and hands it to the
`deliver` callback it was started with; the runtime answers with `send`.
`stop` ends the intake (replies to turns in flight can still be sent);
`close` releases everything once the last reply is out.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Inbound:
    """One message from a platform, in our own terms."""

    platform: str
    chat_id: str
    user_id: str
    user_name: str
    text: str
    is_dm: bool
    mentions_bot: bool = False
    reply_to_bot: bool = False
    message_id: str = ""
    thread_id: str | None = None
    guild_id: str | None = None
    ts: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Outbound:
    """One reply for a chat; `reply_to` is the platform message id it answers."""

    platform: str
    chat_id: str
    text: str
    thread_id: str | None = None
    reply_to: str | None = None


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


class AdapterStartError(Exception):
    """An adapter could not connect; the message says why and what to check,
    and never holds a secret."""


Deliver = Callable[[Inbound], Coroutine[Any, Any, None]]


class Adapter(Protocol):
    """A platform connection."""

    name: str

    async def start(self, deliver: Deliver) -> None:
        """Connect and begin handing inbound messages to `deliver`."""

    async def stop(self) -> None:
        """Take no more messages; `send` keeps working. Idempotent."""

    async def send(self, message: Outbound) -> None:
        """Deliver a reply, split to the platform's limit. Raises on failure."""

    def typing(self, chat: Inbound) -> AbstractAsyncContextManager[None]:
        """Show "typing" in the chat of `chat` while the context is open;
        never raises (a failed indicator is not worth a failed turn)."""

    async def close(self) -> None:
        """Release the connection. Idempotent."""
