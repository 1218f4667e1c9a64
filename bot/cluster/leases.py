"""Leases: which process answers a conversation, when several share the store.

A session's turns and its recovery at start run under a lease: a row of
`session_leases` (session key, the owner's instance and run, expiry), claimed
with one statement that takes the row when it is free, expired or already
ours, and says whether it did. A turn claims it before each round (a claim of
its own row renews it) and releases it when no message waits; a start's
recovery answers a session only when the claim succeeds, so a turn another
process is running (a conversation that moved, a rolling restart) is not
answered twice: the recovery skips it (`sessions.recover_skipped`).

The owner is the process's `instance` (bot/app/owner.py: one live process per
name) and a token of this run. A turn that finds another owner's lease waits
for it (`sessions.lease_wait`) until it is released or expires
(`sessions.lease_s`): a crashed owner's sessions are taken up after it. A run
that holds its instance's lock knows an earlier run of the same instance is
dead, and releases that run's leases at start (`release_earlier`), so a
restart recovers its own turns at once rather than after the expiry.

Times are each process's wall clock: processes sharing a store keep their
clocks in step (NTP) to well under `sessions.lease_s`.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable

import structlog

from bot.storage.db import Database
from bot.storage.sql import Conn

log = structlog.get_logger(__name__)

# How often a turn waiting for another owner's lease tries again, at most.
RETRY_S = 2.0

_CLAIM = (
    "INSERT INTO session_leases (session, instance, run, expires) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (session) DO UPDATE SET instance = excluded.instance, run = excluded.run, "
    "expires = excluded.expires WHERE session_leases.expires < ? OR "
    "(session_leases.instance = excluded.instance AND session_leases.run = excluded.run) "
    "RETURNING session"
)


class Leases:
    """The leases of one run of a process: `claim`, `acquire`, `release`."""

    def __init__(
        self,
        db: Database,
        instance: str,
        lease_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._instance = instance
        self._run = secrets.token_hex(8)
        self._lease_s = lease_s
        self._clock = clock

    async def claim(self, session: str) -> bool:
        """Take or renew the lease of `session` for `sessions.lease_s` from
        now; False (nothing changed) when another owner holds it unexpired.
        Raises what the store raised."""

        def upsert(conn: Conn) -> bool:
            now = self._clock()
            params = (session, self._instance, self._run, now + self._lease_s, now)
            return conn.execute(_CLAIM, params).fetchone() is not None

        return bool(await self._db.run(upsert))

    async def acquire(self, session: str) -> bool:
        """Claim the lease of `session`, waiting while another owner holds it
        (logged once: `sessions.lease_wait`). Returns True when it got the
        lease after another owner held it, who may have added to the session's
        history meanwhile. A claim the store fails is logged
        (`sessions.lease_failed`) and the turn goes ahead (False): the store it
        needs is failing anyway, and no one is kept from their answer."""
        delay = min(RETRY_S, self._lease_s / 4)
        told = False
        while True:
            try:
                if await self.claim(session):
                    return told
            except Exception as exc:
                log.warning("sessions.lease_failed", session=session,
                            error_class=type(exc).__name__, error=str(exc))  # fmt: skip
                return False
            if not told:
                log.info("sessions.lease_wait", session=session)
                told = True
            await asyncio.sleep(delay)

    async def release(self, session: str) -> None:
        """Give up the lease of `session`, when ours. A failure is logged
        (`sessions.lease_failed`), never raised: the lease expires anyway."""

        def delete(conn: Conn) -> None:
            conn.execute(
                "DELETE FROM session_leases WHERE session = ? AND instance = ? AND run = ?",
                (session, self._instance, self._run),
            )

        try:
            await self._db.run(delete)
        except Exception as exc:
            log.warning("sessions.lease_failed", session=session,
                        error_class=type(exc).__name__, error=str(exc))  # fmt: skip

    async def release_earlier(self) -> int:
        """Release the leases earlier runs of this instance left (a crash, a
        kill): call only while holding the instance's lock (bot/app/owner.py),
        which says they are dead. Returns how many. Raises what the store raised."""

        def delete(conn: Conn) -> int:
            return conn.execute(
                "DELETE FROM session_leases WHERE instance = ? AND run <> ?",
                (self._instance, self._run),
            ).rowcount

        return int(await self._db.run(delete))
