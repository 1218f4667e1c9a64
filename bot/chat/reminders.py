"""`set_reminder` and `set_timezone`: the tools a turn's model keeps time with.

Both are offered to every turn (with `reminders:` in the config, always), and
their descriptions and schemas are the same bytes for every conversation of
every soul: they open the cached prefix, so neither the person's zone nor the
time is ever in them. What differs per conversation is the handler's closure:
the conversation a reminder is set in is always the one the turn answers (the
model names no conversation), and its person is the one whose message the turn
answers. A turn that answers several people at once (a group's batched
messages) cannot tell which of them asked: both tools refuse it then
(WHO_UNKNOWN), and the persona asks for it again on its own.

Times are read in the person's IANA zone (`person_zones`, set by the model with
`set_timezone` or by the person with `/timezone`), UTC until it is known. The
tool's answer says the time it resolved and the time now, in that zone, and
which zone, so the reply can say which one was assumed (and the model can see a
"tomorrow" it got wrong: the turn's own clock line is UTC). A reminder in the past, past
`reminders.max_days_ahead`, or one more than `reminders.max_pending` is refused
with an error code the model can explain.
"""

from __future__ import annotations

import functools
import json
import re
import time
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import structlog

from bot import prompts
from bot.chat.reminder_store import NewReminder, ReminderStore
from bot.config.schema import RemindersConfig
from bot.types import Inbound, Route, Tool

log = structlog.get_logger(__name__)

UTC_NAME = "UTC"
MAX_TEXT = 500  # characters of a reminder's text kept
_DURATION = re.compile(
    r"^P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$", re.ASCII
)


NOT_ZONES = frozenset({"localtime", "Factory"})  # files of the tz folder, no place's zone


@functools.cache
def _zone_names() -> frozenset[str]:
    """The IANA zone names this machine's tz database holds (read once)."""
    return frozenset(zoneinfo.available_timezones()) - NOT_ZONES


def zone_named(name: str) -> ZoneInfo | None:
    """The IANA zone `name` (as the tz database spells it), or None: never a
    file of the tz folder that names no place (`localtime`, `posixrules`,
    `right/...`, `posix/...`, `Factory`)."""
    name = name.strip()
    if name not in _zone_names():
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def resolve(when: str, zone: ZoneInfo, now: float) -> float:
    """The moment `when` names, in epoch seconds: an ISO 8601 date-time (a
    local one read in `zone`; one with an offset as it says) or an ISO 8601
    duration from `now` (PT30M). Raises ValueError for anything else."""
    text = when.strip().upper()
    match = _DURATION.match(text)
    if match and text not in ("P", "PT") and not text.endswith("T"):
        weeks, days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
        delta = timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds)
        return now + delta.total_seconds()
    moment = datetime.fromisoformat(when.strip())
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment.timestamp()


def shown(ts: float, zone: ZoneInfo) -> str:
    """A moment as the person reads it: `2026-05-02 09:00 (Europe/Lisbon)`."""
    return datetime.fromtimestamp(ts, zone).strftime("%Y-%m-%d %H:%M") + f" ({zone.key})"


def _error(message: str, code: str) -> str:
    return json.dumps({"error": message, "details": {"code": code}}, ensure_ascii=False)


def _who_unknown() -> str:
    return _error("this turn answers several people at once, so it is not known who asked; "
                  "ask them to say it again on its own", "WHO_UNKNOWN")  # fmt: skip


