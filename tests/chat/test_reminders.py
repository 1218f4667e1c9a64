"""Reminders through the runtime and the fake model, with a clock the tests
move (no real waiting): `set_reminder` in the person's zone (`set_timezone`,
UTC until known), delivered once at its minute into the conversation it was
asked in, in the persona's voice (or its stored text when the model is down),
across a restart, late with a note or dropped past the grace period, listed
and cancelled, held to the limits, erased by `/forget`; a group's reminder is
written from the group's lines alone, never a DM's."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from bot import prompts
from bot.app.runtime import Runtime
from bot.chat.reminder_delivery import MAX_TRIES
from bot.chat.reminders import zone_named
from bot.config.schema import Config
from bot.types import Outbound
from tests.chat.test_member_memory import ANN, BINDINGS, BOB, ask, at
from tests.engines import postgres_schema
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import RecordingPlatform, capture_logs, make_config, running, user_texts

OPEN = "admins: {telegram: [1]}\nadapters: {telegram: {dm_policy: open}}\n"
START = datetime(2026, 12, 7, 20, 0, tzinfo=UTC).timestamp()
GROUP = "-1001"


class Clock:
    """The runtime's time, moved by the test."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def at(self, iso: str) -> None:
        self.now = datetime.fromisoformat(iso).timestamp()


