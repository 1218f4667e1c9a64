"""Who may talk to the bot in a private chat, and the pairing of new people.

`dm_policy` per platform: `open` answers everyone; `allowlist` answers the ids
in the adapter's `allowlist` and the admins; `pairing` (the default) also
answers the people an admin approved. An unknown person under `pairing` gets a
one-time code of 8 characters, valid for an hour (asking again gives the same
code); an admin approves it with `/pair approve CODE` or drops it with
`/pair deny CODE`, and takes an approval back with `/pair revoke`. At most
`MAX_PENDING` codes per platform wait at once; a new one then drops the oldest,
so strangers can fill the list but never close it. Approvals are rows in SQLite
and survive restarts; the approved set is cached, and a revoke takes effect at
once. Until approved, a person's messages reach no model, cost nothing and are
not stored. Group chats are not gated here: membership of the group is the
access control there (and the mention rule, in the router).
The console is the operator's own terminal: always admitted, and an admin.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from bot import prompts
from bot.config.schema import Config, DmPolicy
from bot.storage.db import Database
from bot.storage.sql import Conn
from bot.types import Inbound

log = structlog.get_logger(__name__)

PAIRING_TTL_S = 3600.0
# A person holds one code an hour, so dropping someone's code within its hour takes
# more than MAX_PENDING other accounts; a hundred lines is still a list an admin reads.
MAX_PENDING = 100
# The advisory lock of the pairing codes' table on a store processes share.
LOCK = "soulbot.pairing"
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
class Approval:
    """A person an admin approved: who, when (epoch seconds), by whom (`platform:id`)."""

    platform: str
    user_id: str
    approved_at: float
    approved_by: str


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
        self._paired: set[tuple[str, str]] | None = None  # (platform, user id), once loaded

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

    def configured(self, platform: str, user_id: str) -> bool:
        """Whether the config alone lets this person in: `dm_policy: open`, an
        admin, or an id in the allowlist (no approval needed, none revocable)."""
        policy, allowlist = self._policy(platform)
        return (
            policy == "open"
            or self.is_admin(platform, user_id)
            or (user_id.isdigit() and int(user_id) in allowlist)
        )

    async def _is_paired(self, platform: str, user_id: str) -> bool:
        if self._db.shared:  # another process may approve or revoke: ask the table
            row = await self._db.run(
                lambda conn: conn.execute(
                    "SELECT 1 FROM paired_users WHERE platform = ? AND user_id = ?",
                    (platform, user_id),
                ).fetchone()
            )
            return row is not None
        if self._paired is None:
            rows = await self._db.run(
                lambda conn: conn.execute("SELECT platform, user_id FROM paired_users").fetchall()
            )
            self._paired = {(p, u) for p, u in rows}
        return (platform, user_id) in self._paired

    async def admit(self, inbound: Inbound) -> Admission:
        """Whether a private message may go on; for a stranger under `pairing`,
        the reply carries their code."""
        user = inbound.user_id
        if self.configured(inbound.platform, user):
            return Admission(True)
        policy, _ = self._policy(inbound.platform)
        if policy == "allowlist":
            log.info("access.refused", platform=inbound.platform, user_id=user, policy=policy)
            return Admission(False, prompts.ALLOWLIST_ONLY)
        if await self._is_paired(inbound.platform, user):
            return Admission(True)
        return Admission(False, await self._request(inbound))

    async def _request(self, inbound: Inbound) -> str:
        now = self._clock()

        def issue(conn: Conn) -> tuple[str, bool, list[str]]:
            with conn.transaction(lock=LOCK):
                conn.execute("DELETE FROM pairing_codes WHERE expires <= ?", (now,))
                row = conn.execute(
                    "SELECT code FROM pairing_codes WHERE platform = ? AND user_id = ?",
                    (inbound.platform, inbound.user_id),
                ).fetchone()
                if row is not None:
                    return row[0], False, []
                oldest = conn.execute(
                    "SELECT code, user_id FROM pairing_codes WHERE platform = ?"
                    " ORDER BY expires DESC, code DESC",
                    (inbound.platform,),
                ).fetchall()[MAX_PENDING - 1 :]
                conn.executemany(
                    "DELETE FROM pairing_codes WHERE code = ?", [(c,) for c, _ in oldest]
                )
                code = new_code()
                conn.execute(
                    "INSERT INTO pairing_codes (code, platform, user_id, user_name, chat_id,"
                    " expires) VALUES (?, ?, ?, ?, ?, ?)",
                    (code, inbound.platform, inbound.user_id, inbound.user_name[:80],
                     inbound.chat_id, now + PAIRING_TTL_S),
                )  # fmt: skip
                return code, True, [user for _, user in oldest]

        code, fresh, dropped = await self._db.run(issue)
        for user in dropped:
            log.info("pairing.dropped", platform=inbound.platform, user_id=user,
                     reason="the pool of waiting codes is full")  # fmt: skip
        if fresh:
            log.info("pairing.requested", platform=inbound.platform, user_id=inbound.user_id)
        return prompts.PAIRING_CODE.format(code=code)

    async def approve(self, code: str, by: str) -> Pending | None:
        """Approve the person holding `code` (any case); None when no such code
        is waiting (wrong, used or expired). `by` is the admin (`platform:id`)."""
        pending = await self._take(code, approved_by=by)
        if pending is not None:
            log.info("pairing.approved", platform=pending.platform, user_id=pending.user_id, by=by)
        return pending

    async def deny(self, code: str, by: str) -> Pending | None:
        """Drop the waiting `code` (any case) unapproved; None when no such code
        is waiting. Its holder gets a new code if they write again."""
        pending = await self._take(code, approved_by=None)
        if pending is not None:
            log.info("pairing.denied", platform=pending.platform, user_id=pending.user_id, by=by)
        return pending

    async def _take(self, code: str, approved_by: str | None) -> Pending | None:
        """Remove the waiting `code` and, with `approved_by`, approve its holder."""
        now, wanted = self._clock(), code.strip().upper()

        def take(conn: Conn) -> Pending | None:
            with conn.transaction(lock=LOCK):
                row = conn.execute(
                    "SELECT code, platform, user_id, user_name, chat_id, expires"
                    " FROM pairing_codes WHERE code = ? AND expires > ?",
                    (wanted, now),
                ).fetchone()
                if row is None:
                    return None
                pending = Pending(*row)
                conn.execute("DELETE FROM pairing_codes WHERE code = ?", (wanted,))
                if approved_by is not None:
                    conn.execute(
                        "INSERT INTO paired_users (platform, user_id, approved_at, approved_by)"
                        " VALUES (?, ?, ?, ?) ON CONFLICT (platform, user_id) DO UPDATE SET"
                        " approved_at = excluded.approved_at, approved_by = excluded.approved_by",
                        (pending.platform, pending.user_id, now, approved_by),
                    )
                return pending

        pending = await self._db.run(take)
        if pending is not None and approved_by is not None:
            self._approvals_changed()
        return pending

    async def revoke(self, platform: str, user_id: str, by: str) -> bool:
        """Take back the approval of `platform:user_id`: their next private
        message gets a pairing code again. False when they were not approved."""
        removed: int = await self._db.run(
            lambda conn: (
                conn.execute(
                    "DELETE FROM paired_users WHERE platform = ? AND user_id = ?",
                    (platform, user_id),
                ).rowcount
            )
        )
        if removed:
            self._approvals_changed()
            log.info("pairing.revoked", platform=platform, user_id=user_id, by=by)
        return bool(removed)

    def _approvals_changed(self) -> None:
        """Drop the cached approved set: the next check reads the table again. The
        database runs calls in order, so a load begun before the change has
        already been cached when this drops it."""
        self._paired = None

    async def approved(self) -> list[Approval]:
        """The people approved by pairing, oldest approval first."""
        rows = await self._db.run(
            lambda conn: conn.execute(
                "SELECT platform, user_id, approved_at, approved_by FROM paired_users"
                " ORDER BY approved_at, platform, user_id"
            ).fetchall()
        )
        return [Approval(*row) for row in rows]

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
