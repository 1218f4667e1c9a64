"""Nothing said in one user's DM reaches another user's prompt (DESIGN §5)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import make_config, running

FACT = "zanzibar-42"


async def test_a_dm_fact_never_reaches_another_user(tmp_path: Path) -> None:
    async with (
        FakeAnthropic() as fake,
        running(make_config(tmp_path, fake.url)) as (
            runtime,
            platform,
        ),
    ):
        await platform.say(f"My locker code word is {FACT}, keep it safe", user="alice")
        await platform.replies(1)
        await runtime.memory.drain(5)
        results = await runtime.memory.compile_all()
        assert any(r.scope == "user:test:alice" and r.pages for r in results)
        before_bob = len(fake.requests)

        # Bob, in his DM: the recall, his index and the tool must not give Alice's fact.
        fake.script_tool_use("read_memory_page", {"id": "concepts/notes"})
        await platform.say("What is the locker code word? Check your notes.", user="bob")
        await platform.replies(2)
        # Bob again, in a group chat.
        fake.script_tool_use("read_memory_page", {"id": "concepts/notes"})
        await platform.say("locker code word anyone?", user="bob", chat="g1", dm=False)
        await platform.replies(3)
        bob_requests = fake.requests[before_bob:]

        # Alice, with a fresh history: her own memory does come back through recall
        # (so the check above is not vacuous).
        await platform.say("/reset", user="alice")
        await platform.say("remind me: what was my locker code word?", user="alice")
        await platform.replies(5)
        alice_request = fake.requests[-1]

    assert len(bob_requests) == 4  # two turns, each with a tool round
    tool_results = [
        block
        for request in bob_requests
        for message in request["messages"]
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert len(tool_results) == 2
    for request in bob_requests:
        assert FACT not in json.dumps(request), "Alice's fact reached Bob's prompt"
    assert FACT in json.dumps(alice_request["messages"][-1])
