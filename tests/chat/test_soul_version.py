"""A session keeps the soul version its prompt cache holds while the cache is
warm: a heartbeat write of SOUL.md leaves it its cache; it takes the new version
when idle past the cache's lifetime, at /reset, at compaction, and at once after
an operator's reload. The model is the fake, its cache on the test's clock."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.chat.history import HistoryStore
from bot.chat.manager import SessionManager
from bot.chat.sessions import SessionParts
from bot.chat.turn import CACHE_TTL_S, Agent
from bot.model.client import ModelClient
from bot.model.usage import Ledger
from bot.soul import heartbeat
from bot.soul.registry import SoulRegistry
from bot.soul.soulfile import SoulFile
from bot.storage.db import DB_NAME, Database
from bot.types import Inbound, Outbound, Route
from tests.fakes.anthropic_fake import FakeAnthropic, Reply
from tests.kit import capture_logs, make_config, running, wait_until

# Long enough (over 1,024 tokens by the fake's rule) for the cache to engage.
PERSONA = "\n\n".join(
    f"## Part {i}\nYou are {{name}}, a patient listener who keeps notes on every friend, "
    "asks one question at a time and answers plainly, without lists unless asked."
    for i in range(1, 40)
)


def soul_md(soul_id: str, name: str) -> str:
    """A SOUL.md with regions (so the heartbeat writes it)."""
    return (
        f"---\nagentId: {soul_id}\nname: {name}\n---\n# SOUL.md\n\n<!-- SOUL_META -->\n"
        "- version: 1.0.0\n- min_conversation_tokens: 1\n\n<!-- SOUL_CORE -->\n"
        + PERSONA.format(name=name)
        + "\n\n## Rules\n- Be kind.\n\n<!-- SOUL_MEMORY -->\n## Memory\n\n"
        "<!-- SOUL_AUTOBIOGRAPHY -->\n## Autobiography\n"
    )


def write_souls(tmp_path: Path) -> None:
    for soul_id, name in (("lark", "Lark"), ("wren", "Wren")):
        folder = tmp_path / "workspaces" / soul_id
        folder.mkdir(parents=True)
        (folder / "SOUL.md").write_text(soul_md(soul_id, name))


class Clock:
    """A clock the test moves by hand: the agent's and the fake cache's."""

    def __init__(self, now: float = 1_767_268_800.0) -> None:  # 2026-01-01
        self.now = now

    def __call__(self) -> float:
        return self.now


def route(user: str, soul: str) -> Route:
    return Route(soul, f"user:test:{user}", f"test:{soul}:{user}", f"test:{user}", True)


@dataclass
class Bot:
    """Sessions over the real agent, model client, registry and history, with
    the fake model; no memory, no router."""

    fake: FakeAnthropic
    clock: Clock
    registry: SoulRegistry
    sessions: SessionManager
    db_path: Path

    async def say(self, user: str, text: str, soul: str = "lark") -> dict[str, Any]:
        """Send `text` as `user` to `soul`; returns the turn's request to the model."""
        inbound = Inbound("test", user, user, user.title(), text, True)
        before = len(self.fake.requests)
        await self.sessions.deliver(route(user, soul), inbound, text)
        await self.sessions.wait(10)
        return self.fake.requests[before]  # the turn's (a compaction comes after it)

    async def reset(self, user: str, soul: str = "lark") -> None:
        await self.sessions.reset(route(user, soul))

    def usage(self, source: str = "turn") -> list[tuple[int, int]]:
        """(cache reads, cache writes) of every call of `source`, in order."""
        with sqlite3.connect(self.db_path) as conn:
            return list(conn.execute(
                "SELECT cache_read_input_tokens, cache_creation_input_tokens FROM usage"
                " WHERE source = ? ORDER BY id", (source,),
            ))  # fmt: skip


@contextlib.asynccontextmanager
async def bot(tmp_path: Path, history_budget: int = 6000) -> AsyncIterator[Bot]:
    clock = Clock()
    write_souls(tmp_path)
    async with FakeAnthropic(clock=clock) as fake:
        config = make_config(tmp_path, fake.url)
        db = Database(config.data_dir / DB_NAME)
        await db.open()
        model = ModelClient(config.model, Ledger(db, budget=config.budget))
        registry = SoulRegistry(config.workspaces)
        registry.reload_all()

        async def send(message: Outbound) -> None:
            return None

        parts = SessionParts(HistoryStore(db), Agent(registry, model, clock=clock), send,
                             lambda _: contextlib.nullcontext(), history_budget)  # fmt: skip
        try:
            yield Bot(fake, clock, registry, SessionManager(parts), config.data_dir / DB_NAME)
        finally:
            await model.close()
            await db.close()


async def heartbeat_write(registry: SoulRegistry, soul_id: str, text: str) -> None:
    """A reflection written into SOUL.md and the soul reloaded, as the heartbeat
    (`Reflector._write`) does."""
    soul = registry.get(soul_id)
    assert soul is not None
    reflection = heartbeat.Reflection(text, (), ())

    def edit(old: str, at: datetime) -> str:
        return heartbeat.merge(old, reflection, at)[0]

    await asyncio.to_thread(SoulFile(soul.folder).update, edit)
    await asyncio.to_thread(registry.reload, soul_id, at_once=False)


