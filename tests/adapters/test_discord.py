"""Discord end to end: the real discord.py against the REST + gateway fake, the
real runtime against the model fake."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from adapters.discord_adapter import DiscordAdapter
from adapters.retry import Backoff
from adapters.telegram_adapter import TelegramAdapter
from bot import prompts
from bot.app.runtime import Runtime
from bot.chat.commands import MENU
from bot.config.schema import Config
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.discord_fake import FakeDiscord, InteractionReply
from tests.fakes.telegram_fake import FakeTelegram
from tests.kit import capture_logs, make_config, serving, user_texts, wait_until

ADMIN = 11
GUILD, CHANNEL, THREAD, PRIVATE = 500, 510, 520, 530
BOT = 7000
FAST = Backoff(first_s=0.01, max_s=0.02)  # tries again at once, in tests


def adapter_for(
    fake: FakeDiscord, token: str | None = None, streaming: bool = True
) -> DiscordAdapter:
    return DiscordAdapter(token or "TEST.DISCORD.TOKEN", commands=MENU,
                          api_base_url=fake.api_base_url, gateway_url=fake.gateway_url,
                          guild_ready_timeout=0.05, backoff=FAST,
                          streaming=streaming)  # fmt: skip


def roomy(config: Config) -> Config:
    """`config` with room for long answers (the fake model cuts at `max_tokens`)."""
    return config.model_copy(update={"model": config.model.model_copy(update={"max_tokens": 8192})})


@asynccontextmanager
async def discord_bot(
    tmp_path: Path, extra: str = "", streaming: bool = True
) -> AsyncIterator[tuple[FakeDiscord, FakeAnthropic, Runtime]]:
    async with FakeDiscord() as dc, FakeAnthropic() as model:
        dc.add_guild(GUILD, channels=[CHANNEL], members=[(ADMIN, "ann"), (12, "bob")])
        dc.add_thread(THREAD, CHANNEL, GUILD)
        config = roomy(
            make_config(tmp_path, model.url, f"admins: {{discord: [{ADMIN}]}}\n" + extra)
        )
        async with serving(config, [adapter_for(dc, streaming=streaming)]) as runtime:
            yield dc, model, runtime


async def test_a_dm_gets_an_answer_with_typing(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, model, _):
        dm = dc.push_message(900, "hello in private", author_id=ADMIN)
        [reply] = await dc.wait_sent(1)
    assert reply.content.endswith("hello in private") and reply.reply_to == dm
    assert reply.channel_id == 900 and 900 in dc.typing
    assert user_texts(model.requests[0])[-1] == "hello in private"
    assert reply.body["allowed_mentions"]["parse"] == []  # never @everyone or roles


async def test_a_dm_right_after_ready_is_answered_once(tmp_path: Path) -> None:
    async with FakeDiscord() as dc, FakeAnthropic() as model:
        dc.add_guild(GUILD, channels=[CHANNEL], members=[(ADMIN, "ann")])
        # Pushed before the client connects, the fake sends it right after READY and the
        # GUILD_CREATE: while discord.py still waits for guilds and nothing is synced.
        early = dc.push_message(900, "are you up yet?", author_id=ADMIN)
        asked = dc.push_interaction("help", [], user_id=ADMIN, channel_id=900)
        config = make_config(tmp_path, model.url, f"admins: {{discord: [{ADMIN}]}}\n")
        async with serving(config, [adapter_for(dc)]):
            [reply] = await dc.wait_sent(1)
            dc.push_message(900, "and now?", author_id=ADMIN)
            await dc.wait_sent(2)
            await dc.wait_for(lambda f: len(followups(f, asked)) == 1, what="the help")
    assert reply.reply_to == early and reply.content.endswith("are you up yet?")
    assert [user_texts(r)[-1] for r in model.requests] == ["are you up yet?", "and now?"]
    assert len(dc.sent) == 2
    assert (followups(dc, asked)[0].content or "").startswith(prompts.HELP[:20])


async def test_guild_messages_need_a_mention_or_a_reply(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, model, _):
        dc.push_message(CHANNEL, "talking among us", author_id=12, guild_id=GUILD)
        dc.push_message(CHANNEL, "another bot here", author_id=99, guild_id=GUILD,
                        author_bot=True, mention_bot=True)  # fmt: skip
        dc.push_message(CHANNEL, f"<@{BOT}> what's up", author_id=12, author_name="bob",
                        guild_id=GUILD, mention_bot=True)  # fmt: skip
        [first] = await dc.wait_sent(1)
        dc.push_message(CHANNEL, "and then?", author_id=12, author_name="bob", guild_id=GUILD,
                        reply_to=first.message_id)  # fmt: skip
        await dc.wait_sent(2)
    # Every message reaches the router, which answers only these two (a reply quotes the bot).
    asked = [user_texts(r)[-1] for r in model.requests]
    assert len(asked) == 2 and asked[0].endswith("bob: what's up")
    assert asked[1].startswith("bob: ") and asked[1].endswith("and then?")
    assert "another bot here" not in json.dumps(model.requests)


async def test_a_binding_can_answer_every_message_of_a_guild(tmp_path: Path) -> None:
    extra = f"bindings: [{{platform: discord, guild: {GUILD}, soul: lark, respond: always}}]\n"
    async with discord_bot(tmp_path, extra) as (dc, model, _):
        dc.push_message(CHANNEL, "no mention at all", author_id=12, author_name="bob",
                        guild_id=GUILD)  # fmt: skip
        await dc.wait_sent(1)
    assert user_texts(model.requests[0])[-1] == "bob: no mention at all"


async def test_a_thread_is_a_session_of_its_own(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, _, runtime):
        dc.push_message(CHANNEL, f"<@{BOT}> in the channel", author_id=12, guild_id=GUILD,
                        mention_bot=True)  # fmt: skip
        dc.push_message(THREAD, f"<@{BOT}> in the thread", author_id=12, guild_id=GUILD,
                        mention_bot=True)  # fmt: skip
        sent = await dc.wait_sent(2)
        keys = await runtime.db.run(
            lambda c: sorted(r[0] for r in c.execute("SELECT DISTINCT session FROM history"))
        )
    assert keys == [f"discord:{CHANNEL}", f"discord:{THREAD}"]
    assert sorted(s.channel_id for s in sent) == [CHANNEL, THREAD]


async def test_a_private_thread_keeps_its_own_memory(tmp_path: Path) -> None:
    secret = "the secret code word is ZEBRA42PURPLE"
    async with discord_bot(tmp_path) as (dc, model, runtime):
        dc.add_thread(PRIVATE, CHANNEL, GUILD, private=True)
        dc.push_message(PRIVATE, f"<@{BOT}> {secret}", author_id=ADMIN, guild_id=GUILD,
                        mention_bot=True)  # fmt: skip
        await dc.wait_sent(1)
        await runtime.memory.drain(5)
        dc.push_message(CHANNEL, f"<@{BOT}> what is the secret code word?", author_id=12,
                        guild_id=GUILD, mention_bot=True)  # fmt: skip
        await dc.wait_sent(2)
        scopes = await runtime.db.run(
            lambda c: sorted(r[0] for r in c.execute("SELECT scope FROM memory_scopes"))
        )
    assert scopes == [f"chat:discord:{CHANNEL}", f"chat:discord:{PRIVATE}"]
    assert "ZEBRA42PURPLE" not in json.dumps(model.requests[-1])


async def test_a_slash_forget_in_a_private_thread_erases_the_threads_memory(
    tmp_path: Path,
) -> None:
    """A slash command in a private thread is the thread's, as its messages are."""
    async with discord_bot(tmp_path) as (dc, _, runtime):
        dc.add_thread(PRIVATE, CHANNEL, GUILD, private=True)
        for place in (CHANNEL, PRIVATE):
            dc.push_message(place, f"<@{BOT}> remember {place}", author_id=ADMIN,
                            guild_id=GUILD, mention_bot=True)  # fmt: skip
        await dc.wait_sent(2)
        await runtime.memory.drain(5)
        confirm = [{"type": 5, "name": "confirm", "value": True}]
        token = dc.push_interaction("forget", confirm, user_id=ADMIN, channel_id=PRIVATE,
                                    guild_id=GUILD)  # fmt: skip
        await dc.wait_for(lambda f: len(followups(f, token)) == 1, what="the answer")
        left = [await runtime.memory.store.count("lark", f"chat:discord:{place}")
                for place in (CHANNEL, PRIVATE)]  # fmt: skip
        places = runtime.router.places
        groups = await places.groups() if places is not None else set()
    assert left[0] > 0 and left[1] == 0
    assert groups == {f"chat:discord:{CHANNEL}"}


