"""Memory in a turn: the read_memory_page tool, the scope's index block, /forget."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path

import pytest
from filelock import FileLock

from bot import prompts
from bot.app.runtime import Runtime
from bot.cluster.wikilock import wiki_lock_path
from bot.errors import CompileFailed
from bot.types import Route
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import RecordingPlatform, capture_logs, make_config, running, user_texts

ANN = Route(soul="lark", scope="user:test:ann", session="test:ann", user="test:ann", is_dm=True)


async def tool(runtime_memory: object, route: Route, page_id: str) -> dict[str, object]:
    [read] = runtime_memory.tools(route)  # type: ignore[attr-defined]
    result: dict[str, object] = json.loads(await read.handler({"id": page_id}))
    return result


async def test_read_memory_page_answers(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (runtime, _):
        memory = runtime.memory
        bad = await tool(memory, ANN, "../SOUL")
        assert bad["details"] == {"code": "INVALID_WIKI_PAGE_ID"}
        missing = await tool(memory, ANN, "concepts/nothing")
        assert missing["details"] == {"code": "PAGE_NOT_FOUND"}
        memory.record(ANN, "user", "Ann", "Ann keeps bees on her roof")
        await memory.drain(5)
        await memory.compile_all()
        found = await tool(memory, ANN, "concepts/notes")
        [page] = found["pages"]  # type: ignore[misc]
        assert page["wiki"] == "private"
        assert page["summary"] == "Notes compiled from conversations"
        assert "Ann keeps bees" in page["body"]


async def test_the_scope_index_joins_the_system_prompt(tmp_path: Path) -> None:
    async with (
        FakeAnthropic() as fake,
        running(make_config(tmp_path, fake.url)) as (
            runtime,
            platform,
        ),
    ):
        await platform.say("I keep bees on my roof", user="ann")
        await platform.replies(1)
        await runtime.memory.drain(5)
        await runtime.memory.compile_all()
        await platform.say("how are the bees?", user="ann")
        await platform.replies(2)
        system = fake.requests[-1]["system"]
    index = [b for b in system if b["text"].startswith("## Long-Term Memory of this conversation")]
    assert len(index) == 1
    assert "[[concepts/notes]]: Notes compiled from conversations" in index[0]["text"]
    assert "cache_control" in index[0]  # the scope's block ends at its own breakpoint
    assert system.index(index[0]) > 0  # after the soul's blocks


async def test_forget_erases_the_scope(tmp_path: Path) -> None:
    async with (
        FakeAnthropic() as fake,
        running(make_config(tmp_path, fake.url)) as (
            runtime,
            platform,
        ),
    ):
        await platform.say("my bank pin hint is heron", user="ann")
        await platform.replies(1)
        await runtime.memory.drain(5)
        await runtime.memory.compile_all()
        wiki = tmp_path / "data" / "memory" / "lark" / "user" / "test" / "ann"
        assert (wiki / "concepts" / "notes.md").exists()
        await platform.say("/forget", user="ann")
        replies = await platform.replies(2)
        assert replies[-1].text == prompts.FORGET_ASK
        assert wiki.exists()  # nothing is erased before the confirmation
        await platform.say("/forget confirm", user="ann")
        replies = await platform.replies(3)
        assert replies[-1].text == prompts.FORGET_DONE
        assert not wiki.exists()
        assert await runtime.memory.store.count("lark", "user:test:ann") == 0
        await platform.say("what was my hint?", user="ann")
        await platform.replies(4)
        assert "heron" not in json.dumps(fake.requests[-1])
        rows = await runtime.db.run(
            lambda c: c.execute("SELECT content FROM history WHERE session = 'test:ann'").fetchall()
        )
        assert all("heron" not in r[0] for r in rows)
    assert user_texts(fake.requests[-1])[-1] == "what was my hint?"


async def test_forget_refuses_a_shared_scope(tmp_path: Path) -> None:
    config = make_config(tmp_path, "http://127.0.0.1:9", "memory: {scope: shared}\n")
    async with running(config) as (_, platform):
        await platform.say("/forget", user="bob", chat="g1", dm=False)
        [reply] = await platform.replies(1)
    assert reply.text == prompts.FORGET_SHARED
    assert "/forget" in prompts.HELP


async def test_a_shared_compile_reaches_the_soul_prompt(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url, "memory: {scope: shared}\n")
        async with running(config) as (runtime, platform):
            # A group bound to the shared scope (a DM never is).
            await platform.say("the lighthouse opens at dawn", user="ann", chat="g", dm=False)
            await platform.replies(1)
            await runtime.memory.drain(5)
            await runtime.memory.compile_all()
            await platform.say("when does it open?", user="ann", chat="g", dm=False)
            await platform.replies(2)
    system = [b["text"] for b in fake.requests[-1]["system"]]
    index = [t for t in system if t.startswith("## Long-Term Memory (index)")]
    assert len(index) == 1 and "[[concepts/notes]]" in index[0]


SHARED_ROUTE = Route(soul="lark", scope="shared", session="test:g", user="test:ann", is_dm=False)
SECRET_PAGE = "---\nsummary: Secret\n---\nthe launch code is 0000\n"


async def test_read_memory_page_reads_no_link_out_of_the_wiki(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text(SECRET_PAGE)
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (runtime, _):
        shared = tmp_path / "workspaces" / "lark" / "memory"
        (shared / "concepts").mkdir()
        (shared / "concepts" / "secret.md").symlink_to(outside)
        bob = tmp_path / "data" / "memory" / "lark" / "user" / "test" / "bob"
        (bob / "entities").mkdir(parents=True)
        (bob / "entities" / "pin.md").write_text(SECRET_PAGE)
        ann = tmp_path / "data" / "memory" / "lark" / "user" / "test" / "ann"
        ann.mkdir(parents=True)
        (ann / "entities").symlink_to(bob / "entities", target_is_directory=True)
        for page_id in ("concepts/secret", "entities/pin"):
            answer = await tool(runtime.memory, ANN, page_id)
            assert answer["details"] == {"code": "PAGE_NOT_FOUND"}, page_id
            assert "0000" not in json.dumps(answer)


async def test_a_compile_writes_through_no_link_out_of_the_wiki(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text(SECRET_PAGE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (runtime, _):
        shared = tmp_path / "workspaces" / "lark" / "memory"
        (shared / "concepts").mkdir()
        (shared / "concepts" / "notes.md").symlink_to(outside)
        ann = tmp_path / "data" / "memory" / "lark" / "user" / "test" / "ann"
        ann.mkdir(parents=True)
        (ann / "concepts").symlink_to(elsewhere, target_is_directory=True)
        runtime.memory.record(SHARED_ROUTE, "user", "Ann", "the lighthouse opens at dawn")
        runtime.memory.record(ANN, "user", "Ann", "Ann keeps bees on her roof")
        await runtime.memory.drain(5)
        results = {r.scope: r for r in await runtime.memory.compile_all()}
    assert outside.read_text() == SECRET_PAGE
    assert list(elsewhere.iterdir()) == []
    for scope in ("shared", "user:test:ann"):  # the plain fake files nothing: the default page
        [conflict] = [c for c in results[scope].conflicts if not c.startswith("filing: ")]
        assert conflict.startswith("concepts/notes: ") and "leads out" in conflict
        assert results[scope].pages == ()


async def test_a_wiki_whose_meta_leads_out_fails_alone(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "index.json").write_text('{"watermark": 0}\n')
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url)
        async with running(config) as (runtime, platform):
            await platform.say("ann likes tea", user="ann")
            await platform.say("bob likes coffee", user="bob")
            await platform.replies(2)
            await runtime.memory.drain(5)
            bob = tmp_path / "data" / "memory" / "lark" / "user" / "test" / "bob"
            bob.mkdir(parents=True)
            (bob / ".meta").symlink_to(outside)
            with pytest.raises(CompileFailed) as failed:
                await runtime.memory.compile_all()
    assert [r.scope for r in failed.value.results] == ["user:test:ann"]
    assert len(failed.value.failures) == 1 and "user:test:bob" in failed.value.failures[0]


async def ann_said_something(runtime: Runtime, platform: RecordingPlatform) -> None:
    """Ann's message answered and its traces stored: her wiki has something to compile."""
    await platform.say("ann likes green tea", user="ann")
    await platform.replies(1)
    await runtime.memory.drain(5)


