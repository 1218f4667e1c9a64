"""The last exchange of a history (bot/chat/takeback.py), and `/retry` where the
platform cannot edit (the runtime sends the new answer anew)."""

from __future__ import annotations

from pathlib import Path

from bot import prompts
from bot.chat.history import Entry
from bot.chat.sessions import senders
from bot.chat.takeback import last_exchange
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import make_config, running


def user(i: int, ts: float = 0.0) -> Entry:
    return Entry(i, "user", f"u{i}", 1, None, ts)


def reply(i: int, to: int, delivered: bool = True) -> Entry:
    return Entry(i, "assistant", f"a{i}", 1, to, 0.0, delivered)


def test_the_last_exchange_is_the_newest_reply_with_what_it_answered() -> None:
    history = [user(1), reply(2, 1), user(3, 5.0), user(4, 6.0), reply(5, 4)]
    found = last_exchange(history)
    assert found is not None
    assert (found.reply.id, [e.id for e in found.asked], found.followed) == (5, [3, 4], False)
    assert found.since == 5.0 and found.ids() == [3, 4, 5]
    said = [(r.speaker, r.text, r.at) for r in found.said()]
    assert said == [("user", "u3", 5.0), ("user", "u4", 6.0), ("assistant", "a5", 0.0)]
    followed = last_exchange([*history, user(6)])
    assert followed is not None and followed.followed and followed.reply.id == 5


def unasked(i: int) -> Entry:
    """A row the soul wrote unasked (a reminder: `Session.keep_unprompted`)."""
    return Entry(i, "assistant", f"reminder{i}", 1, None, 0.0, True)


def test_a_reminder_is_no_exchange_nor_the_end_of_one() -> None:
    after = last_exchange([user(1), reply(2, 1), unasked(3)])
    assert after is not None and (after.reply.id, after.ids()) == (2, [1, 2])
    between = last_exchange([user(1), reply(2, 1), unasked(3), user(4), reply(5, 4)])
    assert between is not None and between.ids() == [4, 5]  # the older message stays out
    assert last_exchange([user(1), unasked(2)]) is None


def test_no_exchange_without_a_reply_delivered_or_what_it_answered() -> None:
    assert last_exchange([]) is None
    assert last_exchange([user(1)]) is None
    assert last_exchange([user(1), reply(2, 1, delivered=False)]) is None
    assert last_exchange([reply(2, 1)]) is None  # its message was compacted
    assert last_exchange([user(1), Entry(-1, "assistant", "a", 1, 1)]) is None  # not stored


async def test_a_retry_where_the_platform_cannot_edit_sends_the_answer_anew(
    tmp_path: Path,
) -> None:
    async with FakeAnthropic() as model:
        config = make_config(tmp_path, model.url)
        async with running(config) as (_, platform):
            model.script_text("Old answer.")
            await platform.say("hello", message_id="m1")
            await platform.replies(1)
            model.script_text("New answer.")
            await platform.say("/retry", message_id="m2")
            sent = await platform.replies(3)
    assert [m.text for m in sent] == ["Old answer.", "New answer.", prompts.RETRY_DONE]
    assert sent[1].reply_to == "m1"  # the new answer replies to the question, as the old did


def test_each_message_is_its_senders_and_else_the_answered_persons() -> None:
    """As the session saw them answered; one stored before a restart (not seen
    answered) counts as the answered person's; with no one known, left out."""
    before, bob, cy = (Entry(i, "user", f"m{i}", i) for i in (1, 2, 3))
    answered = {2: "6", 3: "7"}
    assert senders([before, bob, cy], answered, "7") == {1: "7", 2: "6", 3: "7"}
    assert senders([before, bob, cy], answered, None) == {2: "6", 3: "7"}
    assert senders([before], {}, None) == {}
