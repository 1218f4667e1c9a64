"""Who gets into the web console (bot/web/): one-time sign-in links, then sessions.
It lives beside the pairing (access.py): `/soul web` gives an admin a link in a DM.

A link's token and a session's token are 32 random bytes (URL-safe text); the
store keeps only their SHA-256 (`web_tokens`: hash, kind `link` or `session`,
the admin it was given to, the session's CSRF token, expiry), so a copy of the
store opens nothing. A link is taken in the transaction that makes its session
(a `DELETE ... RETURNING`): a second use finds no row, on either engine, from
any process (`soulbot web-login` writes the row; the daemon takes it). Expired
rows go whenever a link is issued. Tokens are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from bot.config.schema import WebConfig
from bot.storage.db import Database
from bot.storage.sql import Conn

LINK, SESSION = "link", "session"
COOKIE = "soulbot_session"


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Session:
    """A signed-in admin (`platform:id`, or `cli` for `soulbot web-login`)."""

    admin: str
    csrf: str

    def csrf_ok(self, given: str | None) -> bool:
        """Whether `given` is this session's CSRF token (compared in constant time)."""
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())


class WebAuth:
    """Links and sessions in the store."""

    def __init__(self, db: Database, config: WebConfig, clock: Callable[[], float] = time.time):
        self._db = db
        self._config = config
        self._clock = clock

    @property
    def enabled(self) -> bool:
        return self._config.enabled

    @property
    def link_minutes(self) -> float:
        return self._config.link_minutes

    async def issue_link(self, admin: str) -> str:
        """A new one-time sign-in address for `admin`, valid `link_minutes`."""
        token, now = secrets.token_urlsafe(32), self._clock()
        expires = now + self._config.link_minutes * 60

        def issue(conn: Conn) -> None:
            with conn.transaction():
                conn.execute("DELETE FROM web_tokens WHERE expires <= ?", (now,))
                conn.execute(
                    "INSERT INTO web_tokens (hash, kind, admin, csrf, expires)"
                    " VALUES (?, ?, ?, '', ?)",
                    (_hash(token), LINK, admin, expires),
                )

        await self._db.run(issue)
        return f"{self._config.base_url()}/login/{token}"

    async def sign_in(self, token: str) -> tuple[str, Session] | None:
        """Take the link `token` and open a session: (its cookie value, the session);
        None when no such link is waiting (wrong, used or expired)."""
        now = self._clock()
        cookie, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        expires = now + self._config.session_hours * 3600

        def take(conn: Conn) -> str | None:
            with conn.transaction():
                row = conn.execute(
                    "DELETE FROM web_tokens WHERE hash = ? AND kind = ? RETURNING admin, expires",
                    (_hash(token), LINK),
                ).fetchone()
                if row is None or row[1] <= now:
                    return None
                conn.execute(
                    "INSERT INTO web_tokens (hash, kind, admin, csrf, expires)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (_hash(cookie), SESSION, row[0], csrf, expires),
                )
                return str(row[0])

        admin = await self._db.run(take)
        return None if admin is None else (cookie, Session(admin, csrf))

    async def session(self, cookie: str | None) -> Session | None:
        """The live session of the cookie's value; None without one."""
        if not cookie:
            return None
        now = self._clock()
        row = await self._db.run(
            lambda conn: conn.execute(
                "SELECT admin, csrf FROM web_tokens WHERE hash = ? AND kind = ? AND expires > ?",
                (_hash(cookie), SESSION, now),
            ).fetchone()
        )
        return None if row is None else Session(row[0], row[1])

    async def sign_out(self, cookie: str) -> None:
        """End the session of the cookie's value."""
        await self._db.run(
            lambda conn: conn.execute(
                "DELETE FROM web_tokens WHERE hash = ? AND kind = ?", (_hash(cookie), SESSION)
            )
        )
