"""Recovery at start takes time in proportion to recent traffic (issue 27):
with many sessions last spoken to long ago and one recent message left
unanswered, `Runtime.recover` makes a few statements, however many old
sessions there are, and answers the recent one. And it answers no turn that
runs (issue 27): not one of another process sharing the store (its lease,
bot/cluster/leases.py), not one of its own; a crashed owner's turn it does."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.app.runtime import Runtime
from bot.storage.sql import Conn
from bot.types import Inbound
from tests.engines import Counting, postgres_schema
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import capture_logs, make_config, running, wait_until

OLD_SESSIONS = 300


def _old_sessions(conn: Conn, ts: float) -> None:
    """`OLD_SESSIONS` sessions, each one message left unanswered long ago."""
    rows = [(f"test:old{i}", ts) for i in range(OLD_SESSIONS)]
    with conn.transaction():
        conn.executemany(
            "INSERT INTO history (session, generation, role, kind, content, tokens, ts) "
            "VALUES (?, 0, 'user', 'message', 'old news', 2, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO reply_addresses (session, inbound) VALUES (?, '{}')",
            [(session,) for session, _ in rows],
        )


@contextlib.contextmanager
def _store(engine: str) -> Iterator[str]:
    """The config lines of a store of `engine`: SQLite in data_dir, or a
    PostgreSQL schema of its own."""
    if engine == "sqlite":
        yield ""
    else:
        with postgres_schema() as url:
            yield f"store: {{url: '{url}'}}\n"


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_recovery_reads_recent_rows_only_and_answers_the_recent_one(
    tmp_path: Path, engine: str
) -> None:
    with _store(engine) as extra:
        async with FakeAnthropic() as fake:
            config = make_config(tmp_path, fake.url, extra)
            async with running(config) as (runtime, platform):
                await runtime.db.run(lambda c: _old_sessions(c, time.time() - 86400))
                ann = Inbound("test", "ann", "ann", "Ann", "are you there?", True, message_id="m1")
                route = runtime.router.route(ann)
                await runtime.history.bind(route.session, (route.soul, route.scope))
                await runtime.history.append_message(
                    route.session, 0, "are you there?", "m1", ann.address()
                )
                count = [0]
                real_run = runtime.db.run

                def counted(fn: Callable[[Conn], Any]) -> Any:
                    return real_run(lambda c: fn(Counting(c, count)))

                runtime.db.run = counted  # type: ignore[method-assign]
                recovered = await runtime.recover()
                runtime.db.run = real_run  # type: ignore[method-assign]
                [reply] = await platform.replies(1)
    assert recovered == 1
    assert count[0] < 20, count  # the search, and the recent session's load: not one per session
    assert reply.chat_id == "ann" and reply.text.endswith("are you there?")


def _assistant_rows(conn: Conn) -> int:
    return int(conn.execute("SELECT count(*) FROM history WHERE role = 'assistant'").fetchone()[0])


# Processes share a PostgreSQL store only (`instance` needs one): the leases are its.
@pytest.mark.parametrize("engine", ["postgresql"])
async def test_a_start_does_not_answer_a_turn_another_process_runs(
    tmp_path: Path, engine: str
) -> None:
    with _store(engine) as extra:
        async with FakeAnthropic() as fake:
            config = make_config(tmp_path, fake.url, extra)
            async with running(config) as (first, spoken_to):
                gate = fake.script_gate()
                await spoken_to.say("are you there?", message_id="m1")
                await asyncio.wait_for(gate.reached.wait(), 10)
                async with running(config) as (second, restarted):
                    with capture_logs() as logs:
                        recovered = await second.recover()
                    gate.open()
                    replies = await spoken_to.replies(1)
                    await first.sessions.wait(10)
                    await second.sessions.wait(10)
                    assert restarted.sent == []
                rows = await first.db.run(_assistant_rows)
    assert recovered == 0
    assert [r.text.endswith("are you there?") for r in replies] == [True]
    assert len(fake.requests) == 1 and rows == 1
    skipped = [e for e in logs if e["event"] == "sessions.recover_skipped"]
    assert [e["session"] for e in skipped] == ["test:u1"]


async def _unanswered_with_lease(runtime: Runtime, instance: str, expires: float) -> None:
    """Ann's message stored with no reply, its session's lease held by
    `instance` (another run) until `expires`: a process that died mid-turn."""
    ann = Inbound("test", "ann", "ann", "Ann", "are you there?", True, message_id="m1")
    route = runtime.router.route(ann)
    await runtime.history.bind(route.session, (route.soul, route.scope))
    await runtime.history.append_message(route.session, 0, "are you there?", "m1", ann.address())
    await runtime.db.run(
        lambda c: c.execute(
            "INSERT INTO session_leases (session, instance, run, expires) VALUES (?, ?, 'x', ?)",
            (route.session, instance, expires),
        )
    )


@pytest.mark.parametrize("engine", ["postgresql"])
async def test_a_crashed_owners_turn_is_answered_once_its_lease_expired(
    tmp_path: Path, engine: str
) -> None:
    with _store(engine) as extra:
        async with (
            FakeAnthropic() as fake,
            running(make_config(tmp_path, fake.url, extra)) as (runtime, platform),
        ):
            await _unanswered_with_lease(runtime, "gone", time.time() - 1)
            recovered = await runtime.recover()
            [reply] = await platform.replies(1)
            await runtime.sessions.wait(10)
            leases = await runtime.db.run(
                lambda c: c.execute("SELECT count(*) FROM session_leases").fetchone()[0]
            )
    assert recovered == 1 and reply.text.endswith("are you there?")
    assert len(fake.requests) == 1
    assert leases == 0  # released after the turn


async def test_a_restart_takes_its_own_earlier_runs_leases_at_once(tmp_path: Path) -> None:
    with _store("postgresql") as extra:
        async with (
            FakeAnthropic() as fake,
            running(make_config(tmp_path, fake.url, extra)) as (runtime, platform),
        ):
            await _unanswered_with_lease(runtime, "", time.time() + 300)
            another_process = await runtime.recover()
            holding_the_instance_lock = await runtime.recover(own_instance=True)
            [reply] = await platform.replies(1)
    assert (another_process, holding_the_instance_lock) == (0, 1)
    assert reply.text.endswith("are you there?")


async def test_recovery_during_a_turn_of_its_own_does_not_answer_it_again(
    tmp_path: Path,
) -> None:
    async with (
        FakeAnthropic() as fake,
        running(make_config(tmp_path, fake.url)) as (runtime, platform),
    ):
        gate = fake.script_gate()
        await platform.say("are you there?", message_id="m1")
        await asyncio.wait_for(gate.reached.wait(), 10)
        recovered = await runtime.recover()
        gate.open()
        await platform.replies(1)
        await runtime.sessions.wait(10)
        rows = await runtime.db.run(_assistant_rows)
    assert len(fake.requests) == 1 and len(platform.sent) == 1 and rows == 1
    assert recovered == 0


def _discord(extra: str, instance: str, shards: list[int]) -> str:
    """The config lines of one of two processes holding `shards` of 4."""
    discord = f"{{token: d, dm_policy: open, shard_count: 4, shard_ids: {shards}}}"
    return f"{extra}instance: {instance}\nadapters: {{discord: {discord}}}\n"


async def test_a_restart_leaves_a_conversation_another_live_process_owns(
    tmp_path: Path,
) -> None:
    """Processes a and b hold shards 0-1 and 2-3 of one Discord bot; b restarts
    while a server conversation on a's shard waits for its answer, its lease
    free (a has not begun the turn). b leaves it to a (one line, counted); a
    answers it, once."""
    with _store("postgresql") as extra:
        async with FakeAnthropic() as fake:
            a = make_config(tmp_path, fake.url, _discord(extra, "a", [0, 1]))
            b = make_config(tmp_path, fake.url, _discord(extra, "b", [2, 3]))
            async with running(a, "discord") as (first, at_a):
                await first.cluster.join()
                try:
                    ann = Inbound("discord", "700", "4242", "Ann", "", False, mentions_bot=True,
                                  message_id="m1", guild_id=str((1000 * 4 + 1) << 22))  # fmt: skip
                    route = first.router.route(ann)
                    await first.history.bind(route.session, (route.soul, route.scope))
                    await first.history.append_message(
                        route.session, 0, "are you there?", "m1", ann.address()
                    )
                    async with running(b, "discord") as (second, at_b):
                        with capture_logs() as logs:
                            by_b = await second.recover(own_instance=True)
                    assert (by_b, at_b.sent) == (0, [])  # b stopped: it had nothing to send
                    by_a = await first.recover()
                    [reply] = await at_a.replies(1)
                    await first.sessions.wait(10)
                finally:
                    await first.cluster.leave()
    assert by_a == 1
    assert reply.chat_id == "700" and reply.text.endswith("are you there?")
    assert len(fake.requests) == 1
    [left] = [e for e in logs if e["event"] == "sessions.recover_elsewhere"]
    assert left["sessions"] == 1


def _said(request: dict[str, Any], role: str) -> list[list[str]]:
    """The texts of each of the request's messages of `role`, in order."""
    found = []
    for message in request["messages"]:
        if message["role"] == role:
            content = message["content"]
            blocks = [{"text": content}] if isinstance(content, str) else content
            found.append([block["text"] for block in blocks if "text" in block])
    return found


