"""Reminders through the real adapters against the fakes, with a clock the
test moves: one asked in a Telegram DM and one in a Discord channel fire once,
at their minute in the person's zone, into the chat they were asked in."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from adapters.telegram_adapter import TelegramAdapter
from bot import prompts
from bot.chat.commands import MENU
from tests.adapters.test_discord import BOT, CHANNEL, GUILD, adapter_for
from tests.adapters.test_telegram import FAST
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.discord_fake import FakeDiscord
from tests.fakes.telegram_fake import FakeTelegram
from tests.kit import make_config, serving

START = datetime(2026, 12, 7, 20, 0, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now

    def at(self, iso: str) -> None:
        self.now = datetime.fromisoformat(iso).timestamp()


async def test_a_telegram_dm_reminder_fires_once_at_its_minute_in_tokyo(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeTelegram() as tg, FakeAnthropic() as model:
        config = make_config(tmp_path, model.url, "adapters: {telegram: {dm_policy: open}}\n")
        adapter = TelegramAdapter(tg.token, tg.base_url, MENU, poll_timeout_s=1, backoff=FAST)
        async with serving(config, [adapter], clock) as runtime:
            assert runtime.reminders is not None
            model.script_tool_use("set_timezone", {"zone": "Asia/Tokyo"})
            model.script_text("Tokyo, noted.")
            tg.push_message(5, "I'm in Tokyo", user_id=5)
            await tg.wait_sent(1)
            model.script_tool_use("set_reminder", {"when": "2026-12-08T09:00", "text": "dentist"})
            model.script_text("I'll remind you at 09:00 Tokyo time.")
            tg.push_message(5, "remind me tomorrow at 9 about the dentist", user_id=5)
            await tg.wait_sent(2)
            await runtime.sessions.wait(5)
            clock.at("2026-12-07T23:59:00+00:00")  # 08:59 in Tokyo
            early = await runtime.reminders.tick()
            clock.at("2026-12-08T00:00:05+00:00")
            model.script_text("Good morning! The dentist is today.")
            fired = await runtime.reminders.tick()
            [*_, reminder] = await tg.wait_sent(3)
            again = await runtime.reminders.tick()
    assert (early, fired, again) == (0, 1, 0)
    assert str(reminder["chat_id"]) == "5"
    assert reminder["text"] == "Good morning! The dentist is today."
    assert len(tg.sent) == 3


async def test_a_discord_channel_reminder_fires_once_in_the_channel(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeDiscord() as dc, FakeAnthropic() as model:
        dc.add_guild(GUILD, channels=[CHANNEL], members=[(11, "ann")])
        config = make_config(tmp_path, model.url)
        async with serving(config, [adapter_for(dc, streaming=False)], clock) as runtime:
            assert runtime.reminders is not None
            model.script_tool_use("set_reminder", {"when": "2026-12-07T21:30", "text": "standup"})
            model.script_text("Set for 21:30 UTC; tell me your zone if that's wrong.")
            dc.push_message(CHANNEL, f"<@{BOT}> remind us of the standup at 21:30", author_id=11,
                            author_name="ann", guild_id=GUILD, mention_bot=True)  # fmt: skip
            await dc.wait_sent(1)
            await runtime.sessions.wait(5)
            clock.at("2026-12-07T21:29:30+00:00")
            early = await runtime.reminders.tick()
            clock.at("2026-12-07T21:30:00+00:00")
            model.script_text("Standup time, everyone!")
            fired = await runtime.reminders.tick()
            [*_, reminder] = await dc.wait_sent(2)
            again = await runtime.reminders.tick()
    assert (early, fired, again) == (0, 1, 0)
    assert reminder.channel_id == CHANNEL and reminder.content == "Standup time, everyone!"
    assert len(dc.sent) == 2


async def test_the_slash_commands_set_the_zone_and_cancel_a_reminder(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeDiscord() as dc, FakeAnthropic() as model:
        dc.add_guild(GUILD, channels=[CHANNEL], members=[(11, "ann")])
        config = make_config(tmp_path, model.url, "adapters: {discord: {dm_policy: open}}\n")
        async with serving(config, [adapter_for(dc, streaming=False)], clock) as runtime:
            assert runtime.reminders is not None

            def followups(token: str) -> list[str]:
                return [r.content or "" for r in dc.interaction_replies
                        if r.kind == "followup" and r.token == token]  # fmt: skip

            async def slash(name: str, options: list[dict[str, object]]) -> str:
                token = dc.push_interaction(name, options, user_id=11, channel_id=900)
                await dc.wait_for(lambda f: followups(token), what=f"/{name}'s answer")
                return followups(token)[0]

            zone = await slash("timezone", [{"type": 3, "name": "zone", "value": "Europe/Paris"}])
            model.script_tool_use("set_reminder", {"when": "2026-12-07T22:00", "text": "bins"})
            model.script_text("Done.")
            dc.push_message(900, "remind me of the bins at 22:00", author_id=11)
            await dc.wait_sent(1)
            await runtime.sessions.wait(5)
            listed = await slash("reminders", [])
            cancelled = await slash("reminders", [{"type": 4, "name": "cancel", "value": 1}])
            clock.at("2026-12-07T21:00:00+00:00")
            fired = await runtime.reminders.tick()
    assert zone == prompts.TIMEZONE_SET.format(zone="Europe/Paris")
    assert "1. 2026-12-07 22:00 (Europe/Paris): bins" in listed.splitlines()
    assert cancelled == prompts.REMINDER_CANCELLED.format(number=1, text="bins")
    assert fired == 0 and len(dc.sent) == 1


async def test_a_telegram_reminder_set_before_a_restart_fires_after_it(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeTelegram() as tg, FakeAnthropic() as model:
        config = make_config(tmp_path, model.url, "adapters: {telegram: {dm_policy: open}}\n")

        def adapter() -> TelegramAdapter:
            return TelegramAdapter(tg.token, tg.base_url, MENU, poll_timeout_s=1, backoff=FAST)

        async with serving(config, [adapter()], clock) as runtime:
            model.script_tool_use("set_reminder", {"when": "PT1H", "text": "the laundry"})
            model.script_text("In an hour, 21:00 UTC.")
            tg.push_message(5, "remind me of the laundry in an hour", user_id=5)
            await tg.wait_sent(1)
            await runtime.sessions.wait(5)
        clock.now += 3600
        async with serving(config, [adapter()], clock) as runtime:
            assert runtime.reminders is not None
            model.script_text("The laundry is done.")
            fired = await runtime.reminders.tick()
            [*_, reminder] = await tg.wait_sent(2)
    assert fired == 1 and str(reminder["chat_id"]) == "5"
    assert reminder["text"] == "The laundry is done." and len(tg.sent) == 2
