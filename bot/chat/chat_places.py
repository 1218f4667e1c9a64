"""What kind of place each `chat:` memory scope is, for the web console.

A `chat:` scope is a group's (a Telegram group, a Discord channel: its members
read it all) or a Discord private thread's (only the people in it): the scope's
key has the same form for both (bot/chat/places.py), so the router notes which
it is the first time a process hears from it (`note`), in the store's
`chat_places` table. The console shows a group's wiki and only counts a private
one (docs/web.md). Once private, a scope stays private; a scope never noted
(its words came before this table did) is not known to be a group, and counts
as private.
"""

from __future__ import annotations

import structlog

from bot.storage.db import Database
from bot.storage.sql import Conn

log = structlog.get_logger(__name__)


class ChatPlaces:
    """The `chat_places` table: which `chat:` scopes are groups."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._noted: set[str] = set()  # noted by this process already

    async def note(self, scope: str, private: bool) -> None:
        """Record that `scope` (a `chat:` scope) is a group's or a private
        thread's, once per process; never raises (a failure is logged, and the
        scope stays as it was: not shown when not known to be a group)."""
        if not scope.startswith("chat:") or scope in self._noted:
            return

        def upsert(conn: Conn) -> None:
            conn.execute(
                "INSERT INTO chat_places (scope, private) VALUES (?, ?) ON CONFLICT (scope) "
                "DO UPDATE SET private = excluded.private WHERE excluded.private = 1",
                (scope, int(private)),
            )

        try:
            await self._db.run(upsert)
        except Exception as exc:
            log.warning("chat_places.note_failed", scope=scope, error_class=type(exc).__name__)
            return
        self._noted.add(scope)

    async def groups(self) -> set[str]:
        """The `chat:` scopes known to be groups' (never a private thread's)."""

        def query(conn: Conn) -> set[str]:
            rows = conn.execute("SELECT scope FROM chat_places WHERE private = 0").fetchall()
            return {str(row[0]) for row in rows}

        return await self._db.run(query)
