"""Which `chat:` scopes are groups' (bot/chat/chat_places.py): noted once per
process, private for good once private, and unknown ones never counted as groups."""

from __future__ import annotations

from bot.chat.chat_places import ChatPlaces
from bot.storage.db import Database


async def test_a_group_is_listed_and_a_private_thread_is_not(db: Database) -> None:
    places = ChatPlaces(db)
    await places.note("chat:discord:10", private=False)
    await places.note("chat:discord:11", private=True)
    await places.note("user:telegram:5", private=False)  # not a chat scope: not noted
    assert await places.groups() == {"chat:discord:10"}


async def test_once_private_a_scope_stays_private(db: Database) -> None:
    await ChatPlaces(db).note("chat:discord:11", private=True)
    await ChatPlaces(db).note("chat:discord:11", private=False)  # another process
    one = ChatPlaces(db)
    await one.note("chat:discord:12", private=False)
    await ChatPlaces(db).note("chat:discord:12", private=True)
    await one.note("chat:discord:12", private=False)  # noted already: not asked again
    assert await ChatPlaces(db).groups() == set()