async def test_a_long_answer_is_split_and_the_first_chunk_replies(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, model, _):
        model.script_text("\n\n".join(f"Paragraph {i}. " + "words " * 60 for i in range(20)))
        asked = dc.push_message(900, "tell me everything", author_id=ADMIN)
        await dc.wait_for(lambda f: len(f.sent) >= 4, what="four chunks")
        sent = dc.sent
    assert all(len(s.content) <= 2000 for s in sent)
    assert [s.reply_to for s in sent] == [asked] + [None] * (len(sent) - 1)
    assert "Paragraph 19." in sent[-1].content


async def test_prefix_commands_for_admins_and_refusals_for_others(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, model, runtime):
        dc.push_message(CHANNEL, "!soul reload", author_id=12, guild_id=GUILD)
        [refusal] = await dc.wait_sent(1)
        soul_md = runtime.config.workspaces / "lark" / "SOUL.md"
        soul_md.write_text("---\nname: Lark\nhexaco: {openness: 7}\n---\nbroken")
        dc.push_message(CHANNEL, "!soul reload", author_id=ADMIN, guild_id=GUILD)
        [_, report] = await dc.wait_sent(2)
        dc.push_message(CHANNEL, f"<@{BOT}> still you?", author_id=ADMIN, guild_id=GUILD,
                        mention_bot=True)  # fmt: skip
        await dc.wait_sent(3)
    assert refusal.content == prompts.ADMIN_ONLY.format(command="soul")
    assert "lark: failed:" in report.content and "openness" in report.content
    assert "You are Lark" in json.dumps(model.requests[-1]["system"])


