"""Moods, through the runtime and the fake model: the soul's defaultMood is the
first of a conversation's own system blocks, right after the hard limits and
past the soul's breakpoint; `set_mood` moves one conversation to another of the
allowedMoods (the next turn's prompt of that conversation only; every other
conversation's prefix stays byte for byte), refuses any other, is kept across
a restart, shown by `/soul status`, taken back by `/reset` and by a reload that
no longer allows it, and erased by `/forget`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot import prompts
from bot.app.runtime import Runtime
from bot.chat.moods import set_mood_tool
from bot.config.schema import Config
from bot.soul.persona import Persona
from bot.types import Route
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import RecordingPlatform, capture_logs, make_config, running

ADMIN_AND_OPEN = "admins: {telegram: [1]}\nadapters: {telegram: {dm_policy: open}}\n"
BODY = "\n\n".join(
    f"## Part {i}\nYou are Marlow, the keeper of a lighthouse archive, who answers plainly "
    "and asks one question at a time about the logbooks, the charts and the letters."
    for i in range(1, 40)
)
MOODS = "defaultMood: calm\nallowedMoods: [calm, wry, stormy]\n"
ANN, BOB = "telegram:1", "telegram:2"  # the session keys of users 1 and 2's DMs


def write_marlow(tmp_path: Path, moods: str = MOODS) -> None:
    folder = tmp_path / "workspaces" / "marlow"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SOUL.md").write_text(
        f"---\nagentId: marlow\nname: Marlow\n{moods}"
        "hardLimits: [Never claim to be human]\n---\n" + BODY
    )


def config_for(tmp_path: Path, url: str, moods: str = MOODS) -> Config:
    write_marlow(tmp_path, moods)
    return make_config(tmp_path, url, "default_soul: marlow\n" + ADMIN_AND_OPEN)


@dataclass
class Chat:
    """A running bot and its fake model: `ask` returns the requests of one turn."""

    runtime: Runtime
    platform: RecordingPlatform
    fake: FakeAnthropic

    async def ask(self, text: str, user: str = "1") -> list[dict[str, Any]]:
        before, sent = len(self.fake.requests), len(self.platform.sent)
        await self.platform.say(text, user=user)
        await self.platform.replies(sent + 1)
        assert await self.runtime.sessions.wait(5) == 0
        return self.fake.requests[before:]

    async def command(self, text: str, user: str = "1") -> str:
        sent = len(self.platform.sent)
        await self.platform.say(text, user=user)
        return (await self.platform.replies(sent + 1))[-1].text

    async def moods(self) -> list[tuple[str, str, str]]:
        rows = await self.runtime.db.run(
            lambda c: c.execute("SELECT session, soul, mood FROM session_moods").fetchall()
        )
        return sorted((str(s), str(soul), str(m)) for s, soul, m in rows)


@asynccontextmanager
async def chat(config: Config, fake: FakeAnthropic) -> AsyncIterator[Chat]:
    async with running(config, "telegram") as (runtime, platform):
        yield Chat(runtime, platform, fake)


def mood_shown(request: dict[str, Any]) -> str:
    """The mood block of a request's system prompt."""
    [block] = [b["text"] for b in request["system"] if b["text"].startswith("## Mood")]
    return str(block)


def prefix(request: dict[str, Any]) -> str:
    """What the cache keys on before the messages: tools, then the system
    blocks with their cache_control, as bytes."""
    return json.dumps([request.get("tools"), request["system"]], sort_keys=True)


def soul_part(request: dict[str, Any]) -> str:
    """The tools and the system blocks up to the soul's breakpoint (the first)."""
    system = request["system"]
    end = next(i for i, b in enumerate(system) if "cache_control" in b)
    return json.dumps([request.get("tools"), system[: end + 1]], sort_keys=True)


def tool_result(request: dict[str, Any]) -> dict[str, Any]:
    [result] = [b for m in request["messages"] for b in m["content"]
                if b.get("type") == "tool_result"]  # fmt: skip
    content = result["content"]
    text = content if isinstance(content, str) else content[0]["text"]
    return dict(json.loads(text))


