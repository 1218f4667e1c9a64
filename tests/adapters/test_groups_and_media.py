"""Group chats, quotes, images and streamed replies end to end: the real
python-telegram-bot and discord.py against their fakes, the real runtime
against the model fake (issue 15's scenarios)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from itertools import pairwise
from pathlib import Path

import pytest

from adapters.discord_adapter import LIMIT as DISCORD_LIMIT
from tests.adapters.test_discord import ADMIN, CHANNEL, GUILD, discord_bot
from tests.adapters.test_telegram import GROUP, telegram
from tests.fakes.anthropic_fake import Reply, images
from tests.fakes.discord_fake import FakeFile
from tests.kit import user_texts, wait_until

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
ANSWER = " ".join(f"word{n}" for n in range(120))  # about 1,000 characters


async def test_a_telegram_group_turn_sees_the_five_lines_before_it(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        for n, name in enumerate(["Bob", "Cy", "Dee", "Bob", "Eve"]):
            tg.push_message(GROUP, f"line {n}", user_id=20 + n, first_name=name,
                            chat_type="supergroup")  # fmt: skip
        tg.push_message(GROUP, f"@{tg.username} what do you all think?", user_id=7,
                        first_name="Ann", chat_type="supergroup")  # fmt: skip
        await tg.wait_sent(1)
    assert len(model.requests) == 1
    [context] = [t for t in user_texts(model.requests[0]) if "since you last spoke" in t]
    assert context.splitlines()[1:] == [
        "Bob: line 0", "Cy: line 1", "Dee: line 2", "Bob: line 3", "Eve: line 4",
    ]  # fmt: skip
    assert user_texts(model.requests[0])[-1] == "Ann: what do you all think?"


async def test_a_telegram_reply_to_a_third_person_carries_the_quote(tmp_path: Path) -> None:
    async with telegram(tmp_path) as (tg, model, _):
        said = tg.push_message(GROUP, "the moon is made of cheese", user_id=21, first_name="Bob",
                               chat_type="supergroup")  # fmt: skip
        tg.push_message(GROUP, f"@{tg.username} is this right?", user_id=7, first_name="Ann",
                        chat_type="supergroup", reply_to=said)  # fmt: skip
        await tg.wait_sent(1)
    row = user_texts(model.requests[-1])[-1]
    assert row == 'Ann: (replying to Bob: "the moon is made of cheese")\nis this right?'


async def test_a_telegram_photo_reaches_the_model_as_an_image_block(tmp_path: Path) -> None:
    async with telegram(tmp_path, "adapters: {telegram: {dm_policy: open}}\n") as (tg, model, _):
        model.script_text("[seen: one white pixel]\nA very small picture.")
        tg.push_message(9, None, user_id=9, extra=tg.photo_extra(PNG, caption="what is this?"))
        [sent] = await tg.wait_sent(1)
    assert images(model.requests[0]) == [("image/png", PNG)]  # what its bytes are
    assert user_texts(model.requests[0])[-1] == "[photo: what is this?]"
    assert sent["text"] == "A very small picture."


async def test_a_discord_image_reaches_the_model_and_an_oversize_one_is_refused(
    tmp_path: Path,
) -> None:
    async with discord_bot(tmp_path) as (dc, model, _):
        dc.push_message(CHANNEL, f"<@{dc.bot_id}> look", author_id=12, guild_id=GUILD,
                        mention_bot=True,
                        attachments=[FakeFile("dot.png", PNG, "image/png")])  # fmt: skip
        await dc.wait_sent(1)
        big = FakeFile("big.png", PNG, "image/png", declared_size=6 * 1024 * 1024)
        dc.push_message(CHANNEL, f"<@{dc.bot_id}> and this", author_id=12, guild_id=GUILD,
                        mention_bot=True, attachments=[big])  # fmt: skip
        sent = await dc.wait_sent(3)
    assert images(model.requests[0]) == [("image/png", PNG)]
    assert user_texts(model.requests[0])[-1] == "ann: [image: look]"
    refusal = sent[1].content
    assert refusal == (
        "Not everything you sent reached me: the image is too large for me to look at "
        "(6 MB; I take up to 3.75 MB)."
    )
    assert len(dc.downloads) == 1  # the oversize one was never downloaded
    assert images(model.requests[1]) == []
    assert user_texts(model.requests[1])[-1] == "ann: [image: and this; not seen: refused]"


async def test_a_discord_stream_edits_at_most_once_a_second_to_the_plain_answer(
    tmp_path: Path,
) -> None:
    finals = []
    for streaming in (False, True):
        async with discord_bot(tmp_path / str(streaming), streaming=streaming) as (dc, model, _):
            model.configure(stream_chunk_chars=40, stream_delay_s=0.1)
            model.script_text(ANSWER)
            dc.push_message(CHANNEL, f"<@{dc.bot_id}> talk", author_id=12, guild_id=GUILD,
                            mention_bot=True, message_id=777)  # fmt: skip
            [sent] = await dc.wait_sent(1)
            await wait_until(lambda m=model: m.requests, within=10)
            await wait_until(lambda d=dc, s=sent: d.message_text(s.message_id) == ANSWER, within=15)
            dc.push_message(
                CHANNEL,
                f"<@{dc.bot_id}> talk",
                author_id=12,
                guild_id=GUILD,
                mention_bot=True,
                message_id=777,
            )  # the same message again
            edits = list(dc.edits)
            requests = list(model.requests)
        finals.append(dc.message_text(sent.message_id))
        if streaming:
            assert requests[0]["stream"] is True
            assert len(dc.sent) == 1  # one message, made early and edited
            assert len(sent.content) < len(ANSWER) and len(edits) >= 2
            gaps = [b.at - a.at for a, b in pairwise(edits)]
            assert all(gap >= 0.95 for gap in gaps), gaps
        else:
            assert "stream" not in requests[0] and edits == []
        assert len(requests) == 1  # the duplicate delivery got no second turn
    assert finals == [ANSWER, ANSWER]
    assert len(ANSWER) < DISCORD_LIMIT


async def test_a_stream_that_breaks_leaves_one_message_that_says_so(tmp_path: Path) -> None:
    async with discord_bot(tmp_path) as (dc, model, runtime):
        model.configure(stream_chunk_chars=10, stream_delay_s=0.05)
        model.script(Reply.of_stream_error(ANSWER, after_chars=300))
        dc.push_message(CHANNEL, f"<@{dc.bot_id}> talk", author_id=12, guild_id=GUILD,
                        mention_bot=True)  # fmt: skip
        [sent] = await dc.wait_sent(1)
        await wait_until(lambda: dc.message_text(sent.message_id).startswith("I can't answer"))
        await runtime.sessions.wait(5)
        history = await runtime.history.load(f"discord:{CHANNEL}")
    assert len(dc.sent) == 1
    assert [e.role for e in history.entries] == ["user"]  # no half answer stored


async def test_a_telegram_dm_stream_is_drafts_then_one_message(tmp_path: Path) -> None:
    async with telegram(tmp_path, "adapters: {telegram: {dm_policy: open}}\n") as (tg, model, _):
        model.configure(stream_chunk_chars=40, stream_delay_s=0.1)
        model.script_text(ANSWER)
        tg.push_message(9, "talk to me", user_id=9)
        [sent] = await tg.wait_sent(1)
        drafts = list(tg.drafts)
    assert sent["text"] == ANSWER  # the same text a plain send gives
    assert len(drafts) >= 2 and all(d.chat_id == 9 for d in drafts)
    assert len({d.draft_id for d in drafts}) == 1
    assert all(b.t - a.t >= 0.95 for a, b in pairwise(drafts))
    assert json.dumps(drafts[0].text) != json.dumps(ANSWER)  # shown before it was whole


async def test_a_discord_preview_deleted_mid_answer_gives_way_to_the_whole_answer(
    tmp_path: Path,
) -> None:
    async with discord_bot(tmp_path) as (dc, model, runtime):
        model.configure(stream_chunk_chars=40, stream_delay_s=0.1)
        model.script_text(ANSWER)
        asked = dc.push_message(CHANNEL, f"<@{dc.bot_id}> talk", author_id=12, guild_id=GUILD,
                                mention_bot=True)  # fmt: skip
        [preview] = await dc.wait_sent(1)
        dc.delete_message(CHANNEL, preview.message_id)  # a moderator
        [_, final] = await dc.wait_sent(2, timeout=15)
        await runtime.sessions.wait(5)
    assert dc.message_text(final.message_id) == ANSWER
    assert final.reply_to == asked  # it answers the question, as the preview did
    assert len(dc.sent) == 2


@pytest.mark.parametrize("cancel", ["forget", "shutdown"])
async def test_a_turn_cancelled_mid_stream_takes_its_preview_away(
    tmp_path: Path, cancel: str
) -> None:
    async with discord_bot(tmp_path) as (dc, model, runtime):
        model.configure(stream_chunk_chars=20, stream_delay_s=0.2)
        model.script_text(ANSWER)
        dc.push_message(900, "talk to me", author_id=ADMIN)
        [preview] = await dc.wait_sent(1)
        if cancel == "forget":
            dc.push_message(900, "!forget confirm", author_id=ADMIN)
            await dc.wait_sent(2)
        else:  # what the daemon does with turns still running at its deadline
            await runtime.sessions.cancel()
        await dc.wait_for(lambda f: preview.message_id in {d.message_id for d in f.deleted},
                          what="the preview deleted")  # fmt: skip
        cancelled = time.monotonic()
        await asyncio.sleep(1.5)  # more than a pace: a preview left running would show
        edits = list(dc.edits)
    assert [e for e in edits if e.at > cancelled] == []
    with pytest.raises(ValueError, match="was deleted"):
        dc.message_text(preview.message_id)
