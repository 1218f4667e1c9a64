"""Sessions, the router and the history, through the runtime and the fake model."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot import prompts
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import RecordingPlatform, capture_logs, make_config, running, user_texts, wait_until


async def test_a_message_is_answered(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (_, platform):
        await platform.say("hello there", message_id="m1")
        [reply] = await platform.replies(1)
    assert reply.text.endswith("hello there")
    assert (reply.platform, reply.chat_id, reply.reply_to) == ("test", "u1", "m1")


async def test_messages_during_a_turn_are_answered_together(tmp_path: Path) -> None:
    async with (
        FakeAnthropic(latency_s=0.5) as fake,
        running(make_config(tmp_path, fake.url)) as (runtime, platform),
    ):
        await platform.say("first")
        await wait_until(lambda: fake.requests)  # the first turn has reached the model
        await platform.say("second")
        await platform.say("third")
        replies = await platform.replies(2)
        await runtime.sessions.wait(5)
        assert len(fake.requests) == 2
        fake.latency_s = 0
        await platform.say("fourth")
        await platform.replies(3)
    assert user_texts(fake.requests[1])[-2:] == ["second", "third"]
    assert "first" in user_texts(fake.requests[1])
    assert len(replies) == 2
    # The history keeps the conversation's order: a reply follows what it answered.
    order = [
        (m["role"], b["text"].split("\n")[-1])
        for m in fake.requests[2]["messages"]
        for b in m["content"]
    ]
    assert order == [
        ("user", "first"), ("assistant", "first"),
        ("user", "second"), ("user", "third"), ("assistant", "third"),
        ("user", order[-2][1]), ("user", "fourth"),
    ]  # fmt: skip


async def test_sessions_run_in_parallel_and_in_order(tmp_path: Path) -> None:
    """Every message is answered once, in order within its session; messages that
    arrive during a turn may share the next turn (how many do depends on timing)."""
    wanted = {user: [f"{user}-{i}" for i in range(5)] for user in ("a", "b", "c")}

    def answered(platform: RecordingPlatform, user: str) -> str:
        return "\n".join(m.text for m in platform.sent if m.chat_id == user)

    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (_, platform):
        for i in range(5):
            for user in wanted:
                await platform.say(f"{user}-{i}", user=user, message_id=f"{user}{i}")
        await wait_until(
            lambda: all(
                text in answered(platform, u) for u, texts in wanted.items() for text in texts
            ),
            within=20,
        )
    for user, texts in wanted.items():
        replies = [m.text for m in platform.sent if m.chat_id == user]
        assert all(sum(text in reply for reply in replies) == 1 for text in texts)
        joined = answered(platform, user)
        assert [joined.index(text) for text in texts] == sorted(joined.index(t) for t in texts)
    assert len(fake.requests) == len(platform.sent) <= 15


WHERE = "(model.base_url / ANTHROPIC_BASE_URL)"


async def test_a_failed_call_keeps_the_message(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (_, platform):
        fake.script_error(529)
        with capture_logs() as logs:
            await platform.say("remember the blue door")
            [apology] = await platform.replies(1)
        await platform.say("did you get that?")
        replies = await platform.replies(2)
    assert apology.text == prompts.APOLOGY
    # Its cause travels with it, for the adapter whose reader is the operator.
    assert apology.cause == f"model overloaded (HTTP 529) at {fake.url} {WHERE}"
    assert replies[1].cause is None
    failed = [e for e in logs if e["event"] == "turn.failed"]
    assert len(failed) == 1 and failed[0]["error_class"] == "OverloadedError"
    assert user_texts(fake.requests[1])[0] == "remember the blue door"
    assert replies[1].text.endswith("did you get that?")


async def test_a_refused_request_is_not_answered_try_again(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (_, platform):
        fake.script_error(400, message="prompt is too long")
        with capture_logs() as logs:
            await platform.say("a question the API refuses")
            [reply] = await platform.replies(1)
    assert reply.text == prompts.MODEL_REJECTED
    assert reply.cause == "model refused the request (HTTP 400): prompt is too long"
    assert "try again" not in reply.text
    failed = [e for e in logs if e["event"] == "turn.failed"]
    assert len(failed) == 1 and failed[0]["error_class"] == "BadRequestError"
    assert failed[0]["log_level"] == "error"


async def test_the_daily_limit_refuses_without_calling(tmp_path: Path) -> None:
    config = make_config(tmp_path, "http://127.0.0.1:9", "budget: {daily_tokens_per_user: 10}\n")
    async with running(config) as (_, platform):
        with capture_logs() as logs:
            await platform.say("hi")
            [reply] = await platform.replies(1)
    assert reply.text == prompts.DAILY_LIMIT
    assert reply.cause is not None and reply.cause.startswith("daily user token budget reached")
    assert [e["event"] for e in logs if e["event"].startswith("budget")] == ["budget.refused"]


async def test_a_message_delivered_twice_is_answered_once(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (_, platform):
        await platform.say("once", message_id="42")
        await platform.say("once", message_id="42")
        await platform.replies(1)
        await platform.say("next", message_id="43")
        replies = await platform.replies(2)
    assert [r.text.split("\n")[-1] for r in replies] == ["once", "next"]
    assert len(fake.requests) == 2


async def test_history_survives_a_restart(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url)
        async with running(config) as (_, platform):
            await platform.say("my cat is called Miso", message_id="1")
            await platform.replies(1)
        async with running(config) as (_, platform):
            await platform.say("what is my cat called?", message_id="1")  # a new process
            await platform.say("what is my cat called?", message_id="2")
            await platform.replies(1)
    texts = user_texts(fake.requests[-1])
    assert texts[0] == "my cat is called Miso"
    assert texts[-1] == "what is my cat called?"
    assert len(fake.requests) == 2


async def test_reset_starts_a_new_history(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (_, platform):
        await platform.say("secret plan")
        await platform.replies(1)
        await platform.say("/reset")
        await platform.say("hello again")
        replies = await platform.replies(3)
    assert replies[1].text == prompts.RESET_DONE
    assert "secret plan" not in user_texts(fake.requests[-1])


async def test_help_and_unknown_commands(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (_, platform):
        await platform.say("/help")
        await platform.say("/frobnicate now")
        replies = await platform.replies(2)
    unknown = prompts.UNKNOWN_COMMAND.format(command="frobnicate")
    assert [r.text for r in replies] == [prompts.HELP, f"{unknown}\n{prompts.HELP}"]
    assert fake.requests == []


async def test_group_messages_carry_the_speaker(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (_, platform):
        await platform.say("hi all", user="7", chat="g1", dm=False, name="Bea")
        [reply] = await platform.replies(1)
    assert user_texts(fake.requests[0])[-1] == "Bea: hi all"
    assert reply.chat_id == "g1"


async def test_long_history_is_compacted_in_chunks(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url, "memory: {history_token_budget: 600}\n")
        async with running(config) as (runtime, platform):
            for i in range(12):
                await platform.say(f"story part {i}: " + "and then something happened. " * 6)
                await platform.replies(i + 1)
            await runtime.sessions.wait(5)
            sources = await runtime.db.run(
                lambda c: [r[0] for r in c.execute("SELECT source FROM usage ORDER BY id")]
            )
    compactions = sources.count("compact")
    # In chunks, not every turn: half the budget is kept each time (the fake's echo
    # replies carry the recall block, so an exchange grows to a few hundred tokens).
    assert 1 <= compactions < 12
    last_turn = [r for r in fake.requests if r["system"][0]["text"] != prompts.COMPACT_SYSTEM][-1]
    assert any(b["text"].startswith("## Earlier in this conversation") for b in last_turn["system"])
    history = [t for t in user_texts(last_turn) if not t.startswith("Memories that may")]
    assert "story part 0" not in " ".join(history)
    assert "story part 11" in user_texts(last_turn)[-1]


async def test_an_idle_session_leaves_memory_and_comes_back(tmp_path: Path) -> None:
    async with (
        FakeAnthropic() as fake,
        running(make_config(tmp_path, fake.url)) as (runtime, platform),
    ):
        await platform.say("the key is under the mat")
        await platform.replies(1)
        await runtime.sessions.wait(5)
        assert len(runtime.sessions) == 1
        assert runtime.sessions.evict_idle(0) == 1
        assert len(runtime.sessions) == 0
        await platform.say("where is the key?")
        await platform.replies(2)
    assert user_texts(fake.requests[-1])[0] == "the key is under the mat"


async def test_compaction_never_folds_a_message_still_waiting(tmp_path: Path) -> None:
    long = "a long story about the sea and the lighthouse keeper. " * 12
    async with FakeAnthropic(latency_s=0.4) as fake:
        config = make_config(tmp_path, fake.url, "memory: {history_token_budget: 256}\n")
        async with running(config) as (runtime, platform):
            await platform.say("one: " + long)
            await wait_until(lambda: fake.requests)
            await platform.say("two: " + long)  # these arrive while turn one runs
            await platform.say("three")
            replies = await platform.replies(2)
            await runtime.sessions.wait(5)
    turns = [r for r in fake.requests if r["system"][0]["text"] != prompts.COMPACT_SYSTEM]
    assert len(turns) == 2 and len(replies) == 2
    assert user_texts(turns[1])[-2].startswith("two: ")
    assert user_texts(turns[1])[-1] == "three"


async def test_a_turn_binds_its_soul_and_session_to_every_line_it_logs(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (_, platform):
        fake.script_error(529)
        with capture_logs() as logs:
            await platform.say("hello", user="u7")
            await platform.replies(1)
            await platform.say("again", user="u7")
            await platform.replies(2)
    turn = [e for e in logs if e["event"].startswith("turn.")]
    assert [e["event"] for e in turn] == [
        "turn.started", "turn.failed", "turn.started", "turn.completed"
    ]  # fmt: skip
    for line in turn:
        assert (line["soul"], line["session"], line["messages"]) == ("lark", "test:u7", 1)
    # A line logged deeper down, by the model client, carries the turn's context too.
    [usage] = [e for e in logs if e["event"] == "llm.usage"]
    assert usage["messages"] == 1


async def test_forgotten_and_evicted_sessions_leave_no_lock_behind(tmp_path: Path) -> None:
    async with (
        FakeAnthropic() as fake,
        running(make_config(tmp_path, fake.url)) as (runtime, platform),
    ):
        for user in ("ann", "bob", "cid"):
            await platform.say("hello", user=user)
        await platform.replies(3)
        await runtime.sessions.wait(5)
        await platform.say("/forget confirm", user="ann")
        await platform.replies(4)
        assert "test:ann" not in runtime.sessions._locks
        await platform.say("/reset", user="bob")
        await platform.replies(5)
        assert runtime.sessions.evict_idle(0) == 2
        assert runtime.sessions._locks == {}
        assert len(runtime.sessions) == 0


async def test_a_session_lock_lives_while_it_is_held_or_awaited(tmp_path: Path) -> None:
    async with (
        FakeAnthropic() as fake,
        running(make_config(tmp_path, fake.url)) as (runtime, platform),
    ):
        manager = runtime.sessions
        await platform.say("hello", user="ann")
        await platform.replies(1)
        await manager.wait(5)
        order: list[str] = []

        async def hold(name: str) -> None:
            async with manager._lock("test:ann"):
                order.append(f"{name} in")
                await asyncio.sleep(0.02)
                order.append(f"{name} out")

        first = asyncio.create_task(hold("a"))
        await wait_until(lambda: order)
        waiters = [asyncio.create_task(hold(n)) for n in ("b", "c")]
        await asyncio.sleep(0)
        # A session whose lock is held or awaited is in use: it stays.
        assert manager.evict_idle(0) == 0 and len(manager) == 1
        await asyncio.gather(first, *waiters)
        assert order == ["a in", "a out", "b in", "b out", "c in", "c out"]
        assert manager._locks == {}
        assert manager.evict_idle(0) == 1


async def test_a_history_kept_under_the_same_binding_goes_on_and_one_of_unknown_binding_not(
    tmp_path: Path,
) -> None:
    """A restart under the same soul and scope keeps the conversation; a history
    an earlier version stored, with no binding recorded, starts anew: what it was
    said under is not known (bot/chat/sessions.py)."""
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url)
        for text in ("my locker is 42", "and my bike is blue", "anything new?"):
            async with running(config) as (runtime, platform):
                await platform.say(text)
                await platform.replies(1)
                if text == "and my bike is blue":  # as an earlier version left it
                    await runtime.db.run(lambda c: c.execute("DELETE FROM session_bindings"))
    kept, anew = fake.requests[1], fake.requests[2]
    assert "my locker is 42" in user_texts(kept)
    assert user_texts(anew)[-1].endswith("anything new?")
    assert not any("locker" in t or "bike" in t for t in user_texts(anew))
