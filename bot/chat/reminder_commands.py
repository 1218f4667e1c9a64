"""`/reminders`, `/timezone` and `/checkins` (docs/commands.md, docs/reminders.md).

`/reminders` lists the caller's own pending reminders, soonest first, numbered,
with their times in the caller's zone; `/reminders cancel N` cancels the Nth of
that list. In a DM the list holds all of the caller's reminders; in a group or
a channel only those set there, so nothing set in private is shown where others
read. An admin also sees how many reminders the store holds and for how many
people (counts only). `/timezone` shows the zone the caller's times are read
in; `/timezone ZONE` sets it (an IANA name). `/checkins off` stops the
check-ins the persona may plan for the caller (what is planned goes),
`/checkins on` allows them again, `/checkins` says which, and in a DM what is
planned (elsewhere never: it was said in private).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from bot import prompts
from bot.chat.check_ins import CheckIns
from bot.chat.markup import plain
from bot.chat.reminder_store import CHECK_IN, Reminder
from bot.chat.reminders import Reminders, shown, zone_named
from bot.types import Inbound, Route

log = structlog.get_logger(__name__)

SHOWN_CHARS = 80  # a reminder's text is cut to this in the list


def _number(text: str) -> bool:
    """Whether `text` is a number in ASCII digits (`"¹".isdigit()` too, but not `int`'s)."""
    return text.isascii() and text.isdigit()


class ReminderCommands:
    """The reminder commands over one `Reminders`."""

    def __init__(
        self,
        reminders: Reminders,
        check_ins: CheckIns | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._reminders = reminders
        self._check_ins = check_ins
        self._store = reminders.store
        self._clock = clock

    async def _listed(self, inbound: Inbound, route: Route) -> list[Reminder]:
        mine = await self._store.pending(inbound.platform, inbound.user_id)
        return mine if route.is_dm else [r for r in mine if r.session == route.session]

    async def reminders(self, inbound: Inbound, route: Route, args: list[str], admin: bool) -> str:
        """`/reminders [cancel N]`."""
        if args and (args[0].lower() != "cancel" or len(args) != 2 or not _number(args[1])):
            return prompts.REMINDERS_USAGE
        listed = await self._listed(inbound, route)
        if args:
            number = int(args[1])
            if not 1 <= number <= len(listed):
                return prompts.REMINDER_NOT_FOUND.format(number=number)
            chosen = listed[number - 1]
            if not await self._store.cancel(chosen.id, inbound.platform, inbound.user_id):
                return prompts.REMINDER_NOT_FOUND.format(number=number)
            return prompts.REMINDER_CANCELLED.format(number=number, text=plain(chosen.text))
        zone = await self._reminders.zone(inbound.platform, inbound.user_id)
        lines = [prompts.REMINDERS_HEAD.format(zone=zone.key)] if listed else []
        for number, reminder in enumerate(listed, 1):
            text = reminder.text if len(reminder.text) <= SHOWN_CHARS else (
                reminder.text[: SHOWN_CHARS - 1] + "…")  # fmt: skip
            lines.append(f"{number}. {shown(reminder.due, zone)}: {plain(text)}")
        lines.append(prompts.REMINDERS_FOOT if listed else prompts.REMINDERS_NONE)
        if admin:
            total, people = await self._store.counts()
            lines.append(prompts.REMINDERS_ADMIN.format(total=total, people=people))
        return "\n".join(lines)

    async def forget(self, inbound: Inbound, route: Route) -> None:
        """Erase the person's reminders: in a DM all of them and their zone,
        elsewhere those they set anywhere in that place's scope, every channel
        of a `per-member` server (their `/forget` of their member memory)."""
        if route.is_dm:
            count = await self._store.forget_person(inbound.platform, inbound.user_id)
        else:
            count = await self._store.forget_person_in(
                inbound.platform, inbound.user_id, route.scope
            )
        log.info("reminders.forgotten", platform=inbound.platform, reminders=count)

    async def timezone(self, inbound: Inbound, args: list[str]) -> str:
        """`/timezone [ZONE]`."""
        if not args:
            name = await self._store.zone(inbound.platform, inbound.user_id)
            known = zone_named(name) if name else None
            if known is None:
                return prompts.TIMEZONE_UNKNOWN
            return prompts.TIMEZONE_SHOWN.format(zone=known.key)
        zone = zone_named(args[0])
        if zone is None or len(args) != 1:
            return prompts.TIMEZONE_BAD.format(zone=plain(" ".join(args)))
        await self._store.set_zone(inbound.platform, inbound.user_id, zone.key, self._clock)
        return prompts.TIMEZONE_SET.format(zone=zone.key)

    async def checkins(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        """`/checkins [on | off]`: whether the persona may write first to the
        caller, and (in a DM only: it is said in private) the one planned."""
        sub = args[0].lower() if len(args) == 1 else "" if not args else "?"
        if self._check_ins is None or sub not in ("", "on", "off"):
            return prompts.CHECKINS_USAGE
        if sub:
            await self._check_ins.set_opted_out(inbound.platform, inbound.user_id, sub == "off")
            log.info("check_ins.opted", to=sub)
        if await self._check_ins.opted_out(inbound.platform, inbound.user_id):
            return prompts.CHECKINS_OFF
        if not route.is_dm:  # what is planned was said in private: never shown here
            return "\n".join([prompts.CHECKINS_ON, prompts.CHECKINS_NOT_HERE])
        lines = [prompts.CHECKINS_ON]
        zone = await self._reminders.zone(inbound.platform, inbound.user_id)
        for planned in await self._store.pending(inbound.platform, inbound.user_id, CHECK_IN):
            lines.append(prompts.CHECKINS_PLANNED.format(when=shown(planned.due, zone),
                                                         about=plain(planned.text)))  # fmt: skip
        return "\n".join(lines)
