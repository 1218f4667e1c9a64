"""Sends that try again after transient errors (tenacity), and say what was lost.

A reply is sent as a few API calls, one per chunk. A call that fails with an
error the adapter calls transient (a lost connection, a timeout, a 5xx) is
tried again after a wait that doubles, with jitter, up to `Backoff.attempts`
tries in all; each wait is logged as `adapter.send_retry`. Any other error (a
refused request, a blocked bot) is not tried again. Rate limits are the SDKs'
(PTB's AIORateLimiter, discord.py's buckets): a 429 never reaches this.

`send_chunks` sends the chunks in order and stops at the first that still
fails, raising `SendFailed`: its text says how many chunks of how many were
not delivered and why, and the caller (the session) logs it as one line.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

log = structlog.get_logger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """How a failed call is tried again: `attempts` tries in all, the first wait
    `first_s` (plus up to as much jitter), doubling up to `max_s`. The defaults
    give up after about 4 s; tests pass tiny waits."""

    attempts: int = 4
    first_s: float = 0.5
    max_s: float = 4.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.first_s < 0 or self.max_s < self.first_s:
            raise ValueError(f"a Backoff needs attempts >= 1 and 0 <= first_s <= max_s: {self}")


BACKOFF = Backoff()  # the adapters' default


class SendFailed(Exception):
    """A reply was not (entirely) delivered: `undelivered` of its `chunks` chunks
    did not go out, because of `__cause__`, the last error."""

    def __init__(self, undelivered: int, chunks: int, error: BaseException) -> None:
        super().__init__(
            f"{undelivered} of {chunks} chunks not delivered: {type(error).__name__}: {error}"
        )
        self.undelivered = undelivered
        self.chunks = chunks


async def retried(
    call: Callable[[], Awaitable[T]],
    *,
    transient: Callable[[BaseException], bool],
    backoff: Backoff,
    adapter: str,
) -> T:
    """Await `call()`, again after each transient error, up to `backoff.attempts`
    tries; raises the last error (transient or not) as it was."""

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "adapter.send_retry",
            adapter=adapter,
            attempt=state.attempt_number,
            wait_s=round(state.next_action.sleep, 3) if state.next_action else 0.0,
            error=f"{type(error).__name__}: {error}",
        )

    retrying = AsyncRetrying(
        stop=stop_after_attempt(backoff.attempts),
        wait=wait_exponential(multiplier=backoff.first_s, max=backoff.max_s)
        + wait_random(0, backoff.first_s),
        retry=retry_if_exception(transient),
        before_sleep=before_sleep,
        reraise=True,
    )

    async def attempt() -> T:  # a coroutine function: tenacity awaits only those
        return await call()

    return await retrying(attempt)


async def send_chunks(chunks: Sequence[str], send: Callable[[str], Awaitable[object]]) -> None:
    """`send` each chunk in order; raises SendFailed at the first that fails,
    naming how many (that one and those after it) were not delivered."""
    for index, chunk in enumerate(chunks):
        try:
            await send(chunk)
        except Exception as exc:
            raise SendFailed(len(chunks) - index, len(chunks), exc) from exc
