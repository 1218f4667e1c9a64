"""One lock per wiki across processes, and the erase epoch it guards: a
`/forget` in one process and a compile in another (a second daemon on
PostgreSQL, `soulbot compile` beside the daemon on SQLite: two Runtimes on one
store stand for two processes) never leave the erased words anywhere."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from bot.cluster.wikilock import AdvisoryWikiLock, FileWikiLock, WikiLock, wiki_lock
from bot.errors import ScopeErased, StoreUnavailable, WikiBusy, WikiLockLost
from bot.memory import service
from bot.memory.compile import CompileResult
from bot.memory.store import NewTrace, TraceStore
from bot.storage.db import Database
from bot.types import Route
from tests.engines import SERVER, postgres_schema
from tests.fakes.anthropic_fake import FakeAnthropic, Gate
from tests.kit import RecordingPlatform, capture_logs, make_config, running

ANN = Route(soul="lark", scope="user:test:ann", session="test:ann", user="test:ann", is_dm=True)
WITHIN = 10.0  # seconds any awaited step may take before the test fails


@pytest.fixture(params=["sqlite", "postgresql"])
def store_config(request: pytest.FixtureRequest) -> Iterator[str]:
    """The config lines of the store both processes share."""
    if request.param == "sqlite":
        yield ""
    else:
        with postgres_schema() as url:
            yield f"store: {{url: {json.dumps(url)}}}\n"


async def ann_told_her_pin(runtime: object, platform: RecordingPlatform) -> None:
    await platform.say("my bank pin hint is heron", user="ann")
    await platform.replies(1)
    await runtime.memory.drain(5)  # type: ignore[attr-defined]


async def a_compile_held(
    fake: FakeAnthropic, daemon: object, platform: RecordingPlatform, other: object
) -> tuple[Gate, asyncio.Task[list[CompileResult]]]:
    """Ann's words in the daemon's store, and the other process's compile of
    them held at its filing call until the gate opens."""
    await ann_told_her_pin(daemon, platform)
    gate = fake.script_gate()
    compiling = asyncio.create_task(other.memory.compile_all())  # type: ignore[attr-defined]
    await asyncio.wait_for(gate.reached.wait(), WITHIN)
    return gate, compiling


def files_with(folder: Path, word: str) -> list[Path]:
    """The files under `folder` whose text holds `word`."""
    return [p for p in folder.rglob("*") if p.is_file() and word in p.read_text(errors="replace")]


async def test_a_forget_waits_for_a_compile_in_another_process_and_leaves_nothing(
    tmp_path: Path, store_config: str
) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url, store_config)
        async with running(config) as (daemon, platform), running(config) as (other, _):
            gate, compiling = await a_compile_held(fake, daemon, platform, other)
            forgetting = asyncio.create_task(daemon.sessions.forget(ANN))  # what /forget runs
            done, _ = await asyncio.wait({forgetting}, timeout=1.0)  # two tries of the lock
            assert not done
            assert await daemon.memory.store.count("lark", ANN.scope) == 2  # nothing erased yet
            gate.open()
            [compiled] = await asyncio.wait_for(compiling, WITHIN)
            await asyncio.wait_for(forgetting, WITHIN)
            assert compiled.traces == 2  # the compile ran to its end, then the forget erased it
            assert await daemon.memory.recall(ANN, "my bank pin hint heron", None) == ""
            assert await daemon.memory.store.count("lark", ANN.scope) == 0
            await platform.say("what was my hint?", user="ann")
            await platform.replies(2)
            assert "heron" not in json.dumps(fake.requests[-1])
    assert files_with(tmp_path / "data" / "memory", "heron") == []  # no page, no daily log


async def test_what_holds_a_wiki_excludes_a_compile_a_forget_and_a_self_note_elsewhere(
    tmp_path: Path, store_config: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "WIKI_WAIT_S", 0.6)  # two tries
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url, store_config)
        async with running(config) as (daemon, platform), running(config) as (other, _):
            await ann_told_her_pin(daemon, platform)
            before = len(fake.requests)
            # The daemon holds the wiki, as its forget, drop or compile does.
            held = wiki_lock(daemon.db, config.data_dir, ANN.soul, ANN.scope)
            async with held.hold() as taken:
                assert taken
                with capture_logs() as logs:
                    [result] = await other.memory.compile_all()
                with pytest.raises(WikiBusy):
                    await other.memory.forget(ANN)
                with pytest.raises(WikiBusy):
                    await other.memory.add_self_notes(ANN, "- a reflection", ["a fact"])
                assert await other.memory.store.count("lark", ANN.scope) == 2
            assert len(fake.requests) == before and result.traces == 0
            assert [e["event"] for e in logs if e["event"].startswith("wiki.")] == [
                "wiki.compile_busy"
            ]
            assert await other.memory.forget(ANN) == 2  # free again


async def backend_pid(db: Database) -> int:
    return int(await db.run(lambda c: c.execute("SELECT pg_backend_pid()").fetchone()[0]))


async def test_a_compile_whose_lock_went_with_its_connection_starts_over_from_the_store(
    tmp_path: Path,
) -> None:
    """PostgreSQL: the compile's connection is cut while it waits on the
    model, so the server drops its lock and a forget in the daemon runs at
    once. The compile takes the lock again on its new connection, finds the
    erase epoch moved, and writes nothing of what it had prepared."""
    with postgres_schema() as url:
        async with FakeAnthropic() as fake:
            config = make_config(tmp_path, fake.url, f"store: {{url: {json.dumps(url)}}}\n")
            async with running(config) as (daemon, platform), running(config) as (other, _):
                gate, compiling = await a_compile_held(fake, daemon, platform, other)
                pid = await backend_pid(other.db)
                with psycopg.connect(url, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                with pytest.raises(StoreUnavailable):
                    await other.db.run(lambda c: c.execute("SELECT 1"))  # it meets the cut
                assert await asyncio.wait_for(daemon.memory.forget(ANN), WITHIN) == 2
                with capture_logs() as logs:
                    gate.open()
                    [result] = await asyncio.wait_for(compiling, WITHIN)
    events = [e["event"] for e in logs if e["event"].startswith("wiki.")]
    assert events == ["wiki.lock_retaken", "wiki.compile_restarted"]
    assert result.traces == 0 and result.pages == ()
    assert files_with(tmp_path / "data" / "memory", "heron") == []


# -- the lock's contract, on both implementations ---------------------------------------


@pytest.fixture(params=["file", "advisory"])
async def two_processes(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[type[WikiLock], Database, Database]]:
    """Two databases on one store: two processes, as a wiki lock sees them."""
    with contextlib.ExitStack() as stack:
        kind: type[WikiLock] = FileWikiLock if request.param == "file" else AdvisoryWikiLock
        target: Path | str = tmp_path / "soulbot.db"
        if kind is AdvisoryWikiLock:
            target = stack.enter_context(postgres_schema())
        first, second = Database(target), Database(target)
        await first.open()
        await second.open()
        try:
            yield kind, first, second
        finally:
            await first.close()
            await second.close()


async def test_a_wiki_lock_is_held_by_one_process_at_a_time(
    two_processes: tuple[type[WikiLock], Database, Database], tmp_path: Path
) -> None:
    kind, first, second = two_processes
    here = wiki_lock(first, tmp_path, "lark", ANN.scope)
    there = wiki_lock(second, tmp_path, "lark", ANN.scope)
    bob = wiki_lock(second, tmp_path, "lark", "user:test:bob")
    assert isinstance(here, kind)
    assert not await here.held()
    assert await here.try_take()
    assert await here.held()
    await here.keep()  # held: nothing to do
    assert not await there.try_take()
    with pytest.raises(WikiLockLost):
        await there.keep()
    assert await bob.try_take()  # another wiki's is free
    await here.give_back()
    assert not await here.held()
    async with there.hold() as taken:
        assert taken
        async with here.hold(wait_s=0.6) as again:
            assert not again
    assert await here.try_take()
    await here.give_back()
    await bob.give_back()


async def test_an_advisory_lock_lost_with_its_connection_is_taken_again(
    tmp_path: Path,
) -> None:
    with postgres_schema() as url:
        db, other = Database(url), Database(url)
        await db.open()
        await other.open()
        try:
            lock = wiki_lock(db, tmp_path, "lark", ANN.scope)
            assert await lock.try_take()
            with psycopg.connect(SERVER, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (await backend_pid(db),))
            with pytest.raises(StoreUnavailable):
                await db.run(lambda c: c.execute("SELECT 1"))
            assert not await lock.held()  # the server dropped it with the connection
            await lock.keep()
            assert await lock.held()
            assert not await wiki_lock(other, tmp_path, "lark", ANN.scope).try_take()
            await lock.give_back()
        finally:
            await db.close()
            await other.close()


# -- the erase epoch ------------------------------------------------------------------


async def test_forget_and_a_drop_move_the_epoch_and_a_stale_index_write_is_refused(
    tmp_path: Path,
) -> None:
    db = Database(tmp_path / "soulbot.db")
    await db.open()
    try:
        store = TraceStore(db)
        [trace] = await store.add([NewTrace("lark", ANN.scope, ANN.session, "user", "Ann",
                                            "my bank pin hint is heron", 1.0)])  # fmt: skip
        assert await store.erase_epoch("lark", ANN.scope) == 0
        await store.record_folds("lark", ANN.scope, "concepts/notes", [trace])
        assert await store.drop_page("lark", "user:test:bob", "concepts/notes") == []
        assert await store.erase_epoch("lark", ANN.scope) == 0  # nothing of Ann's went
        await store.drop_page("lark", ANN.scope, "concepts/notes")
        assert await store.erase_epoch("lark", ANN.scope) == 1
        await store.forget("lark", ANN.scope)
        assert await store.erase_epoch("lark", ANN.scope) == 2
        assert await store.erase_epoch("lark", "user:test:bob") == 0
        with pytest.raises(ScopeErased):
            await store.index_page("lark", ANN.scope, "concepts/notes", "heron", 2.0, epoch=1)
        assert await store.count("lark", ANN.scope) == 0
        assert (await store.search("lark", [ANN.scope], ["heron"], 10)).ids["heron"] == []
        await store.index_page("lark", ANN.scope, "concepts/notes", "heron", 2.0, epoch=2)
        assert (await store.search("lark", [ANN.scope], ["heron"], 10)).ids["heron"] != []
    finally:
        await db.close()
