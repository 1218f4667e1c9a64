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
then the row is deleted. The delivery remembers, in memory, what this process
sent: when the delete (or, for a check-in, keeping that it was sent) fails,
the next tick that claims the row again finishes it without sending it again
(`reminders.finished`). Only a process that dies between the send and the
delete leaves a claim that expires (`sessions.lease_s`) and the reminder sent
again then: at least once, exactly once unless a process dies in that instant.

A send that fails (the bot blocked, the chat gone) is tried again each time
the claim expires, with the text composed the first time (one model call per
reminder per process, however many tries), and given up after MAX_TRIES
failed sends (`reminders.undeliverable`).
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
MAX_TRIES = 12  # failed sends of one reminder before it is given up (an hour at the default lease)
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
        self._composed: dict[int, str] = {}  # the text of each reminder id, to send again
        self._tries: dict[int, int] = {}  # failed sends of each reminder id
        self._sent: set[int] = set()  # ids sent, their row not finished (a store error)
        self._counted: set[int] = set()  # check-in ids whose sending is kept (the weekly cap)

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
            if late_s > dropped_after and reminder.id not in self._sent:  # any process drops
                # it (its owner may be gone for good), but one this process sent is finished
                if await self._store.claim(reminder.id, self._holder, now, self._lease_s):
                    await self._store.done(reminder.id, self._holder)
                    self._forget(reminder.id)
                    log.warning("reminders.dropped", reminder=reminder.id,
                                session=reminder.session, late_s=round(late_s),
                                grace_s=self._grace_s)  # fmt: skip
                continue
            if not mine or asked.platform not in self._platforms:
                continue
            if not await self._store.claim(reminder.id, self._holder, now, self._lease_s):
                continue  # another process took it
            try:
                if reminder.id in self._sent:  # sent before: its row is finished, not sent again
                    await self._finish(reminder)
                    log.info("reminders.finished", reminder=reminder.id,
                             session=reminder.session)  # fmt: skip
                    continue
                if self._tries.get(reminder.id, 0) >= MAX_TRIES:
                    await self._store.done(reminder.id, self._holder)
                    self._forget(reminder.id)
                    log.warning("reminders.undeliverable", reminder=reminder.id,
                                session=reminder.session, tries=MAX_TRIES)  # fmt: skip
                    continue
                if reminder.kind == CHECK_IN:
                    if not await self._check_in(reminder, asked):
                        continue
                else:
                    await self._deliver(reminder, asked, late_s)
            except Exception as exc:  # the claim expires, and it is tried again
                if reminder.id not in self._sent:
                    self._tries[reminder.id] = self._tries.get(reminder.id, 0) + 1
                log.error("reminders.failed", reminder=reminder.id,
                          error_class=type(exc).__name__, error=str(exc))  # fmt: skip
            else:
                delivered += 1
        return delivered

    def _forget(self, reminder_id: int) -> None:
        """Let go of what this process kept of a reminder whose row is gone."""
        self._composed.pop(reminder_id, None)
        self._tries.pop(reminder_id, None)
        self._sent.discard(reminder_id)
        self._counted.discard(reminder_id)

    async def _send(self, reminder: Reminder, route: Route, message: Outbound) -> None:
        """Send a reminder's message, then finish its row (`_finish`). Raises
        what the adapter raised (nothing sent: tried again, with the same text)
        or the store (sent: the next tick that claims it finishes it)."""
        self._composed[reminder.id] = message.text
        await self._sessions.say_unprompted(route, message)
        self._sent.add(reminder.id)
        await self._finish(reminder)

    async def _finish(self, reminder: Reminder) -> None:
        """After the send: keep that a check-in was sent (the weekly cap; once),
        then delete the row. Raises what the store raised."""
        if reminder.kind == CHECK_IN and reminder.id not in self._counted:
            assert self._check_ins is not None  # a check-in is sent only with them
            await self._check_ins.sent(reminder.platform, reminder.user_id, reminder.session)
            self._counted.add(reminder.id)
        await self._store.done(reminder.id, self._holder)
        self._forget(reminder.id)

    async def _deliver(self, reminder: Reminder, asked: Inbound, late_s: float) -> None:
        route = self._route_of(asked)  # the binding now: its history is the one to go on
        late = delay_text(late_s) if late_s > LATE_AFTER_S else None
        text = self._composed.get(reminder.id) or await self._compose(route, reminder, asked, late)
        message = Outbound(asked.platform, asked.chat_id, text, asked.thread_id)
        await self._send(reminder, route, message)
        log.info("reminders.delivered", reminder=reminder.id, session=reminder.session,
                 late_s=round(max(late_s, 0)))  # fmt: skip

    async def _check_in(self, reminder: Reminder, asked: Inbound) -> bool:
        """Deliver a check-in (bot/chat/check_ins.py) in the persona's words,
        or drop it: in the quiet hours, when its binding no longer allows
        check-ins or the person turned them off, or when the model cannot write it."""
        zone = zone_named(reminder.zone)
        reason = None
        if self._check_ins is None or zone is None:
            reason = "check-ins are not served here"
        elif quiet(self._check_ins.config, self._clock(), zone):
            reason = "quiet hours"
        else:
            reason = await self._check_ins.why_not_now(asked)
        route = self._route_of(asked)
        text = self._composed.get(reminder.id, "")
        if reason is None and not text:
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
            self._forget(reminder.id)
            log.info("check_ins.dropped", reminder=reminder.id, session=reminder.session,
                     reason=reason)  # fmt: skip
            return False
        message = Outbound(asked.platform, asked.chat_id, text, asked.thread_id)
        await self._send(reminder, route, message)
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