async def test_the_slash_command_group_is_synced_and_answers_privately(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, _, _):
        names = {c["name"] for c in dc.commands[None]}
        assert names == {"soul", "pair", "reset", "retry", "undo", "forget", "memory",
                         "reminders", "timezone", "checkins", "help"}  # fmt: skip
        token = dc.push_interaction("soul status", [], user_id=ADMIN, channel_id=CHANNEL,
                                    guild_id=GUILD)  # fmt: skip
        await dc.wait_for(
            lambda f: any(r.kind == "followup" and r.token == token for r in f.interaction_replies),
            what="the follow-up",
        )
        refused = dc.push_interaction("soul reload", [], user_id=12, channel_id=CHANNEL,
                                      guild_id=GUILD)  # fmt: skip
        await dc.wait_for(
            lambda f: any(
                r.kind == "followup" and r.token == refused for r in f.interaction_replies
            ),
            what="the refusal",
        )
    replies = {r.token: r for r in dc.interaction_replies if r.kind == "followup"}
    assert (replies[token].content or "").startswith("Souls:\n- lark version ")
    assert replies[refused].content == prompts.ADMIN_ONLY.format(command="soul")
    assert replies[token].data["flags"] & 64  # ephemeral: only the admin sees it
    assert dc.sent == []


async def test_a_dropped_gateway_is_resumed_and_the_next_message_answered_once(
    tmp_path: Path,
) -> None:
    async with discord_bot(tmp_path) as (dc, model, _):
        dc.push_message(900, "before the drop", author_id=ADMIN)
        await dc.wait_sent(1)
        dc.drop_connection()
        dc.push_message(900, "after the drop", author_id=ADMIN)
        await dc.wait_sent(2)
        await dc.wait_for(lambda f: f.resume_count + f.identify_count >= 2, what="a reconnect")
    assert [user_texts(r)[-1] for r in model.requests] == ["before the drop", "after the drop"]
    assert len(dc.sent) == 2


async def test_a_1006_during_a_burst_loses_nothing_and_answers_nothing_twice(
    tmp_path: Path,
) -> None:
    extra = "adapters: {discord: {dm_policy: open}}\n"
    async with discord_bot(tmp_path, extra) as (dc, model, _):
        people = range(100, 120)  # 20 people, one DM each: one answer per message
        for n, person in enumerate(people):
            if n == 10:
                await dc.wait_sent(3)  # some answered, some in flight, some not yet read
                dc.drop_connection()  # close code 1006 mid-burst; discord.py RESUMEs
            dc.push_message(person + 1000, f"message {n}", author_id=person)
        sent = await dc.wait_sent(20)
        await dc.wait_for(lambda f: f.resume_count >= 1 and f.connected, what="the resume")
    assert sorted(s.channel_id for s in sent) == [person + 1000 for person in people]
    asked = sorted(user_texts(r)[-1] for r in model.requests)
    assert asked == sorted(f"message {n}" for n in range(20))
    assert len(dc.sent) == 20  # nothing twice, after the wait for the last reply too