def route(session: str) -> Route:
    user = session.split(":")[1]
    return Route("marlow", f"user:telegram:{user}", session, f"telegram:{user}", True)


async def test_set_mood_changes_the_next_prompt_of_its_conversation_only(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake) as c:
        [ann_1] = await c.ask("hello")
        [bob_1] = await c.ask("good evening", user="2")
        fake.script_tool_use("set_mood", {"mood": "stormy"}, text="Ah.")
        _, answered = await c.ask("the storm took the jetty!")
        [bob_2] = await c.ask("and the charts?", user="2")
        [ann_3] = await c.ask("and then?")
        assert await c.runtime.sessions.mood(route(ANN)) == "stormy"
        assert await c.runtime.sessions.mood(route(BOB)) == "calm"
        usage = await c.runtime.db.run(lambda conn: conn.execute(
            "SELECT cache_read_input_tokens, cache_creation_input_tokens FROM usage "
            "WHERE session = ? ORDER BY id", (BOB,)).fetchall())  # fmt: skip
    assert "Your mood in this conversation: calm." in mood_shown(ann_1)
    assert "(calm, wry, stormy) with the set_mood tool" in mood_shown(ann_1)
    assert "set_mood" in [t["name"] for t in ann_1["tools"]]
    assert tool_result(answered) == {"mood": "stormy", "was": "calm"}
    assert "Your mood in this conversation: stormy." in mood_shown(ann_3)
    # Bob's prefix, tools and system blocks with their breakpoints, is the same bytes.
    assert prefix(bob_2) == prefix(bob_1)
    assert "Your mood in this conversation: calm." in mood_shown(bob_2)
    # And the soul's part, up to its breakpoint, is the same in every conversation.
    assert soul_part(ann_3) == soul_part(bob_2) == soul_part(ann_1)
    # The mood sits right after the hard limits, past the soul's breakpoint.
    system = ann_3["system"]
    limits = next(i for i, b in enumerate(system) if b["text"].startswith("## Hard Limits"))
    assert "cache_control" in system[limits]
    assert system[limits + 1]["text"] == mood_shown(ann_3)
    # Bob's second turn read the whole prefix of his first from the cache.
    (read_1, write_1), (read_2, _) = usage
    assert read_2 >= read_1 + write_1 > 0


async def test_a_mood_outside_the_list_is_refused(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake) as c:
        fake.script_tool_use("set_mood", {"mood": "furious"})
        with capture_logs() as logs:
            _, answered = await c.ask("you seem cross")
        [after] = await c.ask("are you?")
        stored = await c.moods()
    result = tool_result(answered)
    assert result["details"] == {"code": "MOOD_NOT_ALLOWED"}
    assert result["error"] == "'furious' is not one of your moods (calm, wry, stormy); " \
        "your mood stays calm"  # fmt: skip
    assert "Your mood in this conversation: calm." in mood_shown(after)
    assert stored == []
    assert "mood.changed" not in [e["event"] for e in logs]


