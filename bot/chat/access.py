"""Who may talk to the bot in a private chat, and the pairing of new people.

`dm_policy` per platform: `open` answers everyone; `allowlist` answers the ids
in the adapter's `allowlist` and the admins; `pairing` (the default) also
answers the people an admin approved. An unknown person under `pairing` gets a
one-time code of 8 characters, valid for an hour; an admin approves it with
`/pair approve CODE`. At most `MAX_PENDING` codes per platform wait at once
(more would let a stranger flood the admins). Approvals are rows in SQLite and
survive restarts. Until approved, a person's messages reach no model, cost
nothing and are not stored. Group chats are not gated here: membership of the
group is the access control there (and the mention rule, in the router).
The console is the operator's own terminal: always admitted, and an admin.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from bot import prompts
from bot.config.schema import Config, DmPolicy
from bot.storage.db import Database
from bot.types import Inbound

log = structlog.get_logger(__name__)

PAIRING_TTL_S = 3600.0
MAX_PENDING = 3
CODE_LENGTH = 8
# No 0/O or 1/I/L: codes are read aloud and typed on phones.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"


@dataclass(frozen=True)
class Pending:
    """A pairing code waiting for an admin."""

    code: str
    platform: str
    user_id: str
    user_name: str
    chat_id: str
    expires: float


@dataclass(frozen=True)
class Admission:
    """The gate's answer: admitted, or the one line to send instead."""

    admitted: bool
    reply: str = ""


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


class Access:
    """The DM gate and the pairing store."""

    def __init__(self, db: Database, config: Config, clock: Callable[[], float] = time.time):
        self._db = db
        self._config = config
        self._clock = clock
        self._paired: set[tuple[str, str]] | None = None

    def is_admin(self, platform: str, user_id: str) -> bool:
        if platform == "console":
            return True
        admins: tuple[int, ...] = getattr(self._config.admins, platform, ())
        return user_id.isdigit() and int(user_id) in admins

    def _policy(self, platform: str) -> tuple[DmPolicy, tuple[int, ...]]:
        adapter = getattr(self._config.adapters, platform, None)
        if adapter is None or not hasattr(adapter, "dm_policy"):
            return "open", ()
        return adapter.dm_policy, adapter.allowlist

    async def _is_paired(self, platform: str, user_id: str) -> bool:
        if self._paired is None:
            rows = await self._db.run(
                lambda conn: conn.execute("SELECT platform, user_id FROM paired_users").fetchall()
            )
            self._paired = {(p, u) for p, u in rows}
        return (platform, user_id) in self._paired

    async def admit(self, inbound: Inbound) -> Admission:
        """Whether a private message may go on; for a stranger under `pairing`,
        the reply carries their code (or why there is none)."""
        policy, allowlist = self._policy(inbound.platform)
        user = inbound.user_id
        if (
            policy == "open"
            or self.is_admin(inbound.platform, user)
            or (user.isdigit() and int(user) in allowlist)
        ):
            return Admission(True)
        if policy == "allowlist":
            log.info("access.refused", platform=inbound.platform, user_id=user, policy=policy)
            return Admission(False, prompts.ALLOWLIST_ONLY)
        if await self._is_paired(inbound.platform, user):
            return Admission(True)
        return Admission(False, await self._request(inbound))

    async def _request(self, inbound: Inbound) -> str:
        now = self._clock()

        def issue(conn: sqlite3.Connection) -> tuple[str | None, bool]:
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("DELETE FROM pairing_codes WHERE expires <= ?", (now,))
                row = conn.execute(
                    "SELECT code FROM pairing_codes WHERE platform = ? AND user_id = ?",
                    (inbound.platform, inbound.user_id),
                ).fetchone()
                if row is not None:
                    return row[0], False
                (waiting,) = conn.execute(
                    "SELECT COUNT(*) FROM pairing_codes WHERE platform = ?", (inbound.platform,)
                ).fetchone()
                if waiting >= MAX_PENDING:
                    return None, False
                code = new_code()
                conn.execute(
                    "INSERT INTO pairing_codes (code, platform, user_id, user_name, chat_id,"
                    " expires) VALUES (?, ?, ?, ?, ?, ?)",
                    (code, inbound.platform, inbound.user_id, inbound.user_name[:80],
                     inbound.chat_id, now + PAIRING_TTL_S),
                )  # fmt: skip
                return code, True

        code, fresh = await self._db.run(issue)
        if code is None:
            log.info("pairing.busy", platform=inbound.platform, user_id=inbound.user_id)
            return prompts.PAIRING_BUSY
        if fresh:
            log.info("pairing.requested", platform=inbound.platform, user_id=inbound.user_id)
        return prompts.PAIRING_CODE.format(code=code)

    async def approve(self, code: str, by: str) -> Pending | None:
        """Approve the person holding `code` (any case); None when no such code
        is waiting (wrong, used or expired)."""
        now, wanted = self._clock(), code.strip().upper()

        def take(conn: sqlite3.Connection) -> Pending | None:
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                row = conn.execute(
                    "SELECT code, platform, user_id, user_name, chat_id, expires"
                    " FROM pairing_codes WHERE code = ? AND expires > ?",
                    (wanted, now),
                ).fetchone()
                if row is None:
                    return None
                pending = Pending(*row)
                conn.execute("DELETE FROM pairing_codes WHERE code = ?", (wanted,))
                conn.execute(
                    "INSERT OR REPLACE INTO paired_users (platform, user_id, approved_at,"
                    " approved_by) VALUES (?, ?, ?, ?)",
                    (pending.platform, pending.user_id, now, by),
                )
                return pending

        pending = await self._db.run(take)
        if pending is not None:
            if self._paired is not None:
                self._paired.add((pending.platform, pending.user_id))
            log.info("pairing.approved", platform=pending.platform, user_id=pending.user_id, by=by)
        return pending

    async def pending(self) -> list[Pending]:
        """The codes still waiting, oldest first."""
        now = self._clock()
        rows = await self._db.run(
            lambda conn: conn.execute(
                "SELECT code, platform, user_id, user_name, chat_id, expires FROM pairing_codes"
                " WHERE expires > ? ORDER BY expires",
                (now,),
            ).fetchall()
        )
        return [Pending(*row) for row in rows]
