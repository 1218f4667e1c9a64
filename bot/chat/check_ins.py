"""Check-ins: the persona follows up on something a person said, unasked.

Opt-in per binding (`check_ins: true`), in DMs only. At the heartbeat (when a
conversation ends and its soul reflects on it: bot/chat/reflect.py), `plan`
may make one forced tool call (`plan_check_in`, source `check_in`) on that
conversation's own turns: a follow-up on an exam, a trip, a bad day, or none.
It asks only when the person may get one:

- they did not turn them off (`/checkins off`, `check_in_optouts`);
- none is planned for them already (one at a time);
- fewer than `check_ins.per_week` were sent to them in the last seven days
  (`check_ins_sent`);
- they answered the last one sent (a message of theirs in that conversation
  after it): a person who never answered one gets no second.

A planned check-in is a row of `reminders` of kind `check_in`
(bot/chat/reminder_store.py), moved out of the quiet hours (`check_ins.quiet_start`
to `quiet_end`, in the person's zone) and delivered like a reminder
(bot/chat/reminder_delivery.py), but in its own words (source `check_in`), never
as a stored text: when the model cannot write it, or when it comes due in the
quiet hours (the daemon was down), it is dropped (`check_ins.dropped`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import structlog

from bot import prompts
from bot.chat.history import Entry
from bot.chat.places import binding_for
from bot.chat.reminder_store import CHECK_IN, NewReminder
from bot.chat.reminders import Reminders, resolve, shown
from bot.chat.transcript import transcript
from bot.config.schema import CheckInsConfig, Config
from bot.model.client import ModelClient
from bot.model.usage import CallContext
from bot.storage.db import Database
from bot.storage.sql import Conn
from bot.types import Inbound, Route

log = structlog.get_logger(__name__)

WEEK_S = 7 * 86400
MAX_DAYS_AHEAD = 14  # a follow-up further off is no follow-up
PLAN_CHECK_IN = {
    "name": "plan_check_in",
    "description": prompts.PLAN_CHECK_IN,
    "input_schema": {
        "type": "object",
        "properties": {
            "follow_up": {"type": "boolean"},
            "about": {"type": "string"},
            "when": {"type": "string"},
        },
        "required": ["follow_up"],
    },
}


def quiet(config: CheckInsConfig, ts: float, zone: ZoneInfo) -> bool:
    """Whether `ts` falls in the quiet hours in `zone`."""
    hour = datetime.fromtimestamp(ts, zone).hour
    start, end = config.quiet_start, config.quiet_end
    return start <= hour or hour < end if start > end else start <= hour < end


def out_of_quiet(config: CheckInsConfig, ts: float, zone: ZoneInfo) -> float:
    """`ts`, or the next `quiet_end` o'clock in `zone` when `ts` is quiet."""
    if not quiet(config, ts, zone):
        return ts
    local = datetime.fromtimestamp(ts, zone)
    end = local.replace(hour=config.quiet_end, minute=0, second=0, microsecond=0)
    if end <= local:
        end += timedelta(days=1)
    return end.timestamp()