class Reminders:
    """The reminder tools of each turn, over one store."""

    def __init__(
        self,
        store: ReminderStore,
        config: RemindersConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._config = config
        self._clock = clock

    async def known_zone(self, asked: Inbound | None) -> ZoneInfo | None:
        """The zone of whom a turn answers (`asked`), when they have told it;
        None too when the store cannot say (`reminders.zone_unread`: the turn
        goes on with the UTC clock)."""
        if asked is None:
            return None
        try:
            name = await self.store.zone(asked.platform, asked.user_id)
        except Exception as exc:
            log.warning("reminders.zone_unread", error_class=type(exc).__name__)
            return None
        return zone_named(name) if name else None

    async def zone(self, platform: str, user_id: str) -> ZoneInfo:
        """A person's zone; UTC while unknown (or no longer known to the tz database)."""
        name = await self.store.zone(platform, user_id)
        return (zone_named(name) if name else None) or ZoneInfo(UTC_NAME)

    def tools(self, route: Route, asked: Inbound | None) -> list[Tool]:
        """`set_reminder` and `set_timezone` for a turn of `route` answering
        `asked`; None: a turn that answers several people (or one not known),
        whose tools refuse with WHO_UNKNOWN, as it cannot tell who asked."""

        async def set_reminder(args: dict[str, Any]) -> str:
            if asked is None:
                return _who_unknown()
            return await self._set_reminder(route, asked, args)

        async def set_timezone(args: dict[str, Any]) -> str:
            if asked is None:
                return _who_unknown()
            name = str(args.get("zone", ""))
            zone = zone_named(name)
            if zone is None:
                return _error(f"{name!r} is not an IANA time zone", "ZONE_UNKNOWN")
            await self.store.set_zone(asked.platform, asked.user_id, zone.key, self._clock)
            log.info("reminders.zone_set", platform=asked.platform, user_id=asked.user_id)
            return json.dumps({"zone": zone.key, "now": shown(self._clock(), zone)})

        reminder_schema = {
            "type": "object",
            "properties": {"when": {"type": "string"}, "text": {"type": "string"}},
            "required": ["when", "text"],
        }
        zone_schema = {
            "type": "object",
            "properties": {"zone": {"type": "string"}},
            "required": ["zone"],
        }
        return [
            Tool("set_reminder", prompts.SET_REMINDER, reminder_schema, set_reminder),
            Tool("set_timezone", prompts.SET_TIMEZONE, zone_schema, set_timezone),
        ]

    async def _set_reminder(self, route: Route, asked: Inbound, args: dict[str, Any]) -> str:
        text = str(args.get("text", "")).strip()[:MAX_TEXT]
        when = str(args.get("when", ""))
        zone, now = await self.zone(asked.platform, asked.user_id), self._clock()
        if not text:
            return _error("say what to remind them of in `text`", "TEXT_MISSING")
        try:
            due = resolve(when, zone, now)
        except (ValueError, OverflowError):
            return _error(f"{when!r} is neither an ISO 8601 date-time nor a duration",
                          "WHEN_UNREADABLE")  # fmt: skip
        if due <= now:
            return _error(f"{shown(due, zone)} has passed; it is {shown(now, zone)} now",
                          "WHEN_PAST")  # fmt: skip
        if due > now + self._config.max_days_ahead * 86400:
            return _error(f"a reminder may be at most {self._config.max_days_ahead} days "
                          "ahead", "TOO_FAR")  # fmt: skip
        new = NewReminder(route.soul, route.scope, route.session, asked.platform, asked.user_id,
                          asked.address(), text, zone.key, due, now)  # fmt: skip
        stored = await self.store.add(new, self._config.max_pending)
        if stored is None:
            return _error(f"they have {self._config.max_pending} reminders waiting, the most "
                          "they may; /reminders lists and cancels them", "TOO_MANY")  # fmt: skip
        log.info("reminders.set", reminder=stored.id, session=route.session,
                 due=datetime.fromtimestamp(due, UTC).isoformat(), zone=zone.key)  # fmt: skip
        answer = {"set": True, "at": shown(due, zone), "now": shown(now, zone), "zone": zone.key,
                  "zone_known": zone.key != UTC_NAME or await self._zone_set(asked)}  # fmt: skip
        return json.dumps(answer, ensure_ascii=False)

    async def _zone_set(self, asked: Inbound) -> bool:
        return await self.store.zone(asked.platform, asked.user_id) is not None
