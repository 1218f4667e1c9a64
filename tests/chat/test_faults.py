"""Every fault answers (issue 13): a reply whose store fails is still sent and
stored later; an empty or cut-off answer gets a note; an unexpected failure of
a turn or of the router answers one honest line."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot import prompts
from bot.app.runtime import Runtime
from bot.chat.limits import RateLimit
from tests.engines import raw_sqlite
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import capture_logs, make_config, running, wait_until


def failing(role: str, error: str) -> str:
    """SQLite script: each insert of a `role` row into history fails with
    `error` while the table fail_<role> has a row (a DELETE ends it)."""
    return f"""
CREATE TABLE fail_{role} (on_ INTEGER);
CREATE TRIGGER fail_{role}_rows BEFORE INSERT ON history
WHEN NEW.role = '{role}' AND EXISTS (SELECT 1 FROM fail_{role})
BEGIN SELECT RAISE(ABORT, '{error}'); END;
INSERT INTO fail_{role} VALUES (1);
"""


async def _history(runtime: Runtime) -> list[tuple[str, str]]:
    """(role, text) in the conversation's order: a reply right after what it answers."""
    return await runtime.db.run(
        lambda c: c.execute(
            "SELECT role, content FROM history"
            " ORDER BY COALESCE(reply_to, id), reply_to IS NOT NULL"
        ).fetchall()
    )


async def test_a_reply_whose_store_fails_is_sent_and_stored_later(tmp_path: Path) -> None:
    async with (
        FakeAnthropic() as fake,
        running(make_config(tmp_path, fake.url)) as (runtime, platform),
    ):
        await runtime.db.run(
            lambda c: raw_sqlite(c).executescript(failing("assistant", "database or disk is full"))
        )
        with capture_logs() as logs:
            await platform.say("hello there")
            [first] = await platform.replies(1)
        during = await _history(runtime)
        await runtime.db.run(lambda c: c.execute("DELETE FROM fail_assistant"))
        await platform.say("and again")
        await platform.replies(2)
        after = await _history(runtime)
        second_prompt = fake.requests[1]
    assert first.text.endswith("hello there")
    assert any(e["event"] == "history.write_failed" for e in logs)
    assert [role for role, _ in during] == ["user"]
    assert [role for role, _ in after] == ["user", "assistant", "user", "assistant"]
    assert after[1][1] == first.text
    # The next turn saw the reply it was not able to store at first.
    assert [m["role"] for m in second_prompt["messages"]] == ["user", "assistant", "user"]


async def test_an_empty_answer_gets_a_note_and_a_cut_one_says_so(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, running(make_config(tmp_path, fake.url)) as (_, platform):
        fake.script_text("")
        await platform.say("say nothing")
        [empty] = await platform.replies(1)
        fake.script_text("word " * 2000)  # 2,500 tokens, over max_tokens (1,024)
        await platform.say("say a lot")
        cut = (await platform.replies(2))[1]
    assert empty.text == prompts.EMPTY_ANSWER
    assert cut.text.endswith(prompts.ANSWER_CUT) and cut.text.startswith("word word")


async def test_a_slow_turn_and_its_reset_hold_up_no_other_chat(tmp_path: Path) -> None:
    async with (
        FakeAnthropic() as fake,
        running(make_config(tmp_path, fake.url)) as (_, platform),
    ):
        fake.script_hang(3.0)  # Ann's turn waits 3 s on the model
        await platform.say("a slow question", user="ann")
        await wait_until(lambda: fake.requests)
        await platform.say("/reset", user="ann")  # waits for Ann's turn, in Ann's chat only
        await platform.say("hi", user="bob")
        [first] = await platform.replies(1, within=2.0)
        await platform.replies(3, within=10.0)
    assert first.chat_id == "bob" and first.text.endswith("hi")
    assert [m.text for m in platform.sent if m.chat_id == "ann"][-1] == prompts.RESET_DONE


async def test_the_router_answers_a_message_it_fails_on(tmp_path: Path) -> None:
    async with running(make_config(tmp_path, "http://127.0.0.1:9")) as (_, platform):
        with capture_logs() as logs:
            await platform.say("hello", user="bad:id")  # no session key can hold a ':'
            [reply] = await platform.replies(1)
    assert reply.text == prompts.APOLOGY
    assert reply.cause == (
        "internal error in the router: InvalidKeyError (the log has the traceback)"
    )
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["router.failed"]


async def test_compaction_keeps_history_near_its_budget_with_long_pastes(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url, "memory: {history_token_budget: 1000}\n")
        config = config.model_copy(
            update={"model": config.model.model_copy(update={"max_tokens": 4000})}
        )
        async with running(config) as (_, platform):
            with capture_logs() as logs:
                for n in range(6):
                    await platform.say(f"paste {n}: " + "lorem ipsum " * 250)  # ~750 tokens
                    await platform.replies(n + 1)
    turns = [r for r in fake.requests if r["system"][0]["text"] != prompts.COMPACT_SYSTEM]
    # Without compaction the sixth turn would carry all five pastes and their echoes.
    last = turns[-1]["messages"]
    assert sum(len(b["text"]) for m in last for b in m["content"]) < 2 * 3100
    assert len([e for e in logs if e["event"] == "history.compacted"]) >= 5


async def test_a_person_past_the_rate_limit_waits_for_the_next_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bot.chat.limits.WINDOW_S", 1.0)
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url, "limits: {messages_per_minute: 2}\n")
        async with running(config) as (_, platform):
            for n in range(2):
                await platform.say(f"message {n}", user="ann")
                await platform.replies(n + 1)
            with capture_logs() as logs:
                await platform.say("message 2", user="ann")
                await platform.say("message 3", user="ann")
                await platform.replies(3)
                notice = platform.sent[2].text
                # Nothing is answered until the window has room again; then one turn.
                await platform.replies(4, within=5.0)
                await platform.say("hello", user="bob")  # others are not held up
                await platform.replies(5)
    assert notice == prompts.SLOW_DOWN
    answer = platform.sent[3].text
    assert "message 2" in answer and "message 3" in answer  # one turn for both
    assert len([e for e in logs if e["event"] == "limits.rate"]) == 1
    assert len(fake.requests) == 4


