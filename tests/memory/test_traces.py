"""The trace writer (bot/memory/traces.py): batches, and drops what belongs to a
scope erased after it was said."""

from __future__ import annotations

import asyncio

import pytest

from bot.memory.store import NewTrace, TraceStore
from bot.memory.traces import TraceWriter
from bot.storage.db import Database
from tests.kit import capture_logs


class SlowStore:
    """A stand-in for TraceStore.add that holds each write until released."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = asyncio.Event()
        self.writing = asyncio.Event()

    async def add(self, traces: list[NewTrace]) -> None:
        self.writing.set()
        await self.release.wait()
        self.batches.append([t.text for t in traces])


def trace(scope: str, text: str, at: float) -> NewTrace:
    return NewTrace("lark", scope, "test:s", "user", "Ann", text, at)


async def test_a_trace_of_an_erased_scope_is_dropped_and_logged() -> None:
    store = SlowStore()
    writer = TraceWriter(store)  # type: ignore[arg-type]
    writer.add(trace("user:test:ann", "first", 1.0))
    await asyncio.wait_for(store.writing.wait(), 5)  # "first" is being written
    writer.add(trace("user:test:ann", "my pin is 1234", 2.0))
    writer.add(trace("user:test:bob", "bob's words", 2.5))
    with capture_logs() as logs:
        writer.erase("lark", "user:test:ann", 5.0)
        writer.add(trace("user:test:ann", "said after the erase", 6.0))
        store.release.set()
        assert await writer.drain(5) == 0
    assert store.batches == [["first"], ["bob's words", "said after the erase"]]
    [dropped] = [e for e in logs if e["event"] == "memory.write_dropped"]
    assert dropped["traces"] == 1 and dropped["scopes"] == ["lark user:test:ann"]
    assert writer._erased == {}  # idle: the mark is not kept for months of erasures


async def test_an_erased_trace_in_a_failed_batch_does_not_come_back() -> None:
    store = FlakyStore(fails=1)
    writer = TraceWriter(store)  # type: ignore[arg-type]
    writer.add(trace("user:test:ann", "my pin is 1234", 1.0))
    writer.add(trace("user:test:bob", "bob's words", 1.5))
    await asyncio.sleep(0)  # the batch is in flight, and its write fails
    writer.erase("lark", "user:test:ann", 5.0)
    assert writer._erased  # kept while the batch may come back
    assert await writer.drain(5) == 0
    assert store.batches == [["bob's words"]] and writer._erased == {}


class FlakyStore:
    """A stand-in for TraceStore.add that fails its first `fails` writes."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.batches: list[list[str]] = []

    async def add(self, traces: list[NewTrace]) -> None:
        if self.fails:
            self.fails -= 1
            raise OSError(28, "No space left on device")
        self.batches.append([t.text for t in traces])


async def test_a_failed_write_is_tried_again_not_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bot.memory.traces.RETRY_FIRST_S", 0.01)
    store = FlakyStore(fails=2)
    writer = TraceWriter(store)  # type: ignore[arg-type]
    with capture_logs() as logs:
        writer.add(trace("user:test:ann", "first", 1.0))
        writer.add(trace("user:test:ann", "second", 2.0))
        assert await writer.drain(5) == 0
    assert [t for batch in store.batches for t in batch] == ["first", "second"]
    failed = [e for e in logs if e["event"] == "memory.write_failed"]
    assert [e["retry_in_s"] for e in failed] == [0.01, 0.02]


async def test_a_row_the_store_refuses_is_dropped_alone_and_everyone_elses_written(
    db: Database,
) -> None:
    """A lone surrogate (both engines) or a NUL (PostgreSQL's `text`) in one trace:
    the batch is split until that row is alone, it is dropped with one line, and
    every other person's traces are stored at once, without a retry."""
    store = TraceStore(db)
    writer = TraceWriter(store)
    bad = ["\ud800"] + (["\x00"] if db.engine == "postgresql" else [])
    scopes = [f"user:test:p{n}" for n in range(7)]
    texts = [f"note {n}" for n in range(7)]
    texts[2] += bad[0]
    texts[5] += bad[-1]
    with capture_logs() as logs:
        for n, (scope, text) in enumerate(zip(scopes, texts, strict=True)):
            writer.add(trace(scope, text, float(n)))
        assert await writer.drain(10) == 0
    stored = [t.text for scope in scopes for t in await store.after("lark", scope, 0)]
    assert stored == [f"note {n}" for n in (0, 1, 3, 4, 6)]
    refused = [e for e in logs if e["event"] == "memory.write_refused"]
    assert [(e["soul"], e["scope"], e["session"]) for e in refused] == [
        ("lark", scopes[2], "test:s"),
        ("lark", scopes[5], "test:s"),
    ]
    assert all("note" not in str(e) for e in refused)  # what a person said is not logged
    assert not [e for e in logs if e["event"] == "memory.write_failed"]
