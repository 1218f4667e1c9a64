"""Bots among bots end to end (issue 29): the real discord.py and
python-telegram-bot against their fakes, where the fake plays another bot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.adapters.test_discord import CHANNEL, GUILD, discord_bot
from tests.adapters.test_telegram import GROUP, telegram
from tests.fakes.discord_fake import FakeDiscord
from tests.kit import capture_logs, user_texts, wait_until

OTTO = 77  # the other bot
ON = "groups: {respond_to_bots: true, bots: {decay: 1, replies_per_minute: 3}}\n"


def decided(logs: list[MutableMapping[str, Any]]) -> list[tuple[int, str, str]]:
    return [(e["chain"], e["decision"], e["reason"]) for e in logs if e["event"] == "bots.decided"]


def otto_says(dc: FakeDiscord, text: str, reply_to: int | None = None) -> int:
    return dc.push_message(CHANNEL, text, author_id=OTTO, author_name="otto", guild_id=GUILD,
                           author_bot=True, reply_to=reply_to,
                           mention_bot=reply_to is None)  # fmt: skip


@asynccontextmanager
async def otto_answers_everything(dc: FakeDiscord) -> AsyncIterator[list[int]]:
    """The other bot: it replies at once to every message of ours in the channel
    (the ids it pushed are yielded)."""
    pushed: list[int] = []

    async def play() -> None:
        answered = 0
        while True:
            sent = await dc.wait_sent(answered + 1, timeout=3600)
            for mine in sent[answered:]:
                pushed.append(otto_says(dc, f"otto answers {mine.message_id}", mine.message_id))
            answered = len(sent)

    task = asyncio.create_task(play())
    try:
        yield pushed
    finally:
        task.cancel()


async def test_two_bots_stop_within_the_cap(tmp_path: Path) -> None:
    with capture_logs() as logs:
        async with discord_bot(tmp_path, ON, streaming=False) as (dc, model, runtime):
            async with otto_answers_everything(dc) as pushed:
                otto_says(dc, f"<@{dc.bot_id}> hello, fellow bot")
                # The 4th reply of otto's comes within the minute: past the cap.
                await wait_until(lambda: len(decided(logs)) == 4)
                await runtime.router.wait(5)
                await runtime.sessions.wait(5)
            sent = list(dc.sent)
    assert len(sent) == 3 and len(model.requests) == 3  # the capped one cost no model call
    assert [s.reply_to for s in sent[1:]] == pushed[:2]
    assert [(n, d) for n, d, _ in decided(logs)] == [
        (1, "answer"), (2, "answer"), (3, "answer"), (3, "silent")
    ]  # fmt: skip
    assert "cap 3" in decided(logs)[3][2]
    # The model is told it talks with a bot; no message text is in the log.
    assert user_texts(model.requests[0])[-1] == "otto (a bot): hello, fellow bot"
    assert not any("otto answers" in str(e) for e in logs if e["event"] == "bots.decided")


async def test_with_the_defaults_two_bots_stop_by_chance_or_the_cap(tmp_path: Path) -> None:
    with capture_logs() as logs:
        async with discord_bot(tmp_path, "groups: {respond_to_bots: true}\n",
                               streaming=False) as (dc, model, runtime):  # fmt: skip
            async with otto_answers_everything(dc):
                otto_says(dc, f"<@{dc.bot_id}> hello, fellow bot")
                await wait_until(lambda: any(d == "silent" for _, d, _ in decided(logs)))
                await runtime.router.wait(5)
                await runtime.sessions.wait(5)
            sent = list(dc.sent)
    lines = decided(logs)
    # Whatever the chance drew: answers 1, 2, ... then one silence ends it, within the cap.
    assert 1 <= len(sent) <= 3 and len(model.requests) == len(sent)
    assert [(n, d) for n, d, _ in lines] == [
        *((n, "answer") for n in range(1, len(sent) + 1)), (len(sent), "silent")
    ]  # fmt: skip


async def test_a_decay_of_zero_answers_one_bot_until_a_person_speaks(tmp_path: Path) -> None:
    config = (
        "groups: {bots: {decay: 0}}\n"
        f"bindings: [{{platform: discord, guild: {GUILD}, channel: {CHANNEL}, soul: lark,"
        " respond_to_bots: true}]\n"
    )  # on through the binding only
    with capture_logs() as logs:
        async with discord_bot(tmp_path, config, streaming=False) as (dc, model, runtime):
            first = otto_says(dc, f"<@{dc.bot_id}> one")
            [mine] = await dc.wait_sent(1)
            otto_says(dc, "two", reply_to=mine.message_id)  # chance 0: silent
            await wait_until(lambda: len(decided(logs)) == 2)
            dc.push_message(CHANNEL, "people talking", author_id=12, author_name="bob",
                            guild_id=GUILD)  # fmt: skip
            third = otto_says(dc, f"<@{dc.bot_id}> three")
            await dc.wait_sent(2)
            await runtime.sessions.wait(5)
            sent = list(dc.sent)
    assert [s.reply_to for s in sent] == [first, third]
    assert [(n, d) for n, d, _ in decided(logs)] == [(1, "answer"), (1, "silent"), (1, "answer")]
    assert decided(logs)[1][2] == "chance 0 missed"
    # What went unanswered is context, the bot's name marked, as a person's line is.
    assert "otto (a bot): two" in str(model.requests[1]["messages"])


async def test_off_by_default_a_bot_gets_no_answer_and_no_model_call(tmp_path: Path) -> None:
    with capture_logs() as logs:
        async with discord_bot(tmp_path, "adapters: {discord: {guilds: always}}\n") as (
            dc,
            model,
            runtime,
        ):
            otto_says(dc, f"<@{dc.bot_id}> answer me")
            await wait_until(lambda: len(decided(logs)) == 1)
            dc.push_message(CHANNEL, "and me?", author_id=12, author_name="bob", guild_id=GUILD)
            await dc.wait_sent(1)
            await runtime.sessions.wait(5)
    assert len(model.requests) == 1 and "answer me" not in str(model.requests[0])  # no context
    assert decided(logs) == [(0, "ignored", "respond_to_bots is off")]


async def test_our_own_messages_are_never_answered(tmp_path: Path) -> None:
    extra = "adapters: {discord: {guilds: always}}\ngroups: {respond_to_bots: true}\n"
    with capture_logs() as logs:
        async with discord_bot(tmp_path, extra) as (dc, model, runtime):
            # Discord sends a bot its own messages too: here, as the fake pushes one.
            dc.push_message(CHANNEL, "my own words", author_id=dc.bot_id, author_name="lark",
                            author_bot=True, guild_id=GUILD)  # fmt: skip
            dc.push_message(CHANNEL, "hi all", author_id=12, author_name="bob", guild_id=GUILD)
            await dc.wait_sent(1)
            await runtime.sessions.wait(5)
    assert len(model.requests) == 1 and "my own words" not in str(model.requests[0])
    assert decided(logs) == []


async def test_a_telegram_bot_s_message_is_not_answered_by_default(tmp_path: Path) -> None:
    # Telegram never delivers other bots' messages to a bot; were one to come, it is a
    # bot's, and off by default. An anonymous admin's message has a stand-in sender
    # marked is_bot: it is a person's, and answered.
    other = {"from": {"id": 88, "is_bot": True, "first_name": "Otto", "username": "otto_bot"}}
    anonymous = {
        "from": {"id": 1087968824, "is_bot": True, "first_name": "Group",
                 "username": "GroupAnonymousBot"},
        "sender_chat": {"id": GROUP, "type": "supergroup", "title": "the group"},
    }  # fmt: skip
    with capture_logs() as logs:
        async with telegram(tmp_path, "adapters: {telegram: {groups: always}}\n") as (
            tg,
            model,
            runtime,
        ):
            tg.push_message(GROUP, "answer me", user_id=88, chat_type="supergroup", extra=other)
            await wait_until(lambda: len(decided(logs)) == 1)
            tg.push_message(GROUP, "and me?", user_id=20, first_name="Bo", chat_type="supergroup")
            await tg.wait_sent(1)
            await runtime.sessions.wait(5)
            tg.push_message(GROUP, "an admin asks", user_id=1087968824, chat_type="supergroup",
                            extra=anonymous)  # fmt: skip
            await tg.wait_sent(2)
            await runtime.sessions.wait(5)
    assert len(model.requests) == 2 and "answer me" not in str(model.requests)
    assert user_texts(model.requests[1])[-1].endswith(": an admin asks")
    assert "(a bot)" not in str(model.requests[1])
    assert decided(logs) == [(0, "ignored", "respond_to_bots is off")]