async def test_a_message_left_unanswered_by_a_crash_is_answered_once_after_a_restart(
    tmp_path: Path,
) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url)
        fake.script_hang(30.0)  # the turn never ends: the process "dies" in it
        async with running(config) as (runtime, platform):
            await platform.say("are you there?", user="ann", message_id="m1")
            await wait_until(lambda: len(fake.requests) == 1)  # Ann's request takes the hang
            await platform.say("old news", user="bob", message_id="m2")
            await platform.replies(1)  # Bob is answered, Ann's turn hangs
            await wait_until(lambda: len(fake.requests) == 2)
            await runtime.sessions.cancel()  # what SIGKILL leaves: a stored, unanswered message
        assert [m.chat_id for m in platform.sent] == ["bob"]
        async with running(config) as (runtime, platform):
            assert await runtime.recover() == 1
            [reply] = await platform.replies(1)
            await runtime.sessions.wait(5)
            again = await runtime.recover()  # a second start answers nothing twice
    assert reply.chat_id == "ann" and reply.reply_to == "m1"
    assert reply.text.endswith("are you there?")
    assert again == 0 and len(platform.sent) == 1


def test_the_rate_limit_forgets_people_quiet_for_a_window() -> None:
    now = [0.0]
    rate = RateLimit(2, clock=lambda: now[0])
    assert rate.admit("telegram:1") == (0.0, False)
    assert rate.admit("telegram:1") == (0.0, False)
    wait, tell = rate.admit("telegram:1")
    assert tell and wait == pytest.approx(60.0)
    assert rate.admit("telegram:1")[1] is False  # told once a window
    now[0] = 61.0
    rate.sweep()
    assert len(rate) == 0


async def test_a_message_the_store_failed_is_stored_at_the_stop_and_answered_at_the_start(
    tmp_path: Path,
) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url)
        async with running(config) as (runtime, platform):
            await runtime.db.run(
                lambda c: raw_sqlite(c).executescript(failing("user", "database is locked"))
            )
            with capture_logs() as logs:
                await platform.say("are you there?", user="ann", message_id="m1")
                [apology] = await platform.replies(1)
                still_failing = await runtime.sessions.store_held()
            await runtime.db.run(lambda c: c.execute("DELETE FROM fail_user"))
            stored = await runtime.sessions.store_held()  # what the daemon's stop does
        async with running(config) as (runtime, platform):
            assert await runtime.recover() == 1
            [reply] = await platform.replies(1)
    assert apology.text == prompts.APOLOGY
    assert (still_failing, stored) == (1, 0)
    assert [e["messages"] for e in logs if e["event"] == "sessions.held_lost"] == [1]
    assert reply.chat_id == "ann" and reply.text.endswith("are you there?")
    assert len(fake.requests) == 1  # no turn before the stop; one at the start