def tool_result(requests: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The answer of the tool `name` in the requests of one turn."""
    uses = {b["id"]: b["name"] for r in requests for m in r["messages"] for b in m["content"]
            if b.get("type") == "tool_use"}  # fmt: skip
    blocks = [b for r in requests for m in r["messages"] for b in m["content"]]
    results = [b for b in blocks if b.get("type") == "tool_result"]
    results = [b for b in results if uses.get(b["tool_use_id"]) == name]
    content = results[-1]["content"]
    text = content if isinstance(content, str) else content[0]["text"]
    return dict(json.loads(text))


@dataclass
class Chat:
    runtime: Runtime
    platform: RecordingPlatform
    fake: FakeAnthropic

    async def ask(self, text: str, user: str = "1", group: bool = False) -> list[dict[str, Any]]:
        before, sent = len(self.fake.requests), len(self.platform.sent)
        chat = GROUP if group else None
        await self.platform.say(text, user=user, chat=chat, dm=not group, mention=group)
        await self.platform.replies(sent + 1)
        assert await self.runtime.sessions.wait(5) == 0
        return self.fake.requests[before:]

    async def command(self, text: str, user: str = "1") -> str:
        sent = len(self.platform.sent)
        await self.platform.say(text, user=user)
        return (await self.platform.replies(sent + 1))[-1].text

    async def tick(self) -> int:
        assert self.runtime.reminders is not None
        return await self.runtime.reminders.tick()

    async def remind(
        self, when: str, text: str, user: str = "1", group: bool = False
    ) -> dict[str, Any]:
        self.fake.script_tool_use("set_reminder", {"when": when, "text": text})
        self.fake.script_text("I will.")
        return tool_result(await self.ask(f"remind me: {text}", user, group), "set_reminder")

    async def sources(self) -> list[str]:
        rows = await self.runtime.db.run(
            lambda c: c.execute("SELECT source FROM usage ORDER BY id").fetchall()
        )
        return [str(r[0]) for r in rows]


def config_for(tmp_path: Path, url: str, extra: str = "") -> Config:
    return make_config(tmp_path, url, OPEN + extra)


@asynccontextmanager
async def chat(config: Config, fake: FakeAnthropic, clock: Clock) -> AsyncIterator[Chat]:
    async with running(config, "telegram", clock) as (runtime, platform):
        yield Chat(runtime, platform, fake)


async def test_a_reminder_fires_once_at_its_minute_in_the_persons_zone(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake, clock) as c:
        fake.script_tool_use("set_timezone", {"zone": "America/New_York"})
        fake.script_text("Noted.")
        zone = tool_result(await c.ask("I live in New York"), "set_timezone")
        answer = await c.remind("2026-12-08T09:00", "call my sister")
        tools = [t["name"] for t in fake.requests[-1]["tools"]]
        clock.at("2026-12-08T13:59:00+00:00")  # 08:59 in New York
        early = await c.tick()
        clock.at("2026-12-08T14:00:10+00:00")
        fake.script_text("Ann, it's time to call your sister.")
        sent_before = len(c.platform.sent)
        fired = await c.tick()
        delivered = c.platform.sent[sent_before:]
        request = fake.requests[-1]
        again = await c.tick()
        listed = await c.command("/reminders")
        sources = await c.sources()
    assert zone["zone"] == "America/New_York"
    assert answer == {"set": True, "at": "2026-12-08 09:00 (America/New_York)",
                      "now": "2026-12-07 15:00 (America/New_York)",
                      "zone": "America/New_York", "zone_known": True}  # fmt: skip
    assert {"set_reminder", "set_timezone"} <= set(tools)
    assert (early, fired, again) == (0, 1, 0)
    [message] = delivered
    assert (message.platform, message.chat_id, message.text) == (
        "telegram", "1", "Ann, it's time to call your sister.")  # fmt: skip
    note = request["messages"][-1]["content"][-1]["text"]
    assert "'call my sister'" in note and "2026-12-08 09:00 (America/New_York)" in note
    assert sources[-1] == "reminder"
    assert listed.startswith(prompts.REMINDERS_NONE)


def test_a_zone_is_an_iana_name_of_a_place() -> None:
    good = ["Europe/Lisbon", "US/Pacific", "Etc/GMT+5", "UTC", " Asia/Tokyo "]
    bad = ["localtime", "posixrules", "Factory", "right/UTC", "posix/Europe/Lisbon",
           "europe/lisbon", "../etc/passwd", "/usr/share/zoneinfo/UTC", ""]  # fmt: skip
    assert [(z := zone_named(n)) and z.key for n in good] == [n.strip() for n in good]
    assert [zone_named(n) for n in bad] == [None] * len(bad)


async def test_once_the_zone_is_known_the_turns_clock_gives_their_time(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake, clock) as c:
        fake.script_text("Hello.")
        before = user_texts((await c.ask("hello"))[-1])
        fake.script_tool_use("set_timezone", {"zone": "Asia/Tokyo"})
        fake.script_text("Noted.")
        await c.ask("I live in Tokyo")
        fake.script_text("You are up early.")
        after = user_texts((await c.ask("good morning"))[-1])
        fake.script_text("Hi, Bob.")
        other = user_texts((await c.ask("hi", user="2"))[-1])
    utc_only = re.compile(re.escape(prompts.NOW_LINE).replace(r"\{now\}", "(.+)"))
    assert any(utc_only.fullmatch(t) for t in before)
    assert any(utc_only.fullmatch(t) for t in other)  # another person's DM: UTC alone
    [line] = [t for t in after if t.startswith("(Now:")]
    stamp = datetime.strptime(line[6:22], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    tokyo = stamp.astimezone(ZoneInfo("Asia/Tokyo")).strftime("%a %H:%M")
    assert line == prompts.NOW_LINE_LOCAL.format(now=line[6:22], local=tokyo, zone="Asia/Tokyo")


async def test_utc_is_assumed_until_the_zone_is_known(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake, clock) as c:
        answer = await c.remind("PT2H", "stretch")
        shown = await c.command("/timezone")
        set_reply = await c.command("/timezone Asia/Tokyo")
        bad = await c.command("/timezone Mars/Olympus")
        listed = await c.command("/reminders")
    assert answer == {"set": True, "at": "2026-12-07 22:00 (UTC)", "now": "2026-12-07 20:00 (UTC)",
                      "zone": "UTC", "zone_known": False}  # fmt: skip
    assert shown == prompts.TIMEZONE_UNKNOWN
    assert set_reply == prompts.TIMEZONE_SET.format(zone="Asia/Tokyo")
    assert bad == prompts.TIMEZONE_BAD.format(zone="Mars/Olympus")
    assert "1. 2026-12-08 07:00 (Asia/Tokyo): stretch" in listed.splitlines()


async def test_a_reminder_survives_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeAnthropic() as fake:
        config = config_for(tmp_path, fake.url)
        async with chat(config, fake, clock) as c:
            await c.remind("PT30M", "take the bread out")
        clock.now += 30 * 60
        async with chat(config, fake, clock) as c:
            fake.script_text("The bread!")
            fired = await c.tick()
            sent = [m.text for m in c.platform.sent]
            fake.script_text("You're welcome.")
            after = await c.ask("thanks")
    assert fired == 1 and sent == ["The bread!"]
    # The next turn reads the reminder in its history.
    texts = [b["text"] for m in after[-1]["messages"] for b in m["content"] if "text" in b]
    assert "The bread!" in texts


async def test_one_due_while_down_comes_late_with_a_note_or_is_dropped_past_grace(
    tmp_path: Path,
) -> None:
    clock = Clock()
    async with FakeAnthropic() as fake:
        config = config_for(tmp_path, fake.url, "reminders: {grace_s: 10800}\n")
        async with chat(config, fake, clock) as c:
            await c.remind("PT10M", "water the plants")
            await c.remind("PT5H", "feed the cat")
            clock.now += 10 * 60 + 2 * 3600 + 60  # the first is 2 hours late
            fake.script_error(529, "overloaded_error")  # and the model is down: its text
            sent = len(c.platform.sent)
            first = await c.tick()
            late = c.platform.sent[sent:]
            clock.now = START + 5 * 3600 + 3 * 3600 + 60  # the second is past the grace now
            with capture_logs() as logs:
                second = await c.tick()
            left = await c.command("/reminders")
    assert first == 1 and [m.text for m in late] == [
        prompts.REMINDER_FALLBACK_LATE.format(delay="2 hours", text="water the plants")
    ]
    assert second == 0
    assert [e["event"] for e in logs if e["event"].startswith("reminders.")] == [
        "reminders.dropped"
    ]
    assert left.startswith(prompts.REMINDERS_NONE)


async def test_with_no_grace_one_on_time_comes_and_a_late_one_is_dropped(
    tmp_path: Path,
) -> None:
    clock = Clock()
    async with FakeAnthropic() as fake:
        config = config_for(tmp_path, fake.url, "reminders: {grace_s: 0}\n")
        async with chat(config, fake, clock) as c:
            await c.remind("PT1M", "the kettle")
            await c.remind("PT2M", "the oven")
            clock.now += 60 + 25  # the poll after the kettle's minute
            fake.script_text("Kettle!")
            on_time = await c.tick()
            clock.now += 60 + 181  # the oven is more than 3 minutes late
            with capture_logs() as logs:
                late = await c.tick()
    assert (on_time, late) == (1, 0)
    assert [e["event"] for e in logs if e["event"].startswith("reminders.")] == [
        "reminders.dropped"
    ]


async def test_a_store_error_after_the_send_finishes_it_later_without_sending_again(
    tmp_path: Path,
) -> None:
    clock = Clock()
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake, clock) as c:
        await c.remind("PT1M", "the kettle")
        clock.now += 60
        assert c.runtime.reminders is not None
        store = c.runtime.reminders._store
        real, failures = store.done, [RuntimeError("database is locked")]

        async def flaky(reminder_id: int, holder: str) -> None:
            if failures:
                raise failures.pop()
            await real(reminder_id, holder)

        store.done = flaky  # type: ignore[method-assign]
        sent = len(c.platform.sent)
        fake.script_text("Kettle!")
        with capture_logs() as logs:
            first = await c.tick()
            clock.now += 301  # sessions.lease_s: the claim expired
            second = await c.tick()
        delivered = [m.text for m in c.platform.sent[sent:]]
        left = await c.command("/reminders")
        sources = await c.sources()
    assert (first, second, delivered) == (0, 0, ["Kettle!"])
    assert [e["event"] for e in logs if e["event"].startswith("reminders.")] == [
        "reminders.failed",
        "reminders.finished",
    ]
    assert left.startswith(prompts.REMINDERS_NONE) and sources.count("reminder") == 1


async def test_a_send_that_keeps_failing_is_written_once_and_given_up(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake, clock) as c:
        await c.remind("PT1M", "the kettle")
        clock.now += 60
        texts: list[str] = []

        async def refuse(message: Outbound) -> list[str]:  # Telegram's 403: the bot was blocked
            texts.append(message.text)
            raise RuntimeError("Forbidden: bot was blocked by the user")

        c.platform.send = refuse  # type: ignore[method-assign]
        fake.script_text("Kettle!")
        with capture_logs() as logs:
            for _ in range(MAX_TRIES + 2):
                await c.tick()
                clock.now += 301  # sessions.lease_s: the claim expired
        sources = await c.sources()
        left = await c.runtime.db.run(
            lambda conn: conn.execute("SELECT COUNT(*) FROM reminders").fetchone()[0]
        )
    events = [e["event"] for e in logs if e["event"].startswith("reminders.")]
    assert sources.count("reminder") == 1 and texts == ["Kettle!"] * MAX_TRIES
    assert events == ["reminders.failed"] * MAX_TRIES + ["reminders.undeliverable"]
    assert left == 0


async def test_cancel_and_limits(tmp_path: Path) -> None:
    clock = Clock()
    extra = "reminders: {max_pending: 2, max_days_ahead: 30}\n"
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url, extra), fake,
                                             clock) as c:  # fmt: skip
        await c.remind("PT1H", "one")
        await c.remind("PT2H", "two")
        third = await c.remind("PT3H", "three")
        far = await c.remind("P31D", "far")
        past = await c.remind("2026-12-01T10:00", "past")
        unreadable = await c.remind("next blue moon", "moon")
        superscript = await c.command("/reminders cancel ¹")
        cancelled = await c.command("/reminders cancel 1")
        missing = await c.command("/reminders cancel 5")
        listed = await c.command("/reminders")
        clock.now += 3 * 3600
        fake.script_text("Two!")
        fired = await c.tick()
    codes = [r["details"]["code"] for r in (third, far, past, unreadable)]
    assert codes == ["TOO_MANY", "TOO_FAR", "WHEN_PAST", "WHEN_UNREADABLE"]
    assert superscript == prompts.REMINDERS_USAGE
    assert cancelled == prompts.REMINDER_CANCELLED.format(number=1, text="one")
    assert missing == prompts.REMINDER_NOT_FOUND.format(number=5)
    assert "1. 2026-12-07 22:00 (UTC): two" in listed.splitlines()
    assert "On this store: 1 reminders waiting, set by 1 people." in listed  # user 1 is an admin
    assert fired == 1 and c.platform.sent[-1].text == "Two!"


async def test_a_group_reminder_goes_to_the_group_without_dm_text(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake, clock) as c:
        fake.script_text("I'm sorry to hear it.")
        await c.ask("my private diagnosis is XYZZY-77")
        await c.remind("PT15M", "bring the projector", group=True)
        in_group = await c.command("/reminders")  # a DM lists it (theirs), a group only its own
        clock.now += 15 * 60
        fake.script_text("Projector time!")
        sent = len(c.platform.sent)
        await c.tick()
        delivered = c.platform.sent[sent:]
        request = fake.requests[-1]
    [message] = delivered
    assert (message.chat_id, message.text) == (GROUP, "Projector time!")
    assert "XYZZY" not in json.dumps(request)
    assert "bring the projector" in json.dumps(request)
    assert "bring the projector" in in_group


async def test_forget_erases_a_persons_reminders(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake, clock) as c:
        await c.remind("PT5M", "mine")
        await c.remind("PT5M", "in the group", group=True)
        await c.remind("PT5M", "hers", user="2")
        await c.command("/timezone Europe/Lisbon")
        await c.command("/forget confirm")
        zone = await c.command("/timezone")
        clock.now += 600
        fake.script_text("Hers!")
        fired = await c.tick()
    assert zone == prompts.TIMEZONE_UNKNOWN
    assert fired == 1 and c.platform.sent[-1].chat_id == "2"


async def test_a_group_turn_answering_several_people_sets_no_reminder(tmp_path: Path) -> None:
    """Ann and Bob batched into one turn: the tool cannot tell who asked."""
    clock = Clock()
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake, clock) as c:
        gate = fake.script_gate()
        await c.platform.say("hello there", user="3", chat=GROUP, dm=False, mention=True)
        await gate.reached.wait()
        await c.platform.say("remind me in an hour to call my mum", user="1", chat=GROUP,
                             dm=False, mention=True)  # fmt: skip
        await c.platform.say("lol", user="2", name="Bob", chat=GROUP, dm=False, mention=True)
        await c.runtime.router.wait(5)
        before = len(fake.requests)
        fake.script_tool_use("set_reminder", {"when": "PT1H", "text": "call your mum"})
        fake.script_tool_use("set_timezone", {"zone": "Europe/Lisbon"})
        fake.script_text("Who wants it? Say it again on its own.")
        gate.open()
        await c.platform.replies(2)
        assert await c.runtime.sessions.wait(5) == 0
        requests = fake.requests[before:]
        rows = await c.runtime.db.run(
            lambda conn: conn.execute("SELECT COUNT(*) FROM reminders").fetchone()[0]
        )
        zone = await c.command("/timezone", user="2")
    assert tool_result(requests, "set_reminder")["details"]["code"] == "WHO_UNKNOWN"
    assert tool_result(requests, "set_timezone")["details"]["code"] == "WHO_UNKNOWN"
    assert rows == 0 and zone == prompts.TIMEZONE_UNKNOWN


def shared(tmp_path: Path, url: str, store: str, instance: str, adapter: str) -> Config:
    """A process of a shared store: its instance, and the platform it serves (a token)."""
    serves = "dm_policy: open" + (f", token: T.{instance}" if adapter == "telegram" else "")
    token = f"adapters: {{telegram: {{{serves}}}"
    token += f", discord: {{token: T.{instance}}}}}\n" if adapter == "discord" else "}\n"
    extra = f"store: {{url: {json.dumps(store)}}}\ninstance: {instance}\n"
    return make_config(tmp_path, url, "admins: {telegram: [1]}\n" + token + extra)


async def test_two_processes_on_postgresql_deliver_it_once(tmp_path: Path) -> None:
    """Both judge they own the conversation (neither registered): the claim
    lets one deliver."""
    clock = Clock()
    with postgres_schema() as store:
        async with FakeAnthropic() as fake:
            one = shared(tmp_path, fake.url, store, "one", "telegram")
            two = shared(tmp_path, fake.url, store, "two", "telegram")
            async with chat(one, fake, clock) as a, chat(two, fake, clock) as b:
                await a.remind("PT1M", "the kettle")
                clock.now += 60
                sent = len(a.platform.sent)
                fired = await asyncio.gather(*(c.tick() for c in (a, b, a, b)))
                again = await asyncio.gather(a.tick(), b.tick())
                delivered = a.platform.sent[sent:] + b.platform.sent
    assert sorted(fired) == [0, 0, 0, 1] and again == [0, 0]
    assert len(delivered) == 1


async def test_on_a_shared_store_the_owner_of_the_conversation_delivers_it(
    tmp_path: Path,
) -> None:
    """Registered, the Discord process leaves a Telegram reminder to the
    Telegram one, and drops one past the grace period all the same."""
    clock = Clock()
    with postgres_schema() as store:
        async with FakeAnthropic() as fake:
            one = shared(tmp_path, fake.url, store, "one", "telegram")
            two = shared(tmp_path, fake.url, store, "two", "discord")
            async with chat(one, fake, clock) as a, chat(two, fake, clock) as b:
                await a.runtime.cluster.join()
                await b.runtime.cluster.join()
                await a.remind("PT1M", "the kettle")
                clock.now += 60
                not_b = await b.tick()
                fake.script_text("Kettle!")
                by_a = await a.tick()
                kettle = a.platform.sent[-1].text
                await a.remind("PT1M", "the oven")
                clock.now += 60 + 21600 + 60  # past the grace: the process that reads it drops it
                with capture_logs() as logs:
                    dropped = await b.tick()
                left = await a.command("/reminders")
                await a.runtime.cluster.leave()
                await b.runtime.cluster.leave()
    assert (not_b, by_a, dropped) == (0, 1, 0)
    assert kettle == "Kettle!" and b.platform.sent == []
    assert [e["event"] for e in logs if e["event"].startswith("reminders.")] == [
        "reminders.dropped"
    ]
    assert left.startswith(prompts.REMINDERS_NONE)


async def test_a_reminder_whose_address_is_broken_is_dropped_once_and_logged(
    tmp_path: Path,
) -> None:
    clock = Clock()
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url), fake, clock) as c:
        await c.remind("PT1M", "the kettle")
        await c.runtime.db.run(lambda conn: conn.execute("UPDATE reminders SET address = '{'"))
        clock.now += 60
        with capture_logs() as logs:
            fired = [await c.tick(), await c.tick()]
        left = await c.command("/reminders")
    assert fired == [0, 0]
    assert [e["event"] for e in logs if e["event"].startswith("reminders.")] == ["reminders.broken"]
    assert left.startswith(prompts.REMINDERS_NONE)


async def test_a_members_forget_in_a_per_member_group_erases_their_reminders_there(
    tmp_path: Path,
) -> None:
    clock = Clock()
    binding = (f"bindings:\n  - {{platform: telegram, chat: '{GROUP}', soul: lark, "
               "memory: per-member}\n")  # fmt: skip
    async with FakeAnthropic() as fake, chat(config_for(tmp_path, fake.url, binding), fake,
                                             clock) as c:  # fmt: skip
        await c.remind("PT5M", "mine, in the group", group=True)
        await c.remind("PT5M", "mine, in private")
        await c.remind("PT5M", "hers, in the group", user="2", group=True)
        sent = len(c.platform.sent)
        await c.platform.say("/forget confirm", user="1", chat=GROUP, dm=False, mention=True)
        await c.platform.replies(sent + 1)
        listed = await c.command("/reminders")
        hers = await c.command("/reminders", user="2")
    assert "mine, in private" in listed and "mine, in the group" not in listed
    assert "hers, in the group" in hers


async def test_a_members_forget_in_one_channel_erases_their_reminders_in_the_whole_server(
    tmp_path: Path,
) -> None:
    clock = Clock()
    async with FakeAnthropic() as model:
        config = make_config(tmp_path, model.url, BINDINGS)
        async with running(config, RecordingPlatform("discord"), clock) as (runtime, platform):
            for who, text in ((ANN, "standup"), (BOB, "lunch")):
                model.script_tool_use("set_reminder", {"when": "PT1H", "text": text})
                model.script_text("ok")
                await ask(runtime, platform, at("700", who, f"remind me in an hour: {text}"))
                assert await runtime.sessions.wait(5) == 0
            await ask(runtime, platform, at("701", ANN, "/forget confirm"))  # another channel
            rows = await runtime.db.run(
                lambda conn: conn.execute("SELECT user_id, text FROM reminders").fetchall()
            )
    assert [tuple(r) for r in rows] == [(BOB, "lunch")]
