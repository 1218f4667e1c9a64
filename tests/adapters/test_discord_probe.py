"""The message content intent probe (`soulbot check --online`) against the fake's
`GET /applications/@me`, and the gateway that agrees with it."""

from __future__ import annotations

import discord
import pytest

from adapters.discord_adapter import DiscordAdapter
from adapters.discord_probe import (
    GATEWAY_MESSAGE_CONTENT,
    GATEWAY_MESSAGE_CONTENT_LIMITED,
    message_content_intent,
)
from bot.types import AdapterStartError
from tests.fakes.discord_fake import FakeDiscord
from tests.kit import Inbox

TOKEN = "TEST.DISCORD.TOKEN"
OTHER_FLAGS = 1 << 23  # APPLICATION_COMMAND_BADGE: says nothing of message content

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (GATEWAY_MESSAGE_CONTENT_LIMITED, True),  # unverified, the portal switch on
        (GATEWAY_MESSAGE_CONTENT | OTHER_FLAGS, True),  # verified and approved
        (OTHER_FLAGS, False),
        (0, False),
    ],
)
async def test_the_applications_flags_say_whether_the_intent_is_on(
    flags: int, expected: bool
) -> None:
    async with FakeDiscord(token=TOKEN, application_flags=flags) as fake:
        assert await message_content_intent(TOKEN, fake.api_base_url + "/") is expected
        [asked] = fake.requests
    assert (asked.method, asked.path) == ("GET", "/applications/@me")


async def test_a_refused_token_or_a_failing_discord_is_none() -> None:
    async with FakeDiscord(token=TOKEN) as fake:
        assert await message_content_intent("WRONG.TOKEN", fake.api_base_url) is None
        fake.fail_next("GET", r"^/applications/@me$", 503)
        assert await message_content_intent(TOKEN, fake.api_base_url) is None
        fake.drop_next("GET", r"^/applications/@me$", times=2)  # aiohttp asks a GET twice
        assert await message_content_intent(TOKEN, fake.api_base_url) is None
        assert await message_content_intent(TOKEN, fake.api_base_url) is True
        stopped = fake.api_base_url
    assert await message_content_intent(TOKEN, stopped) is None  # nothing listens there
    assert await message_content_intent(TOKEN, "not a url") is None


async def test_with_the_intent_off_the_gateway_refuses_the_start_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    gateway = discord.gateway.DiscordWebSocket
    monkeypatch.setattr(gateway, "DEFAULT_GATEWAY", gateway.DEFAULT_GATEWAY)
    async with FakeDiscord(token=TOKEN, application_flags=0) as fake:
        assert await message_content_intent(TOKEN, fake.api_base_url) is False
        adapter = DiscordAdapter(TOKEN, api_base_url=fake.api_base_url,
                                 gateway_url=fake.gateway_url)  # fmt: skip
        with pytest.raises(AdapterStartError, match="the message content intent is off"):
            await adapter.start(Inbox().deliver)
        await adapter.close()
    assert not adapter.connected()
