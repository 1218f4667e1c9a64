"""Check-ins through the runtime and the fake model, with a clock the test
moves: where a binding turns them on, the heartbeat of a DM plans one
follow-up (a `check_in` call), moved out of the quiet hours, delivered in the
persona's words (another `check_in` call); none while one is planned, none
after one never answered, none past the weekly cap, none after
`/checkins off`; one due in the quiet hours is dropped."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot import prompts
from bot.app.runtime import Runtime
from bot.chat.reminder_store import CHECK_IN
from tests.chat.test_reflect import LONG, SOUL, save_soul
from tests.fakes.anthropic_fake import FakeAnthropic, Reply
from tests.kit import RecordingPlatform, capture_logs, make_config, running

START = datetime(2026, 12, 7, 20, 0, tzinfo=UTC).timestamp()
ON = "bindings:\n  - {platform: telegram, soul: lark, check_ins: true}\n"


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@dataclass
class Model:
    """The fake's responder: a plan for each `plan_check_in`, a reflection for
    each `save_soul`, a line for each check-in written; the rest echoed."""

    fake: FakeAnthropic
    plans: list[dict[str, Any]] = field(default_factory=list)
    planned: int = 0
    written: int = 0

    def __post_init__(self) -> None:
        self.fake.responder = self

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        forced = body.get("tool_choice", {}).get("name")
        if forced == "save_soul":
            return save_soul("About the exam.")
        if forced == "plan_check_in":
            self.planned += 1
            plan = self.plans.pop(0) if self.plans else {"follow_up": False}
            return Reply.of_tool_use("plan_check_in", plan)
        if "You planned to check in" in json.dumps(body["messages"]):
            self.written += 1
            return Reply.of_text("How did the exam go?")
        return None


@dataclass
class Chat:
    runtime: Runtime
    platform: RecordingPlatform
    model: Model
    clock: Clock

    async def talk(self, text: str = LONG) -> None:
        sent = len(self.platform.sent)
        await self.platform.say(text, user="1")
        await self.platform.replies(sent + 1)
        assert await self.runtime.sessions.wait(5) == 0

    async def heartbeat(self) -> None:
        await self.runtime.reflector.flush()

    async def planned(self) -> list[tuple[str, float]]:
        query = "SELECT text, due FROM reminders WHERE kind = ?"
        rows = await self.runtime.db.run(lambda c: c.execute(query, (CHECK_IN,)).fetchall())
        return [(str(t), float(d)) for t, d in rows]

    async def tick(self) -> int:
        assert self.runtime.reminders is not None
        return await self.runtime.reminders.tick()

    async def command(self, text: str) -> str:
        sent = len(self.platform.sent)
        await self.platform.say(text, user="1")
        return (await self.platform.replies(sent + 1))[-1].text


def config_for(tmp_path: Path, url: str, extra: str = ON) -> Any:
    folder = tmp_path / "workspaces" / "lark"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SOUL.md").write_text(SOUL)
    settings = "heartbeat: {idle_minutes: 300}\ncheck_ins: {per_week: 2}\n"
    dms = "adapters: {telegram: {dm_policy: open}}\n"
    return make_config(tmp_path, url, dms + settings + extra)


@asynccontextmanager
async def chat(tmp_path: Path, extra: str = ON) -> AsyncIterator[Chat]:
    clock = Clock()
    async with FakeAnthropic() as fake:
        model = Model(fake)
        async with running(config_for(tmp_path, fake.url, extra), "telegram", clock) as (
            runtime, platform,
        ):  # fmt: skip
            yield Chat(runtime, platform, model, clock)


def at(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


async def test_a_check_in_is_planned_out_of_the_quiet_hours_and_delivered_once(
    tmp_path: Path,
) -> None:
    async with chat(tmp_path) as c:
        await c.command("/timezone Europe/Lisbon")
        c.model.plans.append({"follow_up": True, "about": "the exam",
                              "when": "2026-12-08T23:30"})  # fmt: skip
        await c.talk("I have my driving exam tomorrow evening, wish me luck! " + LONG)
        await c.heartbeat()
        planned = await c.planned()
        status = await c.command("/checkins")
        c.clock.now = at("2026-12-09T08:59:00+00:00")  # Lisbon is UTC in December
        early = await c.tick()
        c.clock.now = at("2026-12-09T09:00:30+00:00")
        sent = len(c.platform.sent)
        fired = await c.tick()
        delivered = c.platform.sent[sent:]
        again = await c.tick()
        sources = await c.runtime.db.run(
            lambda conn: [r[0] for r in conn.execute("SELECT source FROM usage ORDER BY id")]
        )
    # 23:30 is in the quiet hours (22 to 9): moved to 09:00 the next morning.
    assert planned == [("the exam", at("2026-12-09T09:00:00+00:00"))]
    assert status == "\n".join([prompts.CHECKINS_ON, prompts.CHECKINS_PLANNED.format(
        when="2026-12-09 09:00 (Europe/Lisbon)", about="the exam")])  # fmt: skip
    assert (early, fired, again) == (0, 1, 0)
    assert [m.text for m in delivered] == ["How did the exam go?"]
    assert sources.count("check_in") == 2  # the plan and the message, in the ledger


async def test_no_second_without_an_answer_nor_past_the_weekly_cap(tmp_path: Path) -> None:
    plan = {"follow_up": True, "about": "the trip", "when": "2026-12-08T12:00"}
    async with chat(tmp_path) as c:
        c.model.plans.append(dict(plan))
        await c.talk()
        await c.heartbeat()  # planned: the first
        await c.talk("More about my plans. " + LONG)  # said before the check-in comes
        c.clock.now = at("2026-12-08T12:00:00+00:00")
        first = await c.tick()
        with capture_logs() as logs:
            await c.heartbeat()  # that conversation ends after the check-in, unanswered
        unanswered = [e.get("reason") for e in logs if e["event"] == "check_ins.skipped"]
        c.model.plans.append(dict(plan, when="2026-12-09T12:00"))
        await c.talk("It went well, thanks! " + LONG)  # the answer
        await c.heartbeat()  # planned: the second
        c.clock.now = at("2026-12-09T12:00:00+00:00")
        second = await c.tick()
        await c.talk("Also fine. " + LONG)
        with capture_logs() as logs:
            await c.heartbeat()
        capped = [e.get("reason") for e in logs if e["event"] == "check_ins.skipped"]
        c.clock.now += 8 * 86400  # a week on, the cap is free again
        await c.talk("Hello again. " + LONG)
        await c.heartbeat()
    assert (first, second) == (1, 1)
    assert unanswered == ["the last one not answered"]
    assert capped == ["weekly cap"]
    assert c.model.planned == 3 and c.model.written == 2


async def test_checkins_off_stops_them_and_drops_what_is_planned(tmp_path: Path) -> None:
    async with chat(tmp_path) as c:
        c.model.plans.append({"follow_up": True, "about": "the move", "when": "2026-12-08T12:00"})
        await c.talk()
        await c.heartbeat()
        before = await c.planned()
        off = await c.command("/checkins off")
        after = await c.planned()
        await c.talk("Another thing. " + LONG)
        await c.heartbeat()
        c.clock.now = at("2026-12-08T12:00:00+00:00")
        fired = await c.tick()
        on = await c.command("/checkins on")
    assert len(before) == 1 and after == []
    assert off == prompts.CHECKINS_OFF and on == prompts.CHECKINS_ON
    assert c.model.planned == 1 and fired == 0


async def test_checkins_in_a_group_shows_nothing_planned(tmp_path: Path) -> None:
    async with chat(tmp_path) as c:
        c.model.plans.append({"follow_up": True, "about": "the biopsy results",
                              "when": "2026-12-08T12:00"})  # fmt: skip
        await c.talk("I get my biopsy results tomorrow. " + LONG)
        await c.heartbeat()
        sent = len(c.platform.sent)
        await c.platform.say("/checkins", user="1", chat="-1001", dm=False, mention=True)
        [in_group] = (await c.platform.replies(sent + 1))[sent:]
        in_dm = await c.command("/checkins")
    assert in_group.text == "\n".join([prompts.CHECKINS_ON, prompts.CHECKINS_NOT_HERE])
    assert "biopsy" in in_dm


async def test_without_the_binding_none_is_planned(tmp_path: Path) -> None:
    async with chat(tmp_path, extra="") as c:
        await c.talk()
        await c.heartbeat()
    assert c.model.planned == 0


async def test_one_due_in_the_quiet_hours_after_a_downtime_is_dropped(tmp_path: Path) -> None:
    async with chat(tmp_path) as c:
        c.model.plans.append({"follow_up": True, "about": "the exam", "when": "2026-12-08T20:00"})
        await c.talk()
        await c.heartbeat()
        c.clock.now = at("2026-12-08T23:00:00+00:00")  # down until the quiet hours
        with capture_logs() as logs:
            fired = await c.tick()
        left = await c.planned()
    assert fired == 0 and left == []
    [dropped] = [e for e in logs if e["event"] == "check_ins.dropped"]
    assert dropped["reason"] == "quiet hours"
    assert c.model.written == 0


async def test_one_planned_is_dropped_when_its_binding_turned_them_off(tmp_path: Path) -> None:
    clock = Clock()
    async with FakeAnthropic() as fake:
        model = Model(fake)
        async with running(config_for(tmp_path, fake.url), "telegram", clock) as (
            runtime, platform,
        ):  # fmt: skip
            c = Chat(runtime, platform, model, clock)
            model.plans.append({"follow_up": True, "about": "the exam", "when": "2026-12-08T12:00"})
            await c.talk()
            await c.heartbeat()
            planned = await c.planned()
        clock.now = at("2026-12-08T12:00:30+00:00")
        # Check-ins on for one chat still, but no longer for this person's DM.
        off = "bindings:\n  - {platform: telegram, chat: '5', soul: lark, check_ins: true}\n"
        async with running(config_for(tmp_path, fake.url, off), "telegram", clock) as (
            runtime, platform,
        ):  # fmt: skip
            c = Chat(runtime, platform, model, clock)
            with capture_logs() as logs:
                fired = await c.tick()
            left = await c.planned()
    assert len(planned) == 1 and fired == 0 and left == [] and platform.sent == []
    [dropped] = [e for e in logs if e["event"] == "check_ins.dropped"]
    assert dropped["reason"] == "the binding no longer allows them"
    assert model.written == 0


async def test_one_planned_as_they_turned_them_off_is_dropped(tmp_path: Path) -> None:
    async with chat(tmp_path) as c:
        c.model.plans.append({"follow_up": True, "about": "the exam", "when": "2026-12-08T12:00"})
        await c.talk()
        await c.heartbeat()
        # `/checkins off` while the plan was being made: the row came after it.
        await c.runtime.db.run(
            lambda conn: conn.execute(
                "INSERT INTO check_in_optouts (platform, user_id, ts) VALUES ('telegram', '1', 0)"
            )
        )
        c.clock.now = at("2026-12-08T12:00:30+00:00")
        with capture_logs() as logs:
            fired = await c.tick()
        left = await c.planned()
    assert fired == 0 and left == [] and c.model.written == 0
    [dropped] = [e for e in logs if e["event"] == "check_ins.dropped"]
    assert dropped["reason"] == "turned off"


async def test_a_store_error_after_the_send_counts_it_once_and_sends_it_once(
    tmp_path: Path,
) -> None:
    async with chat(tmp_path) as c:
        c.model.plans.append({"follow_up": True, "about": "the exam", "when": "2026-12-08T12:00"})
        await c.talk()
        await c.heartbeat()
        assert c.runtime.reminders is not None
        check_ins = c.runtime.reminders._check_ins
        assert check_ins is not None
        real, failures = check_ins.sent, [RuntimeError("database is locked")]

        async def flaky(platform: str, user_id: str, session: str) -> None:
            if failures:
                raise failures.pop()
            await real(platform, user_id, session)

        check_ins.sent = flaky  # type: ignore[method-assign]
        c.clock.now = at("2026-12-08T12:00:30+00:00")
        sent = len(c.platform.sent)
        first = await c.tick()
        c.clock.now += 301  # sessions.lease_s: the claim expired
        second = await c.tick()
        delivered = [m.text for m in c.platform.sent[sent:]]
        left = await c.planned()
        counted = await c.runtime.db.run(
            lambda conn: conn.execute("SELECT COUNT(*) FROM check_ins_sent").fetchone()[0]
        )
    assert (first, second) == (0, 0) and delivered == ["How did the exam go?"]
    assert left == [] and counted == 1 and c.model.written == 1


async def test_forget_erases_what_is_planned_and_the_choice(tmp_path: Path) -> None:
    async with chat(tmp_path) as c:
        c.model.plans.append({"follow_up": True, "about": "the move", "when": "2026-12-08T12:00"})
        await c.talk()
        await c.heartbeat()
        before = await c.planned()
        await c.command("/forget confirm")
        after = await c.planned()
        await c.command("/checkins off")
        await c.command("/forget confirm")
        status = await c.command("/checkins")
        kept = await c.runtime.db.run(
            lambda conn: conn.execute("SELECT COUNT(*) FROM check_in_optouts").fetchone()[0]
        )
    assert len(before) == 1 and after == []
    assert status == prompts.CHECKINS_ON and kept == 0