async def test_one_compile_per_wiki_at_a_time(tmp_path: Path) -> None:
    async with FakeAnthropic(latency_s=0.2) as fake:
        config = make_config(tmp_path, fake.url)
        async with running(config) as (runtime, platform):
            await ann_said_something(runtime, platform)
            before = len(fake.requests)
            with capture_logs() as logs:
                both = await asyncio.gather(runtime.memory.compile_all(),
                                            runtime.memory.compile_all())  # fmt: skip
            compiles = fake.requests[before:]
    assert [len(r) for r in both] in ([1, 0], [0, 1], [1, 1])
    assert sum(r.traces for results in both for r in results) == 2  # folded once
    assert len(compiles) == 2  # one filing and one page merge, not twice each
    assert len([e for e in logs if e["event"] == "wiki.compiled"]) == 1
    gc.collect()
    assert len(runtime.memory._locks) == 0  # no lock is left behind once no one holds it


async def test_a_compile_in_another_process_is_left_to_finish(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url)
        async with running(config) as (runtime, platform):
            await ann_said_something(runtime, platform)
            before = len(fake.requests)
            path = wiki_lock_path(tmp_path / "data", "lark", "user:test:ann")
            path.parent.mkdir(parents=True)
            # A lock of its own file description: to flock, another process.
            with FileLock(path, thread_local=False), capture_logs() as logs:
                [result] = await runtime.memory.compile_all()
            after = len(fake.requests)
            [again] = await runtime.memory.compile_all()
    assert result.traces == 0 and after == before
    assert [e["reason"] for e in logs if e["event"] == "wiki.compile_busy"] == [
        "another process is compiling this wiki"
    ]
    assert again.traces == 2
