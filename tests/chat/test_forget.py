"""`/forget` forgets (issue 12): under the session lock, after the running turn
and any reflection of the scope, so nothing of the scope is left or comes
back; in a group only an admin may erase the group's memory."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from bot import prompts
from bot.app.runtime import Runtime
from tests.fakes.anthropic_fake import FakeAnthropic, Reply
from tests.kit import make_config, running, wait_until

SECRET = "ZEBRA42PURPLE"
HEARTBEAT_SOUL = (
    "---\nagentId: lark\nname: Lark\n---\n# SOUL.md\n\n<!-- SOUL_META -->\n- version: 1.0.0\n"
    "- min_conversation_tokens: 1\n\n<!-- SOUL_CORE -->\nYou are Lark.\n\n"
    "<!-- SOUL_MEMORY -->\n## Memory\n\n<!-- SOUL_AUTOBIOGRAPHY -->\n## Autobiography\n"
)


async def _rows(runtime: Runtime, sql: str) -> list[tuple[object, ...]]:
    return await runtime.db.run(lambda c: c.execute(sql).fetchall())


async def test_forget_during_a_running_turn_leaves_nothing_behind(tmp_path: Path) -> None:
    async with (
        FakeAnthropic(latency_s=1.0) as fake,
        running(make_config(tmp_path, fake.url)) as (runtime, platform),
    ):
        await platform.say(f"my bank pin is {SECRET}", user="ann", message_id="1")
        await wait_until(lambda: fake.requests)  # the turn is waiting for the model
        await platform.say("/forget confirm", user="ann", message_id="2")
        [reply] = await platform.replies(1)
        await runtime.memory.drain(5)
        await runtime.sessions.wait(5)
        history = await _rows(runtime, "SELECT content FROM history")
        traces = await _rows(runtime, "SELECT text FROM memory")
        folder = runtime.memory.wiki(runtime.registry.all()[0].id, "user:test:ann")
    assert reply.text == prompts.FORGET_DONE
    assert [m.text for m in platform.sent] == [prompts.FORGET_DONE]  # the turn was cancelled
    assert history == [] and traces == []
    assert folder is not None and not folder.root.exists()
    assert SECRET not in json.dumps([history, traces])


async def test_forget_drops_the_heartbeat_marks_of_the_scope(tmp_path: Path) -> None:
    async with (
        FakeAnthropic() as fake,
        running(make_config(tmp_path, fake.url)) as (runtime, platform),
    ):
        await platform.say("hello there", user="ann")
        await platform.replies(1)
        await runtime.db.run(
            lambda c: c.execute("INSERT INTO heartbeat_marks VALUES ('test:ann', 50)")
        )
        await platform.say("/forget confirm", user="ann")
        await platform.replies(2)
        marks = await _rows(runtime, "SELECT session, entry FROM heartbeat_marks")
    # History ids start again after the erase: a mark left behind would skip the
    # next 50 entries of the next conversation.
    assert marks == []


async def test_a_group_member_cannot_forget_the_group_but_an_admin_can(tmp_path: Path) -> None:
    config = make_config(tmp_path, "http://127.0.0.1:9", "admins: {telegram: [1]}\n")
    async with running(config, "telegram") as (runtime, platform):
        await platform.say("/forget confirm", user="2", chat="-100", dm=False, message_id="a")
        [refused] = await platform.replies(1)
        await runtime.db.run(
            lambda c: c.execute(
                "INSERT INTO history (session, generation, role, kind, content, tokens, ts)"
                " VALUES ('telegram:-100', 0, 'user', 'message', 'Bob: hi', 1, 0)"
            )
        )
        kept = await _rows(runtime, "SELECT content FROM history")
        await platform.say("/forget confirm", user="1", chat="-100", dm=False, message_id="b")
        await platform.replies(2)
        erased = await _rows(runtime, "SELECT content FROM history")
    assert refused.text == prompts.FORGET_GROUP_MEMBER
    assert kept == [("Bob: hi",)]
    assert platform.sent[1].text == prompts.FORGET_DONE_GROUP
    assert erased == []


async def test_forget_stops_a_reflection_in_flight(tmp_path: Path) -> None:
    folder = tmp_path / "workspaces" / "lark"
    folder.mkdir(parents=True)
    (folder / "SOUL.md").write_text(HEARTBEAT_SOUL)
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url, "heartbeat: {idle_minutes: 300}\n")
        fake.responder = lambda body: (
            Reply.of_tool_use("save_soul", {"reflection": f"Ann's pin is {SECRET}.",
                                            "memory_updates": [], "rule_updates": []})
            if body.get("tool_choice", {}).get("name") == "save_soul" else None
        )  # fmt: skip
        async with running(config) as (runtime, platform):
            await platform.say(f"my bank pin is {SECRET}, do not tell", user="ann")
            await platform.replies(1)
            fake.latency_s = 1.0  # the reflection waits on the model
            flushing = asyncio.create_task(runtime.reflector.flush())
            await wait_until(lambda: any(r.get("tool_choice") for r in fake.requests))
            fake.latency_s = 0.0
            await platform.say("/forget confirm", user="ann")
            await platform.replies(2)
            await flushing
            self_page = runtime.memory.wiki("lark", "user:test:ann")
    assert self_page is not None and not self_page.root.exists()
