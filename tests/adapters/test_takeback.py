"""Taking back an answer, end to end: `/retry` and `/undo` through the real
discord.py and python-telegram-bot against their fakes, the real runtime
against the model fake (docs/commands.md)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from adapters import texts
from bot import prompts
from bot.app.runtime import Runtime
from bot.types import Inbound, Outbound
from tests.adapters.test_discord import ADMIN as DC_ADMIN
from tests.adapters.test_discord import BOT, CHANNEL, GUILD, discord_bot, followups
from tests.adapters.test_telegram import ADMIN, GROUP, telegram
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.librarian import librarian
from tests.fakes.telegram_fake import FakeTelegram
from tests.kit import capture_logs, user_texts, wait_until


def shown(tg: FakeTelegram, chat: int) -> list[str]:
    """The bot's messages in `chat` as they are now (edits applied, deleted ones gone)."""
    return [m["text"] for m in tg.bot_messages(chat)]


async def history(runtime: Runtime, session: str) -> list[tuple[str, str]]:
    return await runtime.db.run(lambda c: [
        (str(r[0]), str(r[1])) for r in c.execute(
            "SELECT role, content FROM history WHERE session = ? AND kind = 'message' "
            "ORDER BY id", (session,))
    ])  # fmt: skip


async def remind(runtime: Runtime, chat: int, text: str) -> None:
    """Have the soul say `text` unasked in the DM `chat` (as a reminder does)."""
    inbound = Inbound(platform="telegram", chat_id=str(chat), user_id=str(chat),
                      user_name="Ann", text="", is_dm=True)  # fmt: skip
    route = runtime.router.route(inbound)
    await runtime.sessions.say_unprompted(route, Outbound("telegram", str(chat), text))


def long_answer(name: str) -> str:
    """An answer Discord splits into three messages."""
    return "\n\n".join(f"{name} paragraph {i}. " + "words " * 60 for i in range(12))


# -- /retry ------------------------------------------------------------------------------


async def test_telegram_retry_edits_the_answer_in_place(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, runtime):
        model.script_text("A first, clumsy answer.")
        tg.push_message(ADMIN, "tell me about owls", user_id=ADMIN)
        [first] = await tg.wait_sent(1)
        model.script_text("A second, better answer.")
        with capture_logs() as logs:
            tg.push_message(ADMIN, "/retry", user_id=ADMIN)
            await tg.wait_for(lambda f: prompts.RETRY_DONE in shown(f, ADMIN), what="the line")
        rows = await history(runtime, f"telegram:{ADMIN}")
    # The same message now says the new answer; nothing else was posted for it.
    assert shown(tg, ADMIN) == ["A second, better answer.", prompts.RETRY_DONE]
    assert len(tg.calls_of("editMessageText")) == 1
    assert len(tg.sent) == 2 and first["text"] == "A first, clumsy answer."
    assert len(model.requests) == 2
    assert user_texts(model.requests[1])[-1] == "tell me about owls"
    assert "clumsy" not in json.dumps(model.requests[1]["messages"])  # the old answer is out
    assert rows == [("user", "tell me about owls"), ("assistant", "A second, better answer.")]
    [retried] = [e for e in logs if e["event"] == "chat.retried"]
    assert "owls" not in json.dumps(retried)  # no text in the log


async def test_discord_retry_of_a_multi_part_answer_edits_and_deletes(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, model, _):
        model.script_text(long_answer("Old"))
        dc.push_message(900, "tell me everything", author_id=DC_ADMIN)
        await dc.wait_for(lambda f: len(f.sent) >= 3, what="three chunks")
        old = [s.message_id for s in dc.sent]
        model.script_text("Short and new.")
        dc.push_message(900, "/retry", author_id=DC_ADMIN)
        await dc.wait_for(lambda f: any(s.content == prompts.RETRY_DONE for s in f.sent),
                          what="the line")  # fmt: skip
        # And back: a short answer written again as a long one posts the parts it needs.
        model.script_text(long_answer("New"))
        dc.push_message(900, "/retry", author_id=DC_ADMIN)
        await dc.wait_for(lambda f: sum(s.content == prompts.RETRY_DONE for s in f.sent) == 2,
                          what="the second line")  # fmt: skip
        gone = {d.message_id for d in dc.deleted}
        now = [s.message_id for s in dc.sent if s.message_id not in gone]
        texts = [dc.message_text(i) for i in now]
    assert len(old) >= 3
    assert gone == set(old[1:])  # the parts it no longer needs
    assert texts[0].startswith("New paragraph 0.")  # the first message, edited twice
    assert now[0] == old[0]
    assert all("Old" not in t for t in texts)
    assert "New paragraph 11." in "".join(texts)