class CheckIns:
    """Plans check-ins at the heartbeat; `/checkins` (opt out, in)."""

    def __init__(
        self,
        db: Database,
        reminders: Reminders,
        model: ModelClient,
        config: Config,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._reminders = reminders
        self._model = model
        self._bindings = config.bindings
        self.config = config.check_ins
        self._clock = clock

    async def opted_out(self, platform: str, user_id: str) -> bool:
        def query(conn: Conn) -> bool:
            return (
                conn.execute(
                    "SELECT 1 FROM check_in_optouts WHERE platform = ? AND user_id = ?",
                    (platform, user_id),
                ).fetchone()
                is not None
            )

        return bool(await self._db.run(query))

    async def set_opted_out(self, platform: str, user_id: str, out: bool) -> None:
        """`/checkins off` (`out`, and what is planned goes) or `/checkins on`."""

        def write(conn: Conn) -> None:
            with conn.transaction():
                conn.execute(
                    "DELETE FROM check_in_optouts WHERE platform = ? AND user_id = ?",
                    (platform, user_id),
                )
                if out:
                    conn.execute(
                        "INSERT INTO check_in_optouts (platform, user_id, ts) VALUES (?, ?, ?)",
                        (platform, user_id, self._clock()),
                    )
                    conn.execute(
                        "DELETE FROM reminders WHERE platform = ? AND user_id = ? AND kind = ?",
                        (platform, user_id, CHECK_IN),
                    )

        await self._db.run(write)

    async def sent(self, platform: str, user_id: str, session: str) -> None:
        """Keep that a check-in went to the person (the weekly cap), and the
        newest history row of its conversation then (a message of theirs after
        it answers it: history ids only grow)."""

        def insert(conn: Conn) -> None:
            conn.execute(
                "INSERT INTO check_ins_sent (platform, user_id, session, entry, ts) SELECT ?, ?, "
                "?, COALESCE(MAX(id), 0), ? FROM history WHERE session = ?",
                (platform, user_id, session, self._clock(), session),
            )

        await self._db.run(insert)

    async def why_not_now(self, asked: Inbound) -> str | None:
        """Why a planned check-in to `asked` (its address) may no longer go,
        or None: its binding no longer turns check-ins on, or the person turned
        them off (perhaps while it was being planned)."""
        binding = binding_for(self._bindings, asked)
        if binding is None or not binding.check_ins:
            return "the binding no longer allows them"
        if await self.opted_out(asked.platform, asked.user_id):
            return "turned off"
        return None

    async def _may_plan(self, asked: Inbound, session: str) -> str | None:
        """Why no check-in may be planned for the person now, or None."""
        platform, user_id, now = asked.platform, asked.user_id, self._clock()

        def query(conn: Conn) -> str | None:
            if conn.execute(
                "SELECT 1 FROM check_in_optouts WHERE platform = ? AND user_id = ?",
                (platform, user_id),
            ).fetchone():
                return "turned off"
            if conn.execute(
                "SELECT 1 FROM reminders WHERE platform = ? AND user_id = ? AND kind = ?",
                (platform, user_id, CHECK_IN),
            ).fetchone():
                return "one planned"
            sent = conn.execute(
                "SELECT session, entry, ts FROM check_ins_sent WHERE platform = ? AND "
                "user_id = ? ORDER BY ts DESC, id DESC",
                (platform, user_id),
            ).fetchall()
            if sum(1 for *_, ts in sent if ts > now - WEEK_S) >= self.config.per_week:
                return "weekly cap"
            if (
                sent
                and not conn.execute(
                    "SELECT 1 FROM history WHERE session = ? AND role = 'user' AND id > ?",
                    (sent[0][0], sent[0][1]),
                ).fetchone()
            ):
                return "the last one not answered"
            return None

        return await self._db.run(query)

    async def _address(self, session: str) -> Inbound | None:
        def query(conn: Conn) -> str | None:
            row = conn.execute(
                "SELECT inbound FROM reply_addresses WHERE session = ?", (session,)
            ).fetchone()
            return None if row is None else str(row[0])

        address = await self._db.run(query)
        try:
            return Inbound.from_address(address) if address else None
        except (ValueError, TypeError):
            return None

    async def plan(self, route: Route, entries: list[Entry]) -> None:
        """At the heartbeat of `route`'s conversation (its `entries` since the
        last one): maybe plan one check-in (module docstring). Raises
        BudgetExceeded, ModelError (the heartbeat logs them)."""
        if not route.is_dm or not any(b.check_ins for b in self._bindings):
            return
        asked = await self._address(route.session)
        binding = binding_for(self._bindings, asked) if asked is not None else None
        if asked is None or binding is None or not binding.check_ins:
            return
        why_not = await self._may_plan(asked, route.session)
        if why_not is not None:
            log.info("check_ins.skipped", session=route.session, reason=why_not)
            return
        zone, now = await self._reminders.zone(asked.platform, asked.user_id), self._clock()
        lines = transcript(("Them" if e.role == "user" else "You", e.text) for e in entries)
        user = prompts.PLAN_CHECK_IN_USER.format(now=shown(now, zone), transcript=lines)
        ctx = CallContext(route.soul, route.scope, route.session, route.user, "check_in")
        system = [{"type": "text", "text": prompts.PLAN_CHECK_IN_SYSTEM}]
        data = await self._model.use_tool(ctx, system, [{"role": "user", "content": user}],
                                          PLAN_CHECK_IN)  # fmt: skip
        await self._keep(route, asked, data, zone, now)

    async def _keep(
        self, route: Route, asked: Inbound, data: Any, zone: ZoneInfo, now: float
    ) -> None:
        if not isinstance(data, dict) or data.get("follow_up") is not True:
            log.info("check_ins.none", session=route.session)
            return
        about = str(data.get("about", "")).strip()[:300]
        try:
            due = resolve(str(data.get("when", "")), zone, now)
        except (ValueError, OverflowError):
            due = 0.0
        if not about or not now < due <= now + MAX_DAYS_AHEAD * 86400:
            reason = "no subject" if not about else f"not in the next {MAX_DAYS_AHEAD} days"
            log.warning("check_ins.rejected", session=route.session, reason=reason)
            return
        due = out_of_quiet(self.config, due, zone)
        new = NewReminder(route.soul, route.scope, route.session, asked.platform, asked.user_id,
                          asked.address(), about, zone.key, due, now, CHECK_IN)  # fmt: skip
        if await self._reminders.store.add(new, max_pending=1) is not None:
            log.info("check_ins.planned", session=route.session, due=shown(due, zone))
