"""`replace_reply` and `delete_messages` (adapters/stream.py) against an
in-memory chat: a unit test of the one unit, the platforms' own behaviour being
in tests/adapters/test_takeback.py."""

from __future__ import annotations

from adapters import texts
from adapters.stream import MessageGone, delete_messages, replace_reply
from bot.types import Outbound
from tests.kit import capture_logs


class Chat:
    """An `Editable`: messages by id; `refuse_edits` ids fail to edit (not gone),
    `keep` ids cannot be deleted, `gone` ids were deleted by someone else."""

    def __init__(self, *texts_: str) -> None:
        self.messages = {str(i): t for i, t in enumerate(texts_, 1)}
        self.next = len(texts_) + 1
        self.refuse_edits: set[str] = set()
        self.keep: set[str] = set()

    async def post(self, text: str, first: bool) -> str:
        message_id, self.next = str(self.next), self.next + 1
        self.messages[message_id] = text
        return message_id

    async def edit(self, message_id: str, text: str) -> None:
        if message_id not in self.messages:
            raise MessageGone(message_id)
        if message_id in self.refuse_edits:
            raise RuntimeError("too old to edit")
        self.messages[message_id] = text

    async def delete(self, message_id: str) -> None:
        if message_id in self.keep:
            raise RuntimeError("too old to delete")
        self.messages.pop(message_id, None)


LIMIT = 16  # the smallest a split takes


def reply(*parts: str) -> Outbound:
    """A reply of one message per part (each part longer than half the limit)."""
    return Outbound("test", "1", "\n\n".join(part * 12 for part in parts))


async def test_the_parts_are_edited_and_the_rest_deleted_or_posted() -> None:
    chat = Chat("a1", "a2", "a3")
    ids = await replace_reply(chat, ["1", "2", "3"], reply("b", "c"), limit=LIMIT)
    assert ids == ["1", "2"] and chat.messages == {"1": "b" * 12, "2": "c" * 12}
    ids = await replace_reply(chat, ids, reply("d", "e", "f"), limit=LIMIT)
    assert ids == ["1", "2", "4"]
    assert list(chat.messages.values()) == ["d" * 12, "e" * 12, "f" * 12]


async def test_a_part_someone_deleted_is_posted_again_in_order() -> None:
    chat = Chat("a1", "a2")
    del chat.messages["1"]
    ids = await replace_reply(chat, ["1", "2"], reply("b", "c"), limit=LIMIT)
    assert [chat.messages[i] for i in ids] == ["b" * 12, "c" * 12] and "2" not in chat.messages


async def test_an_edit_refused_deletes_the_old_parts_and_sends_anew() -> None:
    chat = Chat("a1", "a2")
    chat.refuse_edits = {"2"}
    with capture_logs() as logs:
        ids = await replace_reply(chat, ["1", "2"], reply("b", "c"), limit=LIMIT)
    assert ids == ["3", "4"] and chat.messages == {"3": "b" * 12, "4": "c" * 12}
    assert [e["event"] for e in logs] == ["adapter.replace_failed"]


async def test_a_message_kept_says_it_was_taken_back_or_stays_logged() -> None:
    chat = Chat("a1", "a2", "a3")
    chat.keep = {"2", "3"}
    chat.refuse_edits = {"3"}
    with capture_logs() as logs:
        assert await delete_messages(chat, ["1", "2", "3"]) == 1
    assert chat.messages == {"2": texts.TAKEN_BACK, "3": "a3"}
    [failed] = [e for e in logs if e["event"] == "adapter.retract_failed"]
    assert failed["message_id"] == "3" and "a3" not in str(failed)