async def test_a_retry_in_a_group_is_for_whom_the_answer_was_to(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        tg.push_message(GROUP, "hi @soul_test_bot what is a vole", user_id=5,
                        chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(1)
        tg.push_message(GROUP, "/retry@soul_test_bot", user_id=6, first_name="Bob",
                        chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(2)
        model.script_text("A vole is a small rodent.")
        tg.push_message(GROUP, "/retry@soul_test_bot", user_id=5, chat_type="supergroup")
        await tg.wait_sent(3)
        model.script_text("Voles dig tunnels.")
        tg.push_message(GROUP, "/retry@soul_test_bot", user_id=ADMIN, first_name="Adm",
                        chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(4)
    said = shown(tg, GROUP)
    assert said[0] == "Voles dig tunnels."  # the answer, edited twice
    assert said[1:] == [prompts.TAKE_BACK_OTHER, prompts.RETRY_DONE, prompts.RETRY_DONE]
    assert len(model.requests) == 3  # the refusal asked the model nothing


async def test_a_retry_counts_against_the_rate_limit(tmp_path: Path) -> None:
    async with telegram(tmp_path, "limits: {messages_per_minute: 2}\n") as (tg, model, _):
        tg.push_message(GROUP, "hi @soul_test_bot q", user_id=5, chat_type="supergroup")
        await tg.wait_sent(1)
        with capture_logs() as logs:
            for count in (2, 3, 4):
                tg.push_message(GROUP, "/retry@soul_test_bot", user_id=5, chat_type="supergroup")
                await tg.wait_sent(count)
            tg.push_message(GROUP, "/undo@soul_test_bot", user_id=5, chat_type="supergroup")
            await tg.wait_sent(5)
    *_, done, slow, again, undone = shown(tg, GROUP)
    assert done == prompts.RETRY_DONE and slow == again
    assert slow.startswith(prompts.RETRY_SLOW_DOWN.split("{")[0])
    assert undone == prompts.UNDO_DONE  # taking one's words back is never held back
    assert len(model.requests) == 2  # the message and the one retry let through
    assert [e["event"] for e in logs].count("limits.rate") == 1  # once a window


async def test_nothing_to_retry_or_undo_is_one_line(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, model, _):
        dc.push_message(900, "/retry", author_id=DC_ADMIN)
        dc.push_message(900, "/undo", author_id=DC_ADMIN)
        sent = await dc.wait_sent(2)
    assert [s.content for s in sent] == [prompts.RETRY_NONE, prompts.UNDO_NONE]
    assert model.requests == []


# -- /undo -------------------------------------------------------------------------------


async def test_discord_undo_in_a_guild_takes_the_exchange_back(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, _, runtime):
        dc.push_message(CHANNEL, f"<@{BOT}> my badge is kestrel 4410", author_id=12,
                        author_name="bob", guild_id=GUILD, mention_bot=True)  # fmt: skip
        [answer] = await dc.wait_sent(1)
        dc.push_message(CHANNEL, "!undo", author_id=13, guild_id=GUILD)  # not whom it was to
        [_, refused] = await dc.wait_sent(2)
        with capture_logs() as logs:
            dc.push_message(CHANNEL, "!undo", author_id=12, guild_id=GUILD)
            [*_, done] = await dc.wait_sent(3)
        rows = await history(runtime, f"discord:{CHANNEL}")
        traces = await runtime.db.run(
            lambda c: c.execute("SELECT COUNT(*) FROM memory WHERE page IS NULL").fetchone()[0]
        )
    assert refused.content == prompts.TAKE_BACK_OTHER
    assert done.content == prompts.UNDO_DONE
    assert answer.message_id in {d.message_id for d in dc.deleted}
    assert rows == [] and traces == 0
    [undone] = [e for e in logs if e["event"] == "chat.undone"]
    assert "kestrel" not in json.dumps(undone)


async def test_a_reminder_after_an_answer_leaves_it_to_take_back(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, runtime):
        model.script_text("Owls hoot.")
        tg.push_message(ADMIN, "tell me about owls", user_id=ADMIN)
        await tg.wait_sent(1)
        await remind(runtime, ADMIN, "Reminder: water the plants.")
        await tg.wait_sent(2)
        tg.push_message(ADMIN, "/undo", user_id=ADMIN)
        await tg.wait_sent(3)
        rows = await history(runtime, f"telegram:{ADMIN}")
    assert shown(tg, ADMIN) == ["Reminder: water the plants.", prompts.UNDO_DONE]
    assert rows == [("assistant", "Reminder: water the plants.")]


async def test_a_reminder_between_exchanges_keeps_the_older_one(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, runtime):
        model.script_text("First answer.")
        tg.push_message(ADMIN, "my first message", user_id=ADMIN)
        await tg.wait_sent(1)
        await remind(runtime, ADMIN, "Reminder: water the plants.")
        await tg.wait_sent(2)
        model.script_text("Second answer.")
        tg.push_message(ADMIN, "my second message", user_id=ADMIN)
        await tg.wait_sent(3)
        tg.push_message(ADMIN, "/undo", user_id=ADMIN)
        await tg.wait_for(lambda f: prompts.UNDO_DONE in shown(f, ADMIN), what="the line")
        rows = await history(runtime, f"telegram:{ADMIN}")
        await runtime.memory.drain(5)
        traces = await runtime.db.run(lambda c: [r[0] for r in c.execute(
            "SELECT text FROM memory WHERE page IS NULL ORDER BY id")])  # fmt: skip
    assert rows == [("user", "my first message"), ("assistant", "First answer."),
                    ("assistant", "Reminder: water the plants.")]  # fmt: skip
    assert traces == ["my first message", "First answer."]


async def test_undo_before_a_compile_leaves_nothing_to_recall(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        tg.push_message(ADMIN, "my locker code is falcon 2231", user_id=ADMIN)
        await tg.wait_sent(1)
        tg.push_message(ADMIN, "my bike lock is heron 7788", user_id=ADMIN)
        [_, answer] = await tg.wait_sent(2)
        tg.push_message(ADMIN, "/undo", user_id=ADMIN)
        await tg.wait_for(lambda f: prompts.UNDO_DONE in shown(f, ADMIN), what="the line")
        tg.push_message(ADMIN, "/reset", user_id=ADMIN)
        await tg.wait_for(lambda f: prompts.RESET_DONE in shown(f, ADMIN), what="the reset")
        tg.push_message(ADMIN, "what are my locker code and my bike lock?", user_id=ADMIN)
        await tg.wait_for(lambda f: len(model.requests) == 3, what="the turn")
    prompt = json.dumps(model.requests[-1])
    assert "falcon 2231" in prompt  # recalled: the exchange before stays
    assert "heron" not in prompt
    assert answer["text"] not in shown(tg, ADMIN)  # the bot's answer is out of the chat


async def test_undo_leaves_anothers_words_that_the_exchange_holds(tmp_path: Path) -> None:
    """A trace is the exchange's by its speaker's name, its words and its time:
    Bob's "ok", overheard after the answer, stays, though Ann's message holds "ok"."""
    async with telegram(tmp_path, "groups: {remember_unaddressed: true}\n") as (tg, _, runtime):
        tg.push_message(GROUP, "@soul_test_bot ok so what is a vole", user_id=5,
                        chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(1)
        polls = len(tg.calls_of("getUpdates"))
        tg.push_message(GROUP, "ok", user_id=6, first_name="Bob", chat_type="supergroup")
        await tg.wait_for(lambda f: len(f.calls_of("getUpdates")) > polls + 1, what="two polls")
        await runtime.memory.drain(5)
        tg.push_message(GROUP, "/undo@soul_test_bot", user_id=5, chat_type="supergroup")
        await tg.wait_for(lambda f: prompts.UNDO_DONE in shown(f, GROUP), what="the line")
        after = await runtime.db.run(lambda c: [tuple(r) for r in c.execute(
            "SELECT speaker, name, text FROM memory WHERE page IS NULL")])  # fmt: skip
    assert after == [("user", "Bob", "ok")]


async def test_undo_after_a_compile_drops_what_the_compile_made_of_it(tmp_path: Path) -> None:
    scope = f"user:telegram:{ADMIN}"
    async with telegram(tmp_path) as (tg, model, runtime):
        model.responder = librarian
        tg.push_message(ADMIN, "my bike lock is heron 7788", user_id=ADMIN)
        await tg.wait_sent(1)
        await runtime.memory.drain(5)
        await runtime.memory.compile_one("lark", scope)
        wiki = runtime.memory.wiki("lark", scope)
        assert wiki is not None and "heron" in json.dumps([p.body for p in wiki.list_pages()])
        tg.push_message(ADMIN, "/undo", user_id=ADMIN)
        await tg.wait_for(lambda f: prompts.UNDO_DONE in shown(f, ADMIN), what="the line")
        tg.push_message(ADMIN, "/reset", user_id=ADMIN)
        await tg.wait_for(lambda f: prompts.RESET_DONE in shown(f, ADMIN), what="the reset")
        asked = len(model.requests)
        tg.push_message(ADMIN, "what is my bike lock?", user_id=ADMIN)
        await tg.wait_for(lambda f: len(model.requests) > asked, what="the turn")
        pages = [p.body for p in wiki.list_pages()]
        await runtime.memory.drain(5)
        kept = await runtime.db.run(lambda c: [r[0] for r in c.execute("SELECT text FROM memory")])
    assert "heron" not in json.dumps(model.requests[-1])
    assert "heron" not in json.dumps(pages)
    assert kept and "heron" not in json.dumps(kept)  # traces and page chunks alike


async def test_a_members_undo_leaves_the_groups_pages_and_says_so(tmp_path: Path) -> None:
    """A group's pages hold what others said too: a member's /undo takes its own
    traces only, the pages stay (the line says so); an admin's drops them."""
    scope = f"chat:telegram:{GROUP}"
    async with telegram(tmp_path) as (tg, model, runtime):
        model.responder = librarian
        tg.push_message(GROUP, "@soul_test_bot Ann's locker is falcon 2231", user_id=5,
                        chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(1)
        tg.push_message(GROUP, "@soul_test_bot Bob's bike is heron 7788", user_id=6,
                        first_name="Bob", chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(2)
        await runtime.memory.drain(5)
        await runtime.memory.compile_one("lark", scope)
        wiki = runtime.memory.wiki("lark", scope)
        assert wiki is not None
        before = {p.id for p in wiki.list_pages()}
        tg.push_message(GROUP, "/undo@soul_test_bot", user_id=6, first_name="Bob",
                        chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(3)
        kept = {p.id for p in wiki.list_pages()}
        traces = await runtime.db.run(lambda c: [r[0] for r in c.execute(
            "SELECT text FROM memory WHERE page IS NULL ORDER BY id")])  # fmt: skip
        tg.push_message(GROUP, "/undo@soul_test_bot", user_id=ADMIN, first_name="Adm",
                        chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(4)
        after = {p.id for p in wiki.list_pages()}
    assert before and kept == before
    assert shown(tg, GROUP)[-2] == prompts.UNDO_DONE + "\n" + prompts.TAKE_BACK_PAGES_KEPT
    assert len(traces) == 2 and all("falcon" in t for t in traces)  # Ann's exchange stays
    assert shown(tg, GROUP)[-1] == prompts.UNDO_DONE
    assert "entities/ann" in before and "entities/ann" not in after  # an admin's drops them


async def test_a_slash_retry_edits_the_channel_answer_and_answers_privately(
    tmp_path: Path,
) -> None:
    async with discord_bot(tmp_path) as (dc, model, _):
        model.script_text("Herons wade.")
        dc.push_message(CHANNEL, f"<@{BOT}> what do herons do", author_id=12, author_name="bob",
                        guild_id=GUILD, mention_bot=True)  # fmt: skip
        [answer] = await dc.wait_sent(1)
        model.script_text("Herons fish in the shallows.")
        token = dc.push_interaction("retry", [], user_id=12, channel_id=CHANNEL, guild_id=GUILD)
        await dc.wait_for(lambda f: bool(followups(f, token)), what="the follow-up")
        [reply] = followups(dc, token)
        text = dc.message_text(answer.message_id)
    assert text == "Herons fish in the shallows."
    assert reply.content == prompts.RETRY_DONE and reply.data["flags"] & 64
    assert len(dc.sent) == 1  # nothing new in the channel


async def test_parts_older_than_48_hours_say_they_were_taken_back(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        model.script_text("\n\n".join(f"Old part {i}. " + "word " * 600 for i in range(3)))
        tg.push_message(ADMIN, "tell me everything", user_id=ADMIN)
        await tg.wait_for(lambda f: len(f.sent) >= 3, what="three chunks")
        old = [m["message_id"] for m in tg.bot_messages(ADMIN)]
        for message_id in old:
            tg.age(ADMIN, message_id, 49 * 3600)  # past Telegram's delete window
        model.script_text("Short and new.")
        tg.push_message(ADMIN, "/retry", user_id=ADMIN)
        await tg.wait_for(lambda f: prompts.RETRY_DONE in shown(f, ADMIN), what="the line")
        model.script_text("Shorter.")
        tg.push_message(ADMIN, "/undo", user_id=ADMIN)
        await tg.wait_for(lambda f: prompts.UNDO_DONE in shown(f, ADMIN), what="the undo")
    assert len(old) >= 3 and tg.deleted == []
    assert shown(tg, ADMIN) == [texts.TAKEN_BACK] * len(old) + [prompts.RETRY_DONE,
                                                                 prompts.UNDO_DONE]  # fmt: skip


async def test_a_second_undo_in_a_group_is_for_an_admin(tmp_path: Path) -> None:
    """Whom an answer was to is known for the newest message only: once an /undo
    took that out, the exchange before is an admin's to take back."""
    async with telegram(tmp_path) as (tg, _, runtime):
        tg.push_message(GROUP, "hi @soul_test_bot I am Ann", user_id=5, chat_type="supergroup")
        await tg.wait_sent(1)
        tg.push_message(GROUP, "hi @soul_test_bot I am Bob", user_id=6, first_name="Bob",
                        chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(2)
        for user, name, count in ((6, "Bob", 3), (6, "Bob", 4), (5, "Ann", 5), (ADMIN, "A", 6)):
            tg.push_message(GROUP, "/undo@soul_test_bot", user_id=user, first_name=name,
                            chat_type="supergroup")  # fmt: skip
            await tg.wait_sent(count)
        rows = await history(runtime, f"telegram:{GROUP}")
    refused = prompts.TAKE_BACK_OTHER
    assert shown(tg, GROUP) == [prompts.UNDO_DONE, refused, refused, prompts.UNDO_DONE]
    assert rows == []


async def test_a_retry_waits_for_the_turn_in_flight_and_takes_its_answer(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, runtime):
        tg.push_message(ADMIN, "first question", user_id=ADMIN)
        await tg.wait_sent(1)
        gate = model.script_gate()  # the next turn hangs until the gate opens
        tg.push_message(ADMIN, "second question", user_id=ADMIN)
        await gate.reached.wait()
        model.script_text("The second answer, again.")
        with capture_logs() as logs:
            tg.push_message(ADMIN, "/retry", user_id=ADMIN)
            await wait_until(lambda: any(e["event"] == "command.run" for e in logs))
        polls = len(tg.calls_of("getUpdates"))
        await tg.wait_for(lambda f: len(f.calls_of("getUpdates")) > polls + 1, what="two polls")
        assert len(model.requests) == 2  # the retry waits: it never races the turn
        gate.open()
        await tg.wait_for(lambda f: prompts.RETRY_DONE in shown(f, ADMIN), what="the line")
        rows = await history(runtime, f"telegram:{ADMIN}")
    assert user_texts(model.requests[2])[-1] == "second question"
    assert rows[-1] == ("assistant", "The second answer, again.")
    assert [r for r, _ in rows] == ["user", "assistant", "user", "assistant"]


async def a_failed_retry(tg: FakeTelegram, model: FakeAnthropic) -> None:
    """An answer in the admin's DM, then a `/retry` whose call the model refuses."""
    model.script_text("The answer that stays.")
    tg.push_message(ADMIN, "tell me", user_id=ADMIN)
    await tg.wait_sent(1)
    model.script_error(400, "invalid_request_error")
    tg.push_message(ADMIN, "/retry", user_id=ADMIN)
    await tg.wait_for(lambda f: prompts.RETRY_FAILED in shown(f, ADMIN), what="the failure")


async def test_a_retry_that_fails_keeps_the_old_answer_and_says_why(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, runtime):
        await a_failed_retry(tg, model)
        rows = await history(runtime, f"telegram:{ADMIN}")
    assert shown(tg, ADMIN) == ["The answer that stays.", prompts.MODEL_REJECTED,
                                prompts.RETRY_FAILED]  # fmt: skip
    assert tg.calls_of("editMessageText") == []
    assert rows == [("user", "tell me")]  # the old answer is out of the history all the same


async def test_a_retry_after_a_failed_retry_answers_again(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, runtime):
        await a_failed_retry(tg, model)
        model.script_text("Now it works.")
        tg.push_message(ADMIN, "/retry", user_id=ADMIN)  # as RETRY_FAILED says
        await tg.wait_for(lambda f: prompts.RETRY_DONE in shown(f, ADMIN), what="the line")
        rows = await history(runtime, f"telegram:{ADMIN}")
    assert shown(tg, ADMIN)[-2:] == ["Now it works.", prompts.RETRY_DONE]
    assert user_texts(model.requests[-1])[-1] == "tell me"
    assert rows == [("user", "tell me"), ("assistant", "Now it works.")]


async def test_a_retry_after_a_failed_turn_answers_its_message(tmp_path: Path) -> None:
    """The turn that failed is run again; the answer before it stays as it was."""
    async with telegram(tmp_path) as (tg, model, runtime):
        model.script_text("First answer.")
        tg.push_message(ADMIN, "first question", user_id=ADMIN)
        await tg.wait_sent(1)
        model.script_error(400, "invalid_request_error")
        tg.push_message(ADMIN, "second question", user_id=ADMIN)
        await tg.wait_sent(2)
        model.script_text("Second answer.")
        tg.push_message(ADMIN, "/retry", user_id=ADMIN)
        await tg.wait_for(lambda f: prompts.RETRY_DONE in shown(f, ADMIN), what="the line")
        rows = await history(runtime, f"telegram:{ADMIN}")
    assert shown(tg, ADMIN) == ["First answer.", prompts.MODEL_REJECTED, "Second answer.",
                                prompts.RETRY_DONE]  # fmt: skip
    assert tg.calls_of("editMessageText") == []
    assert user_texts(model.requests[-1])[-1] == "second question"
    assert rows == [("user", "first question"), ("assistant", "First answer."),
                    ("user", "second question"), ("assistant", "Second answer.")]  # fmt: skip


PER_MEMBER = f"bindings: [{{platform: telegram, chat: {GROUP}, soul: lark, memory: per-member}}]\n"


async def test_undo_in_a_per_member_place_takes_the_members_traces(tmp_path: Path) -> None:
    member = f"member:telegram:{GROUP}:5"
    async with telegram(tmp_path, PER_MEMBER) as (tg, _, runtime):
        tg.push_message(GROUP, "hi @soul_test_bot my dog is Biscuit", user_id=5,
                        chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(1)
        await runtime.memory.drain(5)
        before = await runtime.memory.store.count("lark", member)
        tg.push_message(GROUP, "/undo@soul_test_bot", user_id=5, chat_type="supergroup")
        await tg.wait_sent(2)
        after = await runtime.memory.store.count("lark", member)
    assert (before, after) == (1, 0)


async def test_an_admins_undo_in_a_per_member_place_takes_the_members_traces(
    tmp_path: Path,
) -> None:
    """Whom Ann's answer was to is not known once Bob's exchange went: the
    admin's /undo takes her words out of her member scope all the same."""
    member = f"member:telegram:{GROUP}:5"
    async with telegram(tmp_path, PER_MEMBER) as (tg, _, runtime):
        tg.push_message(GROUP, "hi @soul_test_bot my dog is Biscuit", user_id=5,
                        chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(1)
        tg.push_message(GROUP, "hi @soul_test_bot I am Bob", user_id=6, first_name="Bob",
                        chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(2)
        for user, count in ((6, 3), (ADMIN, 4)):
            tg.push_message(GROUP, "/undo@soul_test_bot", user_id=user, chat_type="supergroup")
            await tg.wait_sent(count)
            await runtime.memory.drain(5)
        left = await runtime.memory.store.count("lark", member)
    assert shown(tg, GROUP)[-2:] == [prompts.UNDO_DONE, prompts.UNDO_DONE]
    assert left == 0


async def bob_and_cy_at_once(tg: FakeTelegram, model: FakeAnthropic, runtime: Runtime) -> None:
    """A member's message whose turn is held while Bob and Cy write; then one
    turn answers Bob and Cy together."""
    gate = model.script_gate()
    tg.push_message(GROUP, "hi @soul_test_bot first", user_id=5, chat_type="supergroup")
    await gate.reached.wait()
    for user, name in ((6, "Bob"), (7, "Cy")):
        tg.push_message(GROUP, f"hi @soul_test_bot I am {name}", user_id=user,
                        first_name=name, chat_type="supergroup")  # fmt: skip
    async with asyncio.timeout(10):  # both stored, waiting for the turn in flight
        while len(await history(runtime, f"telegram:{GROUP}")) < 3:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    gate.open()


async def test_undo_of_an_answer_to_several_members_takes_each_ones_traces(
    tmp_path: Path,
) -> None:
    async with telegram(tmp_path, PER_MEMBER) as (tg, model, runtime):
        await bob_and_cy_at_once(tg, model, runtime)
        await tg.wait_sent(2)  # the first answer, then one to Bob and Cy together
        await runtime.memory.drain(5)
        scopes = [f"member:telegram:{GROUP}:{user}" for user in (6, 7)]
        before = [await runtime.memory.store.count("lark", scope) for scope in scopes]
        tg.push_message(GROUP, "/undo@soul_test_bot", user_id=ADMIN, chat_type="supergroup")
        await tg.wait_sent(3)
        after = [await runtime.memory.store.count("lark", scope) for scope in scopes]
    assert before == [1, 1] and after == [0, 0]


async def test_a_retry_of_an_answer_to_several_members_keeps_who_said_what(
    tmp_path: Path,
) -> None:
    """Cy (in Tokyo) retries an answer to Bob and Cy: the new turn is not given
    Cy's clock (it answers two people), and an admin's /undo after it takes each
    one's words out of their own member scope."""
    async with telegram(tmp_path, PER_MEMBER) as (tg, model, runtime):
        tg.push_message(GROUP, "/timezone@soul_test_bot Asia/Tokyo", user_id=7,
                        first_name="Cy", chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(1)
        await bob_and_cy_at_once(tg, model, runtime)
        await tg.wait_sent(3)  # the zone's line, the first answer, one to Bob and Cy
        before = len(model.requests)
        model.script_text("Retried answer.")
        tg.push_message(GROUP, "/retry@soul_test_bot", user_id=7, first_name="Cy",
                        chat_type="supergroup")  # fmt: skip
        await tg.wait_for(lambda f: prompts.RETRY_DONE in shown(f, GROUP), what="the retry")
        clocks = [t for r in model.requests[before:] for t in user_texts(r) if "(Now:" in t]
        tg.push_message(GROUP, "/undo@soul_test_bot", user_id=ADMIN, chat_type="supergroup")
        await tg.wait_for(lambda f: prompts.UNDO_DONE in shown(f, GROUP), what="the undo")
        await runtime.memory.drain(5)
        scopes = [f"member:telegram:{GROUP}:{user}" for user in (6, 7)]
        left = [await runtime.memory.store.count("lark", scope) for scope in scopes]
    assert clocks and not any("Asia/Tokyo" in t for t in clocks)
    assert left == [0, 0]


async def test_a_message_during_a_retry_is_answered_after_it(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        tg.push_message(ADMIN, "first question", user_id=ADMIN)
        await tg.wait_sent(1)
        gate = model.script_gate()  # the retry's call hangs until the gate opens
        tg.push_message(ADMIN, "/retry", user_id=ADMIN)
        await gate.reached.wait()
        tg.push_message(ADMIN, "a question meanwhile", user_id=ADMIN)
        await tg.wait_for(lambda f: len(f.calls_of("getUpdates")) > 4, what="the update taken")
        assert len(model.requests) == 2
        gate.open()
        await tg.wait_for(lambda f: len(model.requests) == 3 and len(f.sent) == 3, what="all")
    asked = [user_texts(r)[-1] for r in model.requests]
    assert asked == ["first question", "first question", "a question meanwhile"]


async def test_forget_during_a_retry_ends_it(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, runtime):
        tg.push_message(ADMIN, "first question", user_id=ADMIN)
        await tg.wait_sent(1)
        gate = model.script_gate()
        tg.push_message(ADMIN, "/retry", user_id=ADMIN)
        await gate.reached.wait()
        tg.push_message(ADMIN, "/forget confirm", user_id=ADMIN)
        await tg.wait_for(lambda f: prompts.TAKE_BACK_GONE in shown(f, ADMIN), what="the line")
        await tg.wait_for(lambda f: prompts.FORGET_DONE in shown(f, ADMIN), what="the forget")
        rows = await history(runtime, f"telegram:{ADMIN}")
        gate.open()
    assert rows == []