def system(request: dict[str, Any]) -> str:
    return json.dumps(request["system"])


async def test_a_warm_session_keeps_its_soul_version_after_a_heartbeat_write(
    tmp_path: Path,
) -> None:
    async with bot(tmp_path) as b:
        first = await b.say("ann", "hello")
        await b.say("ann", "how are you?")
        other = await b.say("bob", "hi", soul="wren")
        await heartbeat_write(b.registry, "lark", "Ann said hello; I asked how she was.")
        b.clock.now += CACHE_TTL_S - 1  # still warm
        kept = await b.say("ann", "and the weather?")
        fresh = await b.say("cid", "hello")  # a new session takes the new version
        other_after = await b.say("bob", "again", soul="wren")
        usage = b.usage()
    assert system(kept) == system(first)
    assert "Ann said hello" not in system(kept) and "Ann said hello" in system(fresh)
    # The whole prefix of Ann's previous turn is read; nothing of the soul is written again.
    (read_1, write_1), (read_2, write_2) = usage[1], usage[3]
    assert read_2 == read_1 + write_1
    assert write_2 < 200
    # Another soul's session never noticed.
    assert system(other_after) == system(other)
    assert usage[5][0] == usage[2][0] + usage[2][1]


async def test_an_idle_session_takes_the_new_version_after_the_cache_lifetime(
    tmp_path: Path,
) -> None:
    async with bot(tmp_path) as b:
        first = await b.say("ann", "hello")
        await heartbeat_write(b.registry, "lark", "Ann said hello and little else.")
        b.clock.now += 60
        warm = await b.say("ann", "still there?")
        b.clock.now += CACHE_TTL_S  # idle past the cache's lifetime
        cold = await b.say("ann", "back again")
        usage = b.usage()
    assert system(warm) == system(first)
    assert "Ann said hello and little else." in system(cold)
    assert usage[2] == (0, usage[2][1])  # the cache had let go: nothing to read anyway


async def test_reset_takes_the_new_version(tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        first = await b.say("ann", "hello")
        await heartbeat_write(b.registry, "lark", "Ann said hello and then reset.")
        warm = await b.say("ann", "still there?")
        await b.reset("ann")
        after = await b.say("ann", "a new start")
    assert system(warm) == system(first)
    assert "Ann said hello and then reset." in system(after)


async def test_compaction_takes_the_new_version(tmp_path: Path) -> None:
    long = "a long story about the sea and the lighthouse keeper. " * 40
    async with bot(tmp_path, history_budget=600) as b:
        first = await b.say("ann", "hello")
        await heartbeat_write(b.registry, "lark", "Ann told me a long story.")
        warm = await b.say("ann", long)  # the history passes the budget after this turn
        assert len(b.usage("compact")) == 1
        after = await b.say("ann", "and then?")
    assert system(warm) == system(first)
    assert "Ann told me a long story." in system(after)


async def test_an_operators_reload_takes_effect_at_the_next_turn(tmp_path: Path) -> None:
    async with bot(tmp_path) as b:
        first = await b.say("ann", "hello")
        await heartbeat_write(b.registry, "lark", "Ann said hello to me.")
        warm = await b.say("ann", "still there?")
        await asyncio.to_thread(b.registry.reload, "lark")  # `/soul reload lark`
        after = await b.say("ann", "and now?")
    assert system(warm) == system(first)
    assert "Ann said hello to me." in system(after)


async def test_the_heartbeat_leaves_the_other_sessions_of_the_soul_their_cache(
    tmp_path: Path,
) -> None:
    """Through the runtime: Ann says goodbye, her conversation is reflected into
    SOUL.md (the shared scope: the operator's terminal); Bob, mid-conversation,
    goes on with the version he had; a new session gets the new one."""
    write_souls(tmp_path)
    saved = Reply.of_tool_use("save_soul", {
        "reflection": "Ann told me about her basil and said goodbye.",
        "memory_updates": [], "rule_updates": [],
    })  # fmt: skip

    def reflections(body: dict[str, Any]) -> Reply | None:
        return saved if body.get("tool_choice", {}).get("name") == "save_soul" else None

    async with FakeAnthropic() as fake:
        fake.responder = reflections
        config = make_config(tmp_path, fake.url, "default_soul: lark\nmemory: {scope: shared}\n")
        with capture_logs() as logs:
            async with running(config, "console") as (_, platform):
                await platform.say("hello", user="bob")
                await platform.replies(1)
                fake.script_tool_use("end_conversation", {})  # Ann's turn: goodbye
                await platform.say("my basil is doing well; bye for now", user="ann")
                await platform.replies(2)
                await wait_until(lambda: "heartbeat.written" in [e["event"] for e in logs])
                bob_first = len(fake.requests)
                await platform.say("still there?", user="bob")
                await platform.replies(3)
                bob_again = fake.requests[bob_first]
                await platform.say("hello", user="cid")
                await platform.replies(4)
    assert system(bob_again) == system(fake.requests[0])
    assert "basil" not in system(bob_again)
    assert "Ann told me about her basil" in system(fake.requests[-1])
