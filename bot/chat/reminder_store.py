"""Reminders and people's time zones in the store (`reminders`, `person_zones`).

A reminder row is one pending reminder: who asked (platform, user id), where
(the soul, scope and session of the conversation, and the address of the
message that asked, to reply into its chat and thread), what, when (`due`,
epoch seconds) and in which zone it was resolved. A row lives until it is
delivered, dropped past the grace period, cancelled or forgotten: then it is
deleted, so the table holds pending reminders only and needs no retention.

Exactly once across processes: a process delivers a row only after claiming
it with one statement (`claim`: an UPDATE that takes the row when no claim is
on it, or the one on it expired, RETURNING it). The claim lasts
`sessions.lease_s`, as a session's lease does (bot/cluster/leases.py), under
the same run token; the delivering process deletes the row once the platform
took the message (`done`). A process that dies mid-delivery leaves a claim
that expires, and the owner of the conversation then takes the row again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.storage.db import Database
from bot.storage.sql import Conn

_COLUMNS = "id, soul, scope, session, platform, user_id, address, text, zone, due, created, kind"
REMINDER, CHECK_IN = "reminder", "check_in"  # the kinds of row


@dataclass(frozen=True)
class NewReminder:
    """A reminder to store (see the module docstring)."""

    soul: str
    scope: str
    session: str
    platform: str
    user_id: str
    address: str
    text: str
    zone: str
    due: float
    created: float
    kind: str = REMINDER
    """`reminder` (asked for), or `check_in` (planned by the persona: bot/chat/check_ins.py)."""


@dataclass(frozen=True)
class Reminder(NewReminder):
    """One pending reminder: a stored `NewReminder` and its id."""

    id: int = field(kw_only=True)


def _reminder(row: Sequence[Any]) -> Reminder:
    soul, scope, session, platform, user_id, address, text, zone = (str(v) for v in row[1:9])
    return Reminder(soul, scope, session, platform, user_id, address, text, zone,
                    float(row[9]), float(row[10]), str(row[11]), id=int(row[0]))  # fmt: skip


class ReminderStore:
    """The reminders and time zones of one store."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, new: NewReminder, max_pending: int) -> Reminder | None:
        """Store `new`; None (nothing stored) when its person has `max_pending`
        of its kind pending already. The count and the insert are one unit on
        either engine."""

        def insert(conn: Conn) -> Reminder | None:
            with conn.transaction(lock="reminders"):
                count = conn.execute(
                    "SELECT COUNT(*) FROM reminders WHERE platform = ? AND user_id = ? "
                    "AND kind = ?",
                    (new.platform, new.user_id, new.kind),
                ).fetchone()[0]
                if int(count) >= max_pending:
                    return None
                row = conn.execute(
                    "INSERT INTO reminders (soul, scope, session, platform, user_id, address, "
                    "text, zone, due, created, kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    f"RETURNING {_COLUMNS}",
                    (new.soul, new.scope, new.session, new.platform, new.user_id, new.address,
                     new.text, new.zone, new.due, new.created, new.kind),
                ).fetchone()  # fmt: skip
                return _reminder(row)

        return await self._db.run(insert)

    async def pending(self, platform: str, user_id: str, kind: str = REMINDER) -> list[Reminder]:
        """A person's pending rows of `kind`, soonest first."""

        def query(conn: Conn) -> list[Reminder]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM reminders WHERE platform = ? AND user_id = ? "
                "AND kind = ? ORDER BY due, id",
                (platform, user_id, kind),
            ).fetchall()
            return [_reminder(r) for r in rows]

        return await self._db.run(query)

    async def due(self, now: float, limit: int = 500) -> list[Reminder]:
        """Reminders due at `now` that no unexpired claim holds, oldest first."""

        def query(conn: Conn) -> list[Reminder]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM reminders WHERE due <= ? AND "
                "(claimed_until IS NULL OR claimed_until < ?) ORDER BY due, id LIMIT ?",
                (now, now, limit),
            ).fetchall()
            return [_reminder(r) for r in rows]

        return await self._db.run(query)

    async def claim(self, reminder_id: int, holder: str, now: float, lease_s: float) -> bool:
        """Claim a row for `holder` until `now + lease_s`: True when no claim
        was on it or the one on it expired (one statement: one process wins)."""

        def update(conn: Conn) -> bool:
            row = conn.execute(
                "UPDATE reminders SET claimed_by = ?, claimed_until = ? WHERE id = ? AND "
                "(claimed_until IS NULL OR claimed_until < ?) RETURNING id",
                (holder, now + lease_s, reminder_id, now),
            ).fetchone()
            return row is not None

        return bool(await self._db.run(update))

    async def done(self, reminder_id: int, holder: str) -> None:
        """Delete a row `holder` delivered or dropped (its claim still on it)."""
        await self._delete("DELETE FROM reminders WHERE id = ? AND claimed_by = ?",
                           (reminder_id, holder))  # fmt: skip

    async def cancel(self, reminder_id: int, platform: str, user_id: str) -> bool:
        """Delete one of a person's own reminders; False when it is not theirs
        or not pending any more."""
        return bool(await self._delete(
            "DELETE FROM reminders WHERE id = ? AND platform = ? AND user_id = ?",
            (reminder_id, platform, user_id),
        ))  # fmt: skip

    async def cancel_kind(self, platform: str, user_id: str, kind: str) -> int:
        """Delete a person's pending rows of `kind` (`/checkins off`); how many."""
        return await self._delete(
            "DELETE FROM reminders WHERE platform = ? AND user_id = ? AND kind = ?",
            (platform, user_id, kind),
        )

    async def forget_person(self, platform: str, user_id: str) -> int:
        """Delete a person's reminders, check-ins (planned and sent), opt-out
        and time zone (`/forget`); how many reminders and check-ins planned."""

        def delete(conn: Conn) -> int:
            with conn.transaction():
                for table in ("person_zones", "check_ins_sent", "check_in_optouts"):
                    conn.execute(
                        f"DELETE FROM {table} WHERE platform = ? AND user_id = ?",
                        (platform, user_id),
                    )
                return conn.execute(
                    "DELETE FROM reminders WHERE platform = ? AND user_id = ?",
                    (platform, user_id),
                ).rowcount

        return int(await self._db.run(delete))

    async def forget_person_in(self, platform: str, user_id: str, scope: str) -> int:
        """Delete a person's reminders set anywhere in one memory scope (every
        channel of a `per-member` server); how many."""
        return await self._delete(
            "DELETE FROM reminders WHERE platform = ? AND user_id = ? AND scope = ?",
            (platform, user_id, scope),
        )

    async def forget_sessions(self, sessions: Sequence[str]) -> None:
        """Delete the reminders and check-ins of conversations whose history is erased."""

        def delete(conn: Conn) -> None:
            with conn.transaction():
                for table in ("reminders", "check_ins_sent"):
                    conn.executemany(
                        f"DELETE FROM {table} WHERE session = ?", [(s,) for s in sessions]
                    )

        await self._db.run(delete)

    async def counts(self) -> tuple[int, int]:
        """Pending reminders on the store, and how many people set them."""

        def query(conn: Conn) -> tuple[int, int]:
            total = conn.execute(
                "SELECT COUNT(*) FROM reminders WHERE kind = ?", (REMINDER,)
            ).fetchone()[0]
            people = conn.execute(
                "SELECT COUNT(*) FROM (SELECT DISTINCT platform, user_id FROM reminders "
                "WHERE kind = ?) AS p",
                (REMINDER,),
            ).fetchone()[0]
            return int(total), int(people)

        return await self._db.run(query)

    async def zone(self, platform: str, user_id: str) -> str | None:
        """The IANA zone a person set, or None (UTC is assumed then)."""

        def query(conn: Conn) -> str | None:
            row = conn.execute(
                "SELECT zone FROM person_zones WHERE platform = ? AND user_id = ?",
                (platform, user_id),
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._db.run(query)

    async def set_zone(
        self, platform: str, user_id: str, zone: str, clock: Callable[[], float]
    ) -> None:
        """Keep a person's IANA zone (checked by the caller)."""

        def upsert(conn: Conn) -> None:
            conn.execute(
                "INSERT INTO person_zones (platform, user_id, zone, ts) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (platform, user_id) DO UPDATE SET zone = excluded.zone, "
                "ts = excluded.ts",
                (platform, user_id, zone, clock()),
            )

        await self._db.run(upsert)

    async def _delete(self, sql: str, params: tuple[object, ...]) -> int:
        """One DELETE statement; how many rows it deleted."""
        return int(await self._db.run(lambda conn: conn.execute(sql, params).rowcount))
