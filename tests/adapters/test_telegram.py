"""Telegram end to end: the real python-telegram-bot against the Bot API fake,
the real runtime against the model fake."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from adapters.retry import Backoff
from adapters.split import utf16_len
from adapters.telegram_adapter import TelegramAdapter, api_url
from bot import prompts
from bot.app.runtime import Runtime
from bot.chat.commands import MENU
from bot.config.schema import Config
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.telegram_fake import DROPPED, FakeTelegram, parse_html
from tests.kit import capture_logs, make_config, serving, user_texts, wait_until

ADMIN = 1
GROUP = -100
FAST = Backoff(first_s=0.01, max_s=0.02)  # tries again at once, in tests


def roomy(config: Config) -> Config:
    """`config` with room for long answers (the fake model cuts at `max_tokens`)."""
    return config.model_copy(update={"model": config.model.model_copy(update={"max_tokens": 8192})})


@asynccontextmanager
async def telegram(
    tmp_path: Path, extra: str = "", **fake_options: bool
) -> AsyncIterator[tuple[FakeTelegram, FakeAnthropic, Runtime]]:
    async with FakeTelegram(**fake_options) as tg, FakeAnthropic() as model:  # type: ignore[arg-type]
        config = roomy(
            make_config(tmp_path, model.url, f"admins: {{telegram: [{ADMIN}]}}\n" + extra)
        )
        adapter = TelegramAdapter(tg.token, tg.base_url, MENU, poll_timeout_s=1, backoff=FAST)
        async with serving(config, [adapter]) as runtime:
            yield tg, model, runtime


def texts(tg: FakeTelegram, chat: int) -> list[str]:
    return [m["text"] for m in tg.sent if str(m["chat_id"]) == str(chat)]


def test_base_url_takes_the_bot_suffix_or_not() -> None:
    assert api_url(None) == "https://api.telegram.org/bot"
    assert api_url("http://127.0.0.1:8081") == "http://127.0.0.1:8081/bot"
    assert api_url("http://127.0.0.1:8081/bot/") == "http://127.0.0.1:8081/bot"


async def test_a_dm_gets_an_answer_with_typing_and_the_menu_is_set(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        assert [c["command"] for c in tg.commands] == [name for name, _ in MENU]
        sent_id = tg.push_message(ADMIN, "hello there", user_id=ADMIN)
        [reply] = await tg.wait_sent(1)
    assert reply["text"].endswith("hello there")
    assert reply["reply_parameters"]["message_id"] == sent_id
    assert reply["parse_mode"] == "HTML"
    actions = tg.calls_of("sendChatAction")
    assert actions and actions[0].params["action"] == "typing"
    assert user_texts(model.requests[0])[-1] == "hello there"


async def test_group_messages_need_a_mention_a_reply_or_a_command(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        tg.push_message(GROUP, "just chatting", user_id=5, chat_type="supergroup")
        tg.push_message(GROUP, "/help@someone_else_bot", user_id=5, chat_type="supergroup")
        tg.push_message(GROUP, "hi @soul_test_bot how are you", user_id=5, chat_type="supergroup")
        await tg.wait_sent(1)
        tg.push_message(GROUP, "and you?", user_id=5, chat_type="supergroup", reply_to_bot=True)
        tg.push_message(GROUP, "/help@soul_test_bot", user_id=5, chat_type="supergroup")
        await tg.wait_sent(3)
    assert len(model.requests) == 2
    first = user_texts(model.requests[0])[-1]
    assert first.endswith("Ann: hi how are you")  # the mention is taken out
    second = user_texts(model.requests[1])[-1]  # a reply: the bot's message is quoted first
    assert second.startswith("Ann: ") and second.endswith("and you?")
    assert texts(tg, GROUP).count(prompts.HELP) == 1 and len(tg.sent) == 3


async def test_forum_topics_are_sessions_of_their_own(tmp_path: Path) -> None:
    extra = "adapters: {telegram: {groups: always}}\n"
    async with telegram(tmp_path, extra) as (tg, _, runtime):
        tg.push_message(GROUP, "in topic 7", user_id=5, chat_type="supergroup",
                        message_thread_id=7, is_topic_message=True)  # fmt: skip
        tg.push_message(GROUP, "in topic 9", user_id=5, chat_type="supergroup",
                        message_thread_id=9, is_topic_message=True)  # fmt: skip
        sent = await tg.wait_sent(2)
        keys = await runtime.db.run(
            lambda c: [r[0] for r in c.execute("SELECT DISTINCT session FROM history")]
        )
    assert sorted(keys) == [f"telegram:{GROUP}:7", f"telegram:{GROUP}:9"]
    assert sorted(int(m["message_thread_id"]) for m in sent) == [7, 9]


async def test_a_long_answer_arrives_in_chunks_with_fences_balanced(tmp_path: Path) -> None:
    code = "\n".join(f"    line_{i} = {i} * 2  # some code" for i in range(150))
    answer = ("Intro paragraph. " * 80) + "\n\n```python\n" + code + "\n```\n\n" + ("Outro. " * 400)
    assert len(answer) > 9000
    async with telegram(tmp_path) as (tg, model, _):
        model.script_text(answer)
        tg.push_message(ADMIN, "write a lot", user_id=ADMIN)
        await tg.wait_for(lambda f: len(f.sent) >= 3, what="three chunks")
        await wait_until(
            lambda: not [c for c in tg.calls if c.method == "sendMessage" and c.status != 200]
        )
        chunks = [m["text"] for m in tg.sent]
    assert len(chunks) >= 3
    for chunk in chunks:  # Telegram's limit counts the text without the tags
        assert utf16_len(parse_html(chunk)) <= 4096
        assert chunk.count("<pre>") == chunk.count("</pre>")
    joined = "".join(chunks)
    assert "line_0 = 0" in joined and "line_149 = 149" in joined


async def test_refused_entities_fall_back_to_plain_text(tmp_path: Path) -> None:
    async with telegram(tmp_path, strict_html=True) as (tg, model, _):
        tg.fail_next("sendMessage", 400, "Bad Request: can't parse entities: unsupported start tag",
                     when=lambda p: p.get("parse_mode") == "HTML")  # fmt: skip
        model.script_text("**bold** claim")
        tg.push_message(ADMIN, "go", user_id=ADMIN)
        [reply] = await tg.wait_sent(1)
    assert reply["text"] == "**bold** claim" and "parse_mode" not in reply


async def test_flood_control_is_waited_out(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, _, _):
        tg.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
        tg.push_message(ADMIN, "are you there", user_id=ADMIN)
        [reply] = await tg.wait_sent(1)
        failed = [c for c in tg.calls_of("sendMessage") if c.status == 429]
    assert reply["text"].endswith("are you there") and len(failed) == 1
    assert tg.calls_of("sendMessage")[-1].t - failed[0].t >= 1.0


async def test_edits_service_messages_and_media(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        tg.push_update({"edited_message": {
            "message_id": 50, "date": 1, "edit_date": 2, "text": "edited",
            "chat": {"id": ADMIN, "type": "private"},
            "from": {"id": ADMIN, "is_bot": False, "first_name": "Ann"}}})  # fmt: skip
        joined = {"new_chat_members": [{"id": 6, "is_bot": False, "first_name": "B"}]}
        tg.push_message(GROUP, None, user_id=5, chat_type="supergroup", extra=joined)
        tg.push_message(ADMIN, None, user_id=ADMIN,
                        extra={"video": {"file_id": "v", "file_unique_id": "v", "width": 4,
                                         "height": 3, "duration": 3}})  # fmt: skip
        tg.push_message(ADMIN, "after", user_id=ADMIN)
        sent = await tg.wait_sent(2)
    assert sent[0]["text"] == prompts.TEXT_ONLY
    assert sent[1]["text"].endswith("after")
    assert len(model.requests) == 1


async def test_the_same_update_twice_is_answered_once(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        message = {"message_id": 77, "date": 1, "text": "once please",
                   "chat": {"id": ADMIN, "type": "private"},
                   "from": {"id": ADMIN, "is_bot": False, "first_name": "Ann"}}  # fmt: skip
        tg.push_update({"message": message})
        tg.push_update({"message": message})
        tg.push_message(ADMIN, "next", user_id=ADMIN)
        sent = await tg.wait_sent(2)
    assert len(model.requests) == 2
    assert user_texts(model.requests[0])[-1].endswith("once please")
    assert sent[-1]["text"].endswith("next")


async def test_huge_and_control_character_messages_do_not_crash(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        tg.push_message(ADMIN, "x" * 100_000, user_id=ADMIN)
        tg.push_message(ADMIN, "\x00\x01\x02\x1b[31m\x7f bell\x07", user_id=ADMIN)
        tg.push_message(ADMIN, "still fine?", user_id=ADMIN)
        await tg.wait_for(lambda f: any(m["text"].endswith("still fine?") for m in f.sent),
                          what="the last answer")  # fmt: skip
    # The three may reach the model in one turn or several: find the cut one.
    texts = [text for r in model.requests for text in user_texts(r)]
    first = next(text for text in texts if text.startswith("x" * 100))
    assert first.endswith(prompts.MESSAGE_CUT.format(chars=100_000))
    assert len(first) < 8100
    assert any(text.endswith("[31m bell") for r in model.requests for text in user_texts(r))


async def test_a_failing_send_is_logged_and_the_bot_goes_on(tmp_path: Path) -> None:
    with capture_logs() as logs:
        async with telegram(tmp_path) as (tg, _, _):
            tg.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
            tg.push_message(ADMIN, "first", user_id=ADMIN)
            await tg.wait_for(lambda f: any(c.status == 403 for c in f.calls), what="the 403")
            tg.push_message(ADMIN, "second", user_id=ADMIN)
            [reply] = await tg.wait_sent(1)
    assert reply["text"].endswith("second")
    errors = [e for e in logs if e["event"] == "adapter.error"]
    assert len(errors) == 1 and "blocked" in errors[0]["error"].lower()
    assert len([c for c in tg.calls_of("sendMessage") if c.status == 403]) == 1  # not retried


def three_parts() -> str:
    """An answer of three chunks, one per part (each part near Telegram's limit)."""
    return "\n\n".join(f"Part {name}. " + "words " * 600 for name in "ABC")


def part(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda params: str(params.get("text", "")).startswith(f"Part {name}.")


async def test_a_transient_error_mid_reply_is_retried_and_every_chunk_arrives(
    tmp_path: Path,
) -> None:
    with capture_logs() as logs:
        async with telegram(tmp_path) as (tg, model, _):
            model.script_text(three_parts())
            tg.fail_next("sendMessage", 502, "Bad Gateway", when=part("B"))
            tg.drop_next("sendMessage", when=part("C"))
            tg.push_message(ADMIN, "tell me in three parts", user_id=ADMIN)
            sent = await tg.wait_sent(3)
    assert [m["text"][:7] for m in sent] == ["Part A.", "Part B.", "Part C."]
    assert [c.status for c in tg.calls_of("sendMessage")] == [200, 502, 200, DROPPED, 200]
    assert [e for e in logs if e["event"] == "adapter.error"] == []
    assert [e["attempt"] for e in logs if e["event"] == "adapter.send_retry"] == [1, 1]


async def test_a_chunk_that_still_fails_says_what_was_not_delivered(tmp_path: Path) -> None:
    with capture_logs() as logs:
        async with telegram(tmp_path) as (tg, model, _):
            model.script_text(three_parts())
            tg.fail_next("sendMessage", 503, "Service Unavailable", times=20, when=part("B"))
            tg.push_message(ADMIN, "tell me in three parts", user_id=ADMIN)
            await wait_until(lambda: any(e["event"] == "adapter.error" for e in logs))
    assert [m["text"][:7] for m in tg.sent] == ["Part A."]
    assert len([c for c in tg.calls_of("sendMessage") if c.status == 503]) == 4  # tries
    [error] = [e for e in logs if e["event"] == "adapter.error"]
    assert "2 of 3 chunks not delivered" in error["error"]
    assert "Service Unavailable" in error["error"]


async def test_another_poller_is_one_clear_line_and_polling_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with capture_logs() as logs:
        async with FakeTelegram() as tg, FakeAnthropic() as model:
            tg.conflict_next_polls(2)  # another process polls with this token, then stops
            config = make_config(tmp_path, model.url, f"admins: {{telegram: [{ADMIN}]}}\n")
            adapter = TelegramAdapter(tg.token, tg.base_url, MENU, poll_timeout_s=1)
            async with serving(config, [adapter]):
                await tg.wait_for(
                    lambda f: [c.status for c in f.calls_of("getUpdates")][:3] == [409, 409, 200],
                    what="two conflicts, then a poll of ours",
                )
                tg.push_message(ADMIN, "still there?", user_id=ADMIN)
                [reply] = await tg.wait_sent(1)
    assert reply["text"].endswith("still there?")
    [error] = [e for e in logs if e["event"] == "adapter.error"]
    assert error["stage"] == "polling" and "Conflict" in error["error"]
    assert "another process polls with this token" in error["reason"]
    assert [r for r in caplog.records if r.name.startswith("telegram") and r.exc_info] == []


async def test_a_strangers_photo_meets_the_dm_gate_first(tmp_path: Path) -> None:
    photo = {"photo": [{"file_id": "p", "file_unique_id": "p", "width": 1, "height": 1}]}
    async with telegram(tmp_path) as (tg, model, _):
        tg.push_message(42, None, user_id=42, first_name="Zed", extra=photo)
        [reply] = await tg.wait_sent(1)
    assert "Your pairing code is" in reply["text"]
    assert model.requests == []


async def test_pairing_from_first_message_to_approval(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        tg.push_message(42, "hi, who are you?", user_id=42, first_name="Zed")
        [code_message] = await tg.wait_sent(1)
        code = code_message["text"].split("Your pairing code is ")[1].split()[0]
        tg.push_message(ADMIN, f"/pair approve {code}", user_id=ADMIN)
        await tg.wait_sent(3)
        tg.push_message(42, "thanks!", user_id=42, first_name="Zed")
        await tg.wait_sent(4)
    assert texts(tg, 42)[1:] == [prompts.PAIR_WELCOME, texts(tg, 42)[-1]]
    assert texts(tg, 42)[-1].endswith("thanks!")
    assert "Approved Zed" in texts(tg, ADMIN)[0]
    assert len(model.requests) == 1  # the first message reached no model


async def test_a_non_admin_reload_is_refused(tmp_path: Path) -> None:
    async with telegram(tmp_path, "adapters: {telegram: {dm_policy: open}}\n") as (tg, _, _):
        tg.push_message(5, "/soul reload", user_id=5)
        [reply] = await tg.wait_sent(1)
    assert reply["text"] == prompts.ADMIN_ONLY.format(command="soul")


async def test_a_broken_reload_reports_and_the_soul_still_answers(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, runtime):
        soul_md = runtime.config.workspaces / "lark" / "SOUL.md"
        soul_md.write_text("---\nname: [not, a, name]\n---\n")
        tg.push_message(ADMIN, "/soul reload", user_id=ADMIN)
        [report] = await tg.wait_sent(1)
        tg.push_message(ADMIN, "still you?", user_id=ADMIN)
        await tg.wait_sent(2)
    assert "lark: failed:" in report["text"] and "SOUL.md" in report["text"]
    assert "You are Lark" in json.dumps(model.requests[-1]["system"])


async def test_forget_confirm_erases_what_recall_found(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, runtime):
        tg.push_message(ADMIN, "my locker code is falcon 2231", user_id=ADMIN)
        await tg.wait_sent(1)
        tg.push_message(ADMIN, "/reset", user_id=ADMIN)
        await tg.wait_sent(2)
        await runtime.memory.drain(5)
        tg.push_message(ADMIN, "what is my locker code?", user_id=ADMIN)
        await tg.wait_sent(3)
        assert "falcon 2231" in json.dumps(model.requests[-1]["messages"])  # recalled
        tg.push_message(ADMIN, "/forget", user_id=ADMIN)
        tg.push_message(ADMIN, "/forget confirm", user_id=ADMIN)
        await tg.wait_sent(5)
        tg.push_message(ADMIN, "what is my locker code?", user_id=ADMIN)
        await tg.wait_sent(6)
    assert texts(tg, ADMIN)[3:5] == [prompts.FORGET_ASK, prompts.FORGET_DONE]
    assert "falcon" not in json.dumps(model.requests[-1])


async def test_a_strangers_name_is_plain_text_in_the_pair_list(tmp_path: Path) -> None:
    evil = "[Approve me](https://evil.example) **now**"
    async with telegram(tmp_path) as (tg, _, _):
        tg.push_message(43, "hi", user_id=43, first_name=evil)
        await tg.wait_sent(1)
        tg.push_message(ADMIN, "/pair list", user_id=ADMIN)
        await tg.wait_sent(2)
    [listing] = tg.sent[1:]
    assert listing["parse_mode"] == "HTML"
    assert "<a" not in listing["text"] and "<b>" not in listing["text"]
    assert f": {evil} (telegram id 43), 60 min left" in parse_html(listing["text"])


async def test_a_memory_export_is_a_document_and_a_group_gets_one_line(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, _, _):
        asked = tg.push_message(ADMIN, "/memory export", user_id=ADMIN)
        await tg.wait_for(lambda f: bool(f.documents and f.sent), what="the file and the line")
        tg.push_message(GROUP, "/memory", user_id=ADMIN, chat_type="supergroup")
        await tg.wait_sent(2)
    [document] = tg.documents
    assert document.chat_id == ADMIN and document.caption is None
    assert document.file.file_name.startswith("memory-lark-")
    assert document.file.mime_type == "text/markdown"
    assert document.file.data.decode().startswith("# What Lark keeps about you")
    [call] = [c for c in tg.calls_of("sendDocument") if c.status == 200]
    assert call.params["reply_parameters"]["message_id"] == asked
    assert texts(tg, ADMIN) == [prompts.MEMORY_EXPORTED.format(pages=0, logs=0, waiting=0)]
    assert texts(tg, GROUP) == [prompts.MEMORY_DM_ONLY]