async def test_the_mood_is_kept_across_a_restart_shown_and_reset(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        config = config_for(tmp_path, fake.url)
        async with chat(config, fake) as c:
            fake.script_tool_use("set_mood", {"mood": "wry"})
            with capture_logs() as logs:
                await c.ask("tell me about the keeper")
        [changed] = [e for e in logs if e["event"] == "mood.changed"]
        async with chat(config, fake) as c:  # a restart: the same store
            status = await c.command("/soul status")
            [after_restart] = await c.ask("hello again")
            with capture_logs() as logs:
                await c.command("/reset")
            reset_status = await c.command("/soul status")
            [after_reset] = await c.ask("a new start")
            stored = await c.moods()
    # Who, from what, to what, why: no message text (`messages` is the turn's count).
    assert changed == {"event": "mood.changed", "log_level": "info", "soul": "marlow",
                       "session": ANN, "from": "calm", "to": "wry", "reason": "set_mood",
                       "messages": 1}  # fmt: skip
    assert "Mood here (marlow): wry (default calm; allowed: calm, wry, stormy)" in status
    assert "Your mood in this conversation: wry." in mood_shown(after_restart)
    [reset] = [e for e in logs if e["event"] == "mood.changed"]
    assert (reset["from"], reset["to"], reset["reason"]) == ("wry", "calm", "reset")
    assert "Mood here (marlow): calm (default calm;" in reset_status
    assert "Your mood in this conversation: calm." in mood_shown(after_reset)
    assert stored == []


async def test_forget_erases_the_mood(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake) as c:
        fake.script_tool_use("set_mood", {"mood": "wry"})
        await c.ask("hello")
        fake.script_tool_use("set_mood", {"mood": "stormy"})
        await c.ask("hello", user="2")
        kept = await c.moods()
        await c.command("/forget confirm")
        left = await c.moods()
    assert kept == [(ANN, "marlow", "wry"), (BOB, "marlow", "stormy")]
    assert left == [(BOB, "marlow", "stormy")]


async def test_a_reload_that_no_longer_allows_the_mood_goes_back_to_the_default(
    tmp_path: Path,
) -> None:
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake) as c:
        fake.script_tool_use("set_mood", {"mood": "stormy"})
        await c.ask("the storm!")
        write_marlow(tmp_path, "defaultMood: calm\nallowedMoods: [calm, wry]\n")
        await c.command("/soul reload marlow")
        with capture_logs() as logs:
            [after] = await c.ask("is it over?")
            [again] = await c.ask("good")
        stored = await c.moods()
    assert "Your mood in this conversation: calm." in mood_shown(after)
    assert "(calm, wry) with the set_mood tool" in mood_shown(again)
    [line] = [e for e in logs if e["event"] == "mood.changed"]
    assert (line["from"], line["to"], line["reason"]) == ("stormy", "calm",
                                                          "no longer in allowedMoods")  # fmt: skip
    assert stored == []


async def test_no_allowed_moods_no_tool(tmp_path: Path) -> None:
    """A default mood alone is shown, with no tool; a soul with no mood has no block."""
    async with FakeAnthropic() as fake:
        config = config_for(tmp_path, fake.url, "defaultMood: calm\n")
        async with chat(config, fake) as c:
            [only_default] = await c.ask("hello")
        write_marlow(tmp_path, "")
        async with chat(config, fake) as c:
            [none] = await c.ask("hello")
    assert mood_shown(only_default) == "## Mood\n" + prompts.MOOD_NOW.format(mood="calm")
    for request in (only_default, none):
        assert "set_mood" not in [t["name"] for t in request.get("tools", [])]
    assert not any(b["text"].startswith("## Mood") for b in none["system"])


async def test_a_mood_the_store_cannot_keep_stays_as_it_was() -> None:
    """The tool alone: a change whose write fails is not made, and the answer says so."""
    persona = Persona.model_validate({"defaultMood": "calm", "allowedMoods": ["calm", "wry"]})
    kept: list[str] = []

    async def failing(mood: str) -> None:
        raise OSError("disk full")

    async def keeping(mood: str) -> None:
        kept.append(mood)

    with capture_logs() as logs:
        refused = json.loads(await set_mood_tool(persona, lambda: "calm", failing).handler(
            {"mood": "wry"}))  # fmt: skip
    tool = set_mood_tool(persona, lambda: "calm", keeping)
    same = json.loads(await tool.handler({"mood": "calm"}))
    moved = json.loads(await tool.handler({"mood": " wry "}))
    assert refused == {"error": "your mood could not be kept; it stays calm",
                       "details": {"code": "MOOD_NOT_KEPT"}}  # fmt: skip
    assert [e["what"] for e in logs if e["event"] == "history.write_failed"] == ["mood"]
    assert same == {"mood": "calm"} and moved == {"mood": "wry", "was": "calm"}
    assert kept == ["wry"]
    assert tool.spec()["input_schema"]["properties"]["mood"]["enum"] == ["calm", "wry"]
    assert "calm, wry" in tool.description
