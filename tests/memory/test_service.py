"""Memory in a turn: the read_memory_page tool, the scope's index block, /forget."""

from __future__ import annotations

import json
from pathlib import Path

from bot import prompts
from bot.types import Route
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import make_config, running, user_texts

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
            await platform.say("the lighthouse opens at dawn", user="ann")
            await platform.replies(1)
            await runtime.memory.drain(5)
            await runtime.memory.compile_all()
            await platform.say("when does it open?", user="ann")
            await platform.replies(2)
    system = [b["text"] for b in fake.requests[-1]["system"]]
    index = [t for t in system if t.startswith("## Long-Term Memory (index)")]
    assert len(index) == 1 and "[[concepts/notes]]" in index[0]
