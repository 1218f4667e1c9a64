"""The trace writer: a turn hands its traces over and never waits for the disk.

Traces queued while a write is in flight go together in the next one (one
transaction for many turns under load); a failed batch is logged as
`memory.write_failed` and tried again (the traces wait in line, never
dropped). A batch the store refuses for a value one of its rows holds
(`refused_value`: the same row would fail at every try) is split in halves
until that row is alone; the row is then dropped, with one
`memory.write_refused` line (its soul, scope and session, never its text), and
everyone else's traces are written: one bad row never holds the queue.
Shutdown `drain`s the writer before the compile. A
trace of a scope erased after it was made is dropped (`memory.write_dropped`).
"""

from __future__ import annotations

import asyncio
import contextvars

import structlog

from bot.memory.store import NewTrace, TraceStore
from bot.storage.sql import refused_value

log = structlog.get_logger(__name__)

RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0


class TraceWriter:
    """One background writer task at a time, started by `add`."""

    def __init__(self, store: TraceStore) -> None:
        self._store = store
        self._queued: list[NewTrace] = []
        self._in_flight = 0
        self._writer: asyncio.Task[None] | None = None
        self._erased: dict[tuple[str, str], float] = {}

    def add(self, trace: NewTrace) -> None:
        """Queue a trace; the writer task starts when none runs."""
        self._queued.append(trace)
        if self._writer is None or self._writer.done():
            # Its own context: the turn that starts it does not lend it its log fields.
            self._writer = asyncio.create_task(
                self._write_queued(), name="traces", context=contextvars.Context()
            )

    def erase(self, soul: str, scope: str, at: float) -> None:
        """Drop every trace of the scope made up to `at`, queued now or later.
        A trace is queued when it is made, so only a batch in flight now can
        bring one back (when its write fails): the mark is kept until the
        writer is idle."""
        self._erased[(soul, scope)] = at
        self._queued = self._keep(self._queued)
        if not self._in_flight:
            self._erased.clear()

    def _keep(self, traces: list[NewTrace]) -> list[NewTrace]:
        if not self._erased:
            return traces
        kept: list[NewTrace] = []
        dropped: list[NewTrace] = []
        for trace in traces:
            erased = self._erased.get((trace.soul, trace.scope))
            (dropped if erased is not None and trace.created_at <= erased else kept).append(trace)
        if dropped:
            scopes = sorted({f"{t.soul} {t.scope}" for t in dropped})
            log.warning("memory.write_dropped", traces=len(dropped), scopes=scopes[:10],
                        reason="the scope was erased after these were said")  # fmt: skip
        return kept

    async def _write_queued(self) -> None:
        failures = 0
        while self._queued:
            batch, self._queued = self._keep(self._queued), []
            if not batch:
                continue
            self._in_flight = len(batch)
            try:
                left, exc = await self._write(batch)
                if exc is None:
                    failures = 0
                    continue
                # Never dropped: what is left goes back first in line, and is tried
                # again after a pause that doubles up to RETRY_MAX_S.
                failures += 1
                self._queued = left + self._queued
                delay = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (failures - 1))
                scopes = sorted({f"{t.soul} {t.scope}" for t in left})
                log.error("memory.write_failed", traces=len(left), scopes=scopes[:10],
                          error_class=type(exc).__name__, error=str(exc),
                          retry_in_s=delay)  # fmt: skip
                await asyncio.sleep(delay)
            finally:
                self._in_flight = 0
        self._erased.clear()  # idle: no trace made before an erase can come back

    async def _write(self, batch: list[NewTrace]) -> tuple[list[NewTrace], Exception | None]:
        """Store `batch`, splitting it around a row the store refuses (see the
        module docstring). Returns what is left unwritten, in order, and the
        error that left it (None: everything written or refused)."""
        batch = self._keep(batch)
        if not batch:
            return [], None
        try:
            await self._store.add(batch)
        except Exception as exc:
            if not refused_value(exc):
                return batch, exc
            if len(batch) == 1:
                [trace] = batch
                log.error("memory.write_refused", soul=trace.soul, scope=trace.scope,
                          session=trace.session, error_class=type(exc).__name__)  # fmt: skip
                return [], None
            half = len(batch) // 2
            left, failed = await self._write(batch[:half])
            if failed is not None:
                return left + batch[half:], failed
            return await self._write(batch[half:])
        return [], None

    def pending(self) -> int:
        """Traces not stored yet (queued or being written)."""
        return len(self._queued) + self._in_flight

    async def drain(self, seconds: float) -> int:
        """Wait up to `seconds` for the writes; returns how many remain."""
        if self._writer is not None and not self._writer.done():
            await asyncio.wait({self._writer}, timeout=seconds)
        return self.pending()

    async def close(self) -> None:
        """Stop the writer (what it still holds stays unwritten: `drain` first).
        Idempotent."""
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