@pytest.mark.parametrize("engine", ["postgresql"])
async def test_a_turn_that_waited_for_another_process_answers_from_what_it_said(
    tmp_path: Path, engine: str
) -> None:
    with _store(engine) as extra:
        async with FakeAnthropic() as fake:
            config = make_config(tmp_path, fake.url, extra)
            async with running(config) as (first, spoken_to), running(config) as (_, moved):
                await moved.say("hello", message_id="m0")  # its session is live in `moved`
                await moved.replies(1)
                gate = fake.script_gate()
                await spoken_to.say("the first question", message_id="m1")
                await asyncio.wait_for(gate.reached.wait(), 10)
                with capture_logs() as logs:
                    await moved.say("the second question", message_id="m2")
                    await wait_until(lambda: any(e["event"] == "sessions.lease_wait" for e in logs))
                gate.open()
                [first_reply] = await spoken_to.replies(1)
                [_, second_reply] = await moved.replies(2)
                await first.sessions.wait(10)
    *_, second_request = fake.requests
    *earlier, last = _said(second_request, "user")
    # The other process's exchange is history; the one new message is this process's.
    assert any("the first question" in text for texts in earlier for text in texts)
    assert first_reply.text in [
        text for texts in _said(second_request, "assistant") for text in texts
    ]
    assert any("the second question" in text for text in last)
    assert not any("the first question" in text for text in last)
    assert second_reply.text.endswith("the second question")