async def test_the_same_message_twice_and_a_failing_send(tmp_path: Path) -> None:
    with capture_logs() as logs:  # `send` (a stream's final edit tries a refused post again)
        async with discord_bot(tmp_path, streaming=False) as (dc, model, runtime):
            dc.fail_next("POST", r"^/channels/900/messages$", 403)
            dc.push_message(900, "first", author_id=ADMIN, message_id=4242)
            dc.push_message(900, "first", author_id=ADMIN, message_id=4242)
            await dc.wait_for(
                lambda f: any(r.path == "/channels/900/messages" for r in f.requests),
                what="the refused send",
            )
            dc.push_message(900, "second", author_id=ADMIN)
            [reply] = await dc.wait_sent(1)
            stored = await runtime.db.run(
                lambda c: [
                    r[0] for r in c.execute("SELECT content FROM history WHERE role = 'user'")
                ]
            )
    assert reply.content.endswith("second")
    assert stored == ["first", "second"]  # the repeated delivery was dropped
    assert [user_texts(r)[-1] for r in model.requests] == ["first", "second"]
    errors = [e for e in logs if e["event"] == "adapter.error"]
    assert len(errors) == 1 and "Missing Permissions" in errors[0]["error"]


def three_parts() -> str:
    """An answer of three chunks, one per part."""
    return "\n\n".join(f"Part {name}. " + "words " * 250 for name in "ABC")


async def test_a_lost_answer_or_a_503_mid_reply_is_retried_and_nothing_arrives_twice(
    tmp_path: Path,
) -> None:
    with capture_logs() as logs:
        async with discord_bot(tmp_path) as (dc, model, _):
            model.script_text(three_parts())
            dc.drop_next("POST", r"^/channels/900/messages$", after=True)  # made, answer lost
            dc.fail_next("POST", r"^/channels/900/messages$", 503)  # then a 503
            dc.push_message(900, "tell me in three parts", author_id=ADMIN)
            sent = await dc.wait_sent(3)
            posts = [r for r in dc.requests if r.path == "/channels/900/messages"]
    assert [s.content[:7] for s in dc.sent] == ["Part A.", "Part B.", "Part C."]
    assert len(posts) == 5 and posts[0].json["nonce"] == posts[2].json["nonce"]
    assert sent[0].reply_to is not None and sent[1].reply_to is None
    assert [e for e in logs if e["event"] == "adapter.error"] == []
    assert len([e for e in logs if e["event"] == "adapter.send_retry"]) == 2


async def test_a_reply_that_still_fails_says_what_was_not_delivered(tmp_path: Path) -> None:
    with capture_logs() as logs:  # `send` (a stream tries its preview, then its final text)
        async with discord_bot(tmp_path, streaming=False) as (dc, model, _):
            model.script_text(three_parts())
            dc.fail_next("POST", r"^/channels/900/messages$", 503, times=20)
            dc.push_message(900, "tell me in three parts", author_id=ADMIN)
            await wait_until(lambda: any(e["event"] == "adapter.error" for e in logs))
            posts = [r for r in dc.requests if r.path == "/channels/900/messages"]
    assert dc.sent == [] and len(posts) == 4  # tries
    [error] = [e for e in logs if e["event"] == "adapter.error"]
    assert "3 of 3 chunks not delivered: DiscordServerError: 503" in error["error"]


async def test_a_bad_token_is_logged_and_the_other_platform_serves(tmp_path: Path) -> None:
    async with FakeDiscord() as dc, FakeTelegram() as tg, FakeAnthropic() as model:
        config = make_config(tmp_path, model.url, "adapters: {telegram: {dm_policy: open}}\n")
        adapters = [adapter_for(dc, token="WRONG.TOKEN"),
                    TelegramAdapter(tg.token, tg.base_url, MENU, poll_timeout_s=1)]  # fmt: skip
        with capture_logs() as logs:
            async with serving(config, adapters) as runtime:  # type: ignore[arg-type]
                assert list(runtime.adapters) == ["telegram"]
                tg.push_message(5, "anyone?", user_id=5)
                [reply] = await tg.wait_sent(1)
    assert reply["text"].endswith("anyone?")
    [error] = [e for e in logs if e["event"] == "adapter.error"]
    assert error["adapter"] == "discord" and error["stage"] == "start"
    assert "token was rejected" in error["error"] and "WRONG" not in error["error"]


async def test_pairing_on_discord_from_a_dm_to_approval(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, model, _):
        dc.push_message(901, "hello, bot?", author_id=42, author_name="zed")
        [code_message] = await dc.wait_sent(1)
        code = code_message.content.split("Your pairing code is ")[1].split()[0]
        dc.push_message(900, f"!pair approve {code}", author_id=ADMIN)
        await dc.wait_sent(3)
        dc.push_message(901, "thanks!", author_id=42, author_name="zed")
        await dc.wait_sent(4)
    to_zed = [s.content for s in dc.sent if s.channel_id == 901]
    assert to_zed[1] == prompts.PAIR_WELCOME and to_zed[2].endswith("thanks!")
    assert len(model.requests) == 1  # the first message reached no model


