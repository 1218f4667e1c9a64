"""Nothing said in one user's DM reaches another user's prompt (docs/memory.md)."""

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


async def test_a_per_user_binding_never_brings_a_dm_into_a_group(tmp_path: Path) -> None:
    pin = "ZEBRA42PURPLE"
    extra = (
        "bindings: [{platform: telegram, soul: lark, memory: per-user}]\n"
        "adapters: {telegram: {dm_policy: open, groups: always}}\n"
    )
    async with (
        FakeAnthropic(latency_s=0.3) as fake,
        running(make_config(tmp_path, fake.url, extra), "telegram") as (runtime, platform),
    ):
        await platform.say(f"my bank pin is {pin}", user="alice", message_id="d1")
        await platform.replies(1)
        await runtime.memory.drain(5)
        # In the group: Carol keeps the session busy, so Bob's question and Alice's
        # hello share the next turn (Alice spoke last).
        await platform.say("morning all", user="carol", chat="g", dm=False, message_id="g1")
        await platform.say("what is the bank pin?", user="bob", chat="g", dm=False,
                           message_id="g2")  # fmt: skip
        await platform.say("hi everyone", user="alice", chat="g", dm=False, message_id="g3")
        await platform.replies(3)
        group_requests = fake.requests[1:]
        scopes = await runtime.db.run(
            lambda c: sorted(r[0] for r in c.execute("SELECT scope FROM memory_scopes"))
        )
        users = await runtime.db.run(
            lambda c: sorted({r[0] for r in c.execute("SELECT user FROM usage")})
        )
    assert len(group_requests) == 2
    for request in group_requests:
        assert pin not in json.dumps(request), "Alice's DM reached the group's prompt"
    assert scopes == ["chat:telegram:g", "user:telegram:alice"]
    assert users == ["telegram:alice", "telegram:chat:g"]  # the group's turns are the group's
