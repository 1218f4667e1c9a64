"""Ambient mode end to end (issue 29): the real discord.py and
python-telegram-bot against their fakes, the real runtime against the model
fake, whose gate answers (`speak` tool calls) a responder scripts."""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

from tests.adapters.test_discord import ADMIN, CHANNEL, GUILD, discord_bot
from tests.adapters.test_telegram import GROUP, telegram
from tests.fakes.anthropic_fake import FakeAnthropic, Reply
from tests.kit import capture_logs, wait_until

GATE_MODEL = "claude-haiku-4-5"
DISCORD = (
    f"adapters: {{discord: {{guilds: ambient}}}}\ngroups: {{ambient: {{model: {GATE_MODEL}}}}}\n"
)


def is_gate(body: dict[str, Any]) -> bool:
    return body.get("tool_choice") == {"type": "tool", "name": "speak"}


def gate_answers(model: FakeAnthropic, answer: Callable[[], Reply]) -> None:
    """Answer every gate call with `answer()`; turns get the default echo."""
    model.responder = lambda body: answer() if is_gate(body) else None


def gates(model: FakeAnthropic) -> list[dict[str, Any]]:
    return [body for body in model.requests if is_gate(body)]


def decided(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [line for line in logs if line["event"] == "ambient.decided"]


async def test_an_unmentioned_question_is_answered_and_a_side_talk_is_not(tmp_path: Path) -> None:
    side = ["did you see the match last night?", "yes, what a finish", "that last goal though",
            "unreal, I was shouting at the screen"]  # fmt: skip
    question = "Lark, what kind of weather do you like best?"
    with capture_logs() as logs:
        async with discord_bot(tmp_path, DISCORD) as (dc, model, runtime):
            gate_answers(
                model,
                lambda: Reply.of_tool_use("speak", {"speak": True, "reason": "asked by name"}),
            )
            for n, text in enumerate(side):
                dc.push_message(CHANNEL, text, author_id=12 + n % 2,
                                author_name=["bob", "cy"][n % 2], guild_id=GUILD)  # fmt: skip
            asked = dc.push_message(CHANNEL, question, author_id=14, author_name="dee",
                                    guild_id=GUILD)  # fmt: skip
            [reply] = await dc.wait_sent(1)
            await runtime.sessions.wait(5)
            rows = await runtime.db.run(
                lambda conn: conn.execute('SELECT source, model, "user" FROM usage').fetchall()
            )
            dc.push_message(900, "/soul usage", author_id=ADMIN)
            usage = (await dc.wait_sent(2))[1].content
    assert reply.reply_to == asked and reply.content.endswith(question)
    assert len(gates(model)) == 1  # the side talk cost no model call
    [gate] = gates(model)
    assert gate["model"] == GATE_MODEL and gate["tools"][0]["name"] == "speak"
    assert gate["messages"][0]["content"][0]["text"].splitlines()[-1] == f"dee: {question}"
    lines = decided(logs)
    assert [(d["stage"], d["decision"]) for d in lines] == [("scorer", "silent")] * 4 + [
        ("model", "speak")
    ]
    assert "side_talk" in lines[3]["reason"] and "name" in lines[4]["reason"]
    said = [*side, question]
    assert not any(text in str(line) for line in lines for text in said)  # no message text
    # The gate and the reply it let through are in the ledger under their own sources,
    # charged to the channel; `/soul usage` shows them, each on a line of its own.
    assert sorted(rows) == [
        ("ambient", GATE_MODEL, f"discord:chat:{CHANNEL}"),
        ("ambient_reply", "claude-sonnet-4-6", f"discord:chat:{CHANNEL}"),
    ]
    assert "\nambient " in usage and "\nambient_reply " in usage


async def test_caps_and_cooldown_hold_in_the_channel_s_own_time(tmp_path: Path) -> None:
    extra = (
        "adapters: {telegram: {groups: ambient}}\n"
        "groups: {ambient: {replies_per_hour: 2, cooldown_s: 300}}\n"
    )
    start = int(time.time()) - 7200  # the messages' own dates are the clock

    def ask(tg: Any, n: int, at: int) -> int:
        return int(tg.push_message(GROUP, f"Lark, question {n}?", user_id=20, first_name="Bo",
                                   chat_type="supergroup", extra={"date": start + at}))  # fmt: skip

    with capture_logs() as logs:
        async with telegram(tmp_path, extra) as (tg, model, runtime):
            gate_answers(model, lambda: Reply.of_tool_use("speak", {"speak": True, "reason": "x"}))
            first = ask(tg, 1, 0)
            await tg.wait_sent(1)
            ask(tg, 2, 60)  # within the cooldown
            third = ask(tg, 3, 400)
            await tg.wait_sent(2)
            ask(tg, 4, 1000)  # two this hour already
            fifth = ask(tg, 5, 3700)  # the first is an hour old now
            await tg.wait_sent(3)
            await runtime.router.wait(5)
            await runtime.sessions.wait(5)
            sent = list(tg.sent)
    assert [m["reply_parameters"]["message_id"] for m in sent] == [first, third, fifth]
    assert len(gates(model)) == 3  # the capped ones cost no model call
    assert [(d["stage"], d["decision"]) for d in decided(logs)] == [
        ("model", "speak"), ("cooldown", "silent"), ("model", "speak"), ("cap", "silent"),
        ("model", "speak"),
    ]  # fmt: skip


async def test_a_gate_that_fails_is_silence_and_one_line(tmp_path: Path) -> None:
    failures = [
        Reply.of_text("(silence)"),  # no tool call: a model that ignores the forced tool
        Reply.of_tool_use("speak", {"speak": "yes", "reason": "malformed"}),
        Reply.of_error(400, message="tools: not understood"),
    ]
    with capture_logs() as logs:
        async with discord_bot(tmp_path, DISCORD) as (dc, model, runtime):
            model.responder = lambda body: failures.pop(0) if is_gate(body) else None
            for n in range(3):
                dc.push_message(CHANNEL, f"Lark, are you there {n}?", author_id=12,
                                author_name="bob", guild_id=GUILD)  # fmt: skip
            await wait_until(lambda: len(decided(logs)) == 3)
            # Then the gate lets one through and the reply's turn fails: no apology either.
            model.responder = None
            model.script(Reply.of_tool_use("speak", {"speak": True, "reason": "asked"}),
                         Reply.of_error(500))  # fmt: skip
            dc.push_message(CHANNEL, "Lark, one more?", author_id=12, author_name="bob",
                            guild_id=GUILD)  # fmt: skip
            await wait_until(lambda: any(e["event"] == "ambient.reply_dropped" for e in logs))
            # A mention is still answered: the silence above was not a dead bot.
            dc.push_message(CHANNEL, f"<@{dc.bot_id}> hello?", author_id=12, author_name="bob",
                            guild_id=GUILD, mention_bot=True)  # fmt: skip
            [reply] = await dc.wait_sent(1)
            await runtime.sessions.wait(5)
            sent = [m.content for m in dc.sent]
    assert sent == [reply.content] and reply.content.endswith("hello?")
    assert not any("(silence)" in text for text in sent)
    failed = [d for d in decided(logs) if d["log_level"] == "warning"]
    assert [d["reason"] for d in failed] == [
        "the gate failed: no speak call in the answer",
        "the gate failed: a malformed speak call",
        failed[2]["reason"],
    ]
    assert failed[2]["reason"].startswith("the gate failed: ") and "400" in failed[2]["reason"]
    assert all((d["stage"], d["decision"]) == ("model", "silent") for d in failed)
    [dropped] = [e for e in logs if e["event"] == "ambient.reply_dropped"]
    assert dropped["log_level"] == "warning"