def followups(dc: FakeDiscord, token: str) -> list[InteractionReply]:
    return [r for r in dc.interaction_replies if r.kind == "followup" and r.token == token]


async def test_a_slash_compile_and_its_later_report_stay_ephemeral(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, model, runtime):
        dc.push_message(900, "my pin is 4242", author_id=ADMIN)
        await dc.wait_sent(1)
        await runtime.memory.drain(5)
        model.script_error(400, "invalid_request_error", "prompt is too long: 250000 tokens")
        token = dc.push_interaction("soul compile", [], user_id=ADMIN, channel_id=CHANNEL,
                                    guild_id=GUILD)  # fmt: skip
        await dc.wait_for(lambda f: len(followups(f, token)) == 2, what="answer and report")
        public = dc.sent
    texts = sorted(r.content or "" for r in followups(dc, token))
    assert texts[0] == prompts.COMPILE_STARTED.format(souls="every soul")
    assert texts[1].startswith("The compile failed for 1 wiki(s)")
    assert "- lark, 1 private wiki: ModelRejected: " in texts[1]
    assert "user:discord" not in texts[1] and "too long" not in texts[1]
    assert all(r.data["flags"] & 64 for r in followups(dc, token))  # only the admin sees them
    assert [s.channel_id for s in public] == [900]  # the DM answer; nothing in the channel


async def test_an_answer_after_the_interaction_expired_goes_to_the_askers_dm(
    tmp_path: Path,
) -> None:
    with capture_logs() as logs:
        async with discord_bot(tmp_path) as (dc, _, _):
            dc.push_message(900, "hello", author_id=ADMIN)  # the admin's DM channel is 900
            await dc.wait_sent(1)
            token = dc.push_interaction("soul status", [], user_id=ADMIN, channel_id=CHANNEL,
                                        guild_id=GUILD, age_s=16 * 60)  # fmt: skip
            [_, answer] = await dc.wait_sent(2)
    assert answer.channel_id == 900 and answer.content.startswith("Souls:")
    assert "user:discord" not in answer.content  # written for the guild it was asked in
    assert followups(dc, token) == []
    assert [e["user_id"] for e in logs if e["event"] == "discord.interaction_expired"] == [
        str(ADMIN)
    ]


async def test_a_strangers_name_is_plain_text_in_the_pair_list(tmp_path: Path) -> None:
    evil = "[Approve me](https://evil.example)"
    async with discord_bot(tmp_path) as (dc, _, _):
        dc.push_message(901, "hello, bot?", author_id=42, author_name=evil)
        await dc.wait_sent(1)
        dc.push_message(900, "!pair list", author_id=ADMIN)
        [_, listing] = await dc.wait_sent(2)
    assert r"\[Approve me\]\(https://evil.example\) (discord id 42)" in listing.content


async def test_a_memory_export_is_an_attachment_in_the_dm_and_a_private_follow_up(
    tmp_path: Path,
) -> None:
    async with discord_bot(tmp_path) as (dc, _, _):
        asked = dc.push_message(900, "!memory export", author_id=ADMIN)
        await dc.wait_sent(2)
        token = dc.push_interaction("memory", [{"type": 3, "name": "action", "value": "export"}],
                                    user_id=ADMIN, channel_id=900)  # fmt: skip
        await dc.wait_for(lambda f: len(followups(f, token)) == 2, what="the file and the line")
        group = dc.push_interaction("memory", [], user_id=ADMIN, channel_id=CHANNEL,
                                    guild_id=GUILD)  # fmt: skip
        await dc.wait_for(lambda f: len(followups(f, group)) == 1, what="the refusal")
    file_message, line = dc.sent
    assert file_message.reply_to == asked and file_message.content == ""
    [upload] = file_message.files
    assert upload.filename.startswith("memory-lark-") and upload.filename.endswith(".md")
    assert upload.data.decode().startswith("# What Lark keeps about you")
    assert line.content == prompts.MEMORY_EXPORTED.format(pages=0, logs=0, waiting=0)
    private = followups(dc, token)
    assert [len(r.files) for r in private] == [1, 0] and all(r.data["flags"] & 64 for r in private)
    assert private[0].files[0].data == upload.data
    assert [r.content for r in followups(dc, group)] == [prompts.MEMORY_DM_ONLY]
