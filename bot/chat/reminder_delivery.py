"""Reminders delivered when they come due, once, by the process that owns
their conversation.

The store is the truth (bot/chat/reminder_store.py): no process keeps a timer
of its own for a reminder, as another process (or this one's next run) could
not see it. The daemon's scheduler (bot/app/scheduler.py) calls `tick` every
`reminders.poll_s`; a tick reads the rows that came due, skips those whose
conversation another live process owns (bot/cluster/ownership.py: its Discord
shard's, Telegram's) or whose platform is not served here, claims each of the
rest (one statement: one process wins) and delivers it:

- in the conversation it was asked in (its chat and thread), in the persona's
  voice: one model call (`reminder` in the ledger, under the chat budgets) with
  the soul's blocks and that conversation's own recent history, nothing
  recalled, so a group's reminder is written from the group's lines alone and
  never from a DM's; the stored text as it is when the model cannot be asked
  (down, over budget, the soul gone);
- later than LATE_AFTER_S past its time (the daemon was down), saying how late;
  later than `reminders.grace_s` (and LATE_AFTER_S: within it a reminder is on
  time, as a poll lands up to `poll_s` after its minute), not at all: dropped,
  `reminders.dropped`, by whichever process reads it first (its owner may be
  gone for good), so the due rows no live process owns stay few.

The message is kept in the conversation's history (the next turn reads it),
then the row is deleted. A process that dies between the send and the delete
leaves a claim that expires (`sessions.lease_s`), and the reminder is sent
again then: at least once, exactly once unless a process dies in that instant.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Collection

import structlog

from bot import prompts
from bot.chat.check_ins import CheckIns, quiet
from bot.chat.manager import SessionManager
from bot.chat.reminder_store import CHECK_IN, Reminder, ReminderStore
from bot.chat.reminders import shown, zone_named
from bot.chat.turn import Agent
from bot.cluster.cluster import Cluster
from bot.errors import BudgetExceeded, ModelError, SoulbotError
from bot.types import Inbound, Outbound, Route

log = structlog.get_logger(__name__)

LATE_AFTER_S = 180.0  # later than this past its minute, a reminder says how late it is
RECENT = 12  # history entries the delivery call is given


def delay_text(seconds: float) -> str:
    """`3 hours`, `1 day`, `25 minutes`: how late, roughly."""
    minutes = int(seconds // 60)
    for size, unit in ((1440, "day"), (60, "hour"), (1, "minute")):
        if minutes >= size:
            count = minutes // size
            return f"{count} {unit}" + ("s" if count != 1 else "")
    return "less than a minute"


class ReminderDelivery:
    """Delivers the due reminders of one store (`tick`)."""

    def __init__(
        self,
        store: ReminderStore,
        sessions: SessionManager,
        agent: Agent,
        cluster: Cluster,
        route_of: Callable[[Inbound], Route],
        platforms: Collection[str],
        *,
        grace_s: float,
        lease_s: float,
        clock: Callable[[], float] = time.time,
        check_ins: CheckIns | None = None,
    ) -> None:
        self._store = store
        self._sessions = sessions
        self._agent = agent
        self._cluster = cluster
        self._route_of = route_of
        self._platforms = platforms
        self._grace_s = grace_s
        self._lease_s = lease_s
        self._clock = clock
        self._holder = secrets.token_hex(8)
        self._check_ins = check_ins

    async def tick(self) -> int:
        """Deliver (or drop) what came due and this process owns; returns how
        many were delivered. A failure is logged per reminder, never raised
        past it: the next tick tries again once its claim expires."""
        now = self._clock()
        due = await self._store.due(now)
        if not due:
            return 0
        owners = await self._cluster.owners()
        delivered = 0
        dropped_after = max(self._grace_s, LATE_AFTER_S)  # within LATE_AFTER_S, on time
        for reminder in due:
            late_s = now - reminder.due
            try:
                asked = Inbound.from_address(reminder.address)
                mine = owners.mine(asked)
            except (ValueError, TypeError) as exc:  # no chat to say it in: dropped, once
                if await self._store.claim(reminder.id, self._holder, now, self._lease_s):
                    await self._store.done(reminder.id, self._holder)
                    log.error("reminders.broken", reminder=reminder.id, error=str(exc))
                continue
            if late_s > dropped_after:  # any process drops it: its owner may be gone for good
                if await self._store.claim(reminder.id, self._holder, now, self._lease_s):
                    await self._store.done(reminder.id, self._holder)
                    log.warning("reminders.dropped", reminder=reminder.id,
                                session=reminder.session, late_s=round(late_s),
                                grace_s=self._grace_s)  # fmt: skip
                continue
            if not mine or asked.platform not in self._platforms:
                continue
            if not await self._store.claim(reminder.id, self._holder, now, self._lease_s):
                continue  # another process took it
            try:
                if reminder.kind == CHECK_IN:
                    if not await self._check_in(reminder, asked):
                        continue
                else:
                    await self._deliver(reminder, asked, late_s)
            except Exception as exc:  # the claim expires, and it is tried again
                log.error("reminders.failed", reminder=reminder.id,
                          error_class=type(exc).__name__, error=str(exc))  # fmt: skip
            else:
                delivered += 1
        return delivered

    async def _deliver(self, reminder: Reminder, asked: Inbound, late_s: float) -> None:
        route = self._route_of(asked)  # the binding now: its history is the one to go on
        late = delay_text(late_s) if late_s > LATE_AFTER_S else None
        text = await self._compose(route, reminder, asked, late)
        message = Outbound(asked.platform, asked.chat_id, text, asked.thread_id)
        await self._sessions.say_unprompted(route, message)
        await self._store.done(reminder.id, self._holder)
        log.info("reminders.delivered", reminder=reminder.id, session=reminder.session,
                 late_s=round(max(late_s, 0)))  # fmt: skip

    async def _check_in(self, reminder: Reminder, asked: Inbound) -> bool:
        """Deliver a check-in (bot/chat/check_ins.py) in the persona's words,
        or drop it: in the quiet hours, or when the model cannot write it."""
        zone = zone_named(reminder.zone)
        reason = None
        if self._check_ins is None or zone is None:
            reason = "check-ins are not served here"
        elif quiet(self._check_ins.config, self._clock(), zone):
            reason = "quiet hours"
        route = self._route_of(asked)
        text = ""
        if reason is None:
            note = prompts.CHECK_IN_DUE.format(name=asked.user_name or "them",
                                               about=reminder.text)  # fmt: skip
            try:
                history = await self._sessions.recent(route, RECENT)
                reply = await self._agent.unprompted(route, history, note, "check_in")
                text = reply.text.strip()
            except (BudgetExceeded, ModelError, SoulbotError) as exc:
                reason = f"no model: {type(exc).__name__}"
            if reason is None and not text:
                reason = "the model wrote nothing"
        if reason is not None or self._check_ins is None:
            await self._store.done(reminder.id, self._holder)
            log.info("check_ins.dropped", reminder=reminder.id, session=reminder.session,
                     reason=reason)  # fmt: skip
            return False
        message = Outbound(asked.platform, asked.chat_id, text, asked.thread_id)
        await self._sessions.say_unprompted(route, message)
        await self._store.done(reminder.id, self._holder)
        await self._check_ins.sent(asked.platform, asked.user_id, reminder.session)
        log.info("check_ins.delivered", reminder=reminder.id, session=reminder.session)
        return True

    async def _compose(
        self, route: Route, reminder: Reminder, asked: Inbound, late: str | None
    ) -> str:
        """The reminder in the persona's voice, or its stored text when the
        model cannot say it."""
        zone = zone_named(reminder.zone)
        when = shown(reminder.due, zone) if zone is not None else reminder.zone
        note = prompts.REMINDER_DUE.format(
            name=asked.user_name or "them", text=reminder.text, when=when,
            late=prompts.REMINDER_LATE.format(delay=late) if late else "",
        )  # fmt: skip
        try:
            history = await self._sessions.recent(route, RECENT)
            reply = await self._agent.unprompted(route, history, note, "reminder")
        except (BudgetExceeded, ModelError, SoulbotError) as exc:
            log.warning("reminders.plain", reminder=reminder.id, error_class=type(exc).__name__,
                        error=str(exc))  # fmt: skip
            reply = None
        if reply is not None and reply.text.strip():
            return reply.text.strip()
        if late:
            return prompts.REMINDER_FALLBACK_LATE.format(delay=late, text=reminder.text)
        return prompts.REMINDER_FALLBACK.format(text=reminder.text)
