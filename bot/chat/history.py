"""A session's conversation history in SQLite: it survives a restart.

Rows of the current generation of a session key, in order: user messages,
assistant replies (each names the last user row it answers, `reply_to`), and at
most one live summary of compacted rows. `reset` starts a new generation.

A reply is written twice: stored (`append`, `delivered` 0: the model's answer is
kept, whatever happens to the send), then delivered (`delivered`, set to 1 once
the platform took it, with the ids of its messages). A reply stored and not
delivered is one a crash or a failed send kept from the person: `unanswered`
counts its message as unanswered, and the session's recovery sends the stored
text (bot/chat/sessions.py), with no new model call. Rows from before schema 7
count as delivered.

A session's binding is the soul and memory scope its current generation was
said under (`session_bindings`): a conversation under another one is a new
generation (bot/chat/sessions.py), so no soul or scope is shown, or reflects
on, what was said to another.

A session's mood (`session_moods`: the soul's mood it moved to with `set_mood`,
bot/chat/moods.py) belongs to its current generation too: `reset` drops it (the
conversation is back in the soul's `defaultMood`), `erase` deletes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from bot.storage.db import Database
from bot.storage.sql import Conn

Role = Literal["user", "assistant"]
# The soul and the memory scope a session's history was said under.
Binding = tuple[str, str]

# A delivered id is kept this long for dedupe (a platform redelivers within hours:
# Telegram keeps an unconfirmed update for 24 h), then pruned.
SEEN_WINDOW_S = 7 * 24 * 3600.0
# The bot's own message ids are kept this long, so a reply to one of them is known
# (and quoted) when the platform does not say whose it was.
SENT_WINDOW_S = 90 * 24 * 3600.0
# The text kept of each: a quote is cut there anyway.
SENT_TEXT_CHARS = 500
# Every this many delivered ids, the transaction that records one also prunes
# the ids past the window (the first one after a start does too).
PRUNE_EVERY = 1000
# The condition of the partial index history_live (bot/storage/db.py): a query
# that names it reads only live rows, never the compacted ones behind them.
LIVE = "kind IN ('message', 'summary')"
# The condition of the partial index history_recent: a person's messages, by time.
RECENT = "kind = 'message' AND role = 'user'"
_COLUMNS = "id, role, kind, content, tokens, reply_to, ts, delivered"  # what a load reads of a row


@dataclass(frozen=True)
class Entry:
    """One history row. `reply_to` (assistant rows) is the last user row
    answered; `delivered` (assistant rows) whether the reply was sent."""

    id: int
    role: Role
    text: str
    tokens: int
    reply_to: int | None = None
    ts: float = 0.0
    delivered: bool = True

    @property
    def order(self) -> tuple[int, int]:
        """Sort key: a reply sits right after the last message it answers."""
        return (self.reply_to, 1) if self.reply_to is not None else (self.id, 0)


@dataclass(frozen=True)
class Snapshot:
    """What a session starts from: its generation, summary and live rows, and
    the binding they were said under (None: not recorded, by an earlier version)."""

    generation: int
    summary: str | None
    entries: list[Entry]
    binding: Binding | None = None
    mood: str | None = None
    """The mood it moved to under its binding's soul (None: the soul's default)."""


def count_tokens(text: str) -> int:
    """The estimate used for history budgets (characters / 4, at least 1)."""
    return max(1, len(text) // 4)


def _mark_seen(conn: Conn, session: str, message_id: str, ts: float, prune: bool) -> bool:
    """Record a delivered message id (call in a transaction); False when it
    was recorded before. With `prune`, the ids past their window go first."""
    if prune:
        conn.execute("DELETE FROM seen_messages WHERE ts < ?", (ts - SEEN_WINDOW_S,))
        conn.execute("DELETE FROM sent_messages WHERE ts < ?", (ts - SENT_WINDOW_S,))
    cursor = conn.execute(
        "INSERT INTO seen_messages (session, message_id, ts) VALUES (?, ?, ?) "
        "ON CONFLICT DO NOTHING",
        (session, message_id, ts),
    )
    return cursor.rowcount == 1


def _append_in_one(
    conn: Conn,
    session: str,
    generation: int,
    text: str,
    tokens: int,
    ts: float,
    message_id: str,
    address: str,
) -> int | None:
    """`HistoryStore.append_message`'s writes as one PostgreSQL statement
    (atomic, one round trip where a transaction takes five): the delivered id,
    then the row and the reply address only when the id is new. The row's id,
    or None for an id delivered before."""
    parts: list[str] = []
    params: list[object] = []
    source = "VALUES (?, ?, 'user', 'message', ?, ?, NULL, ?)"
    if message_id:
        parts.append(
            "seen AS (INSERT INTO seen_messages (session, message_id, ts) VALUES (?, ?, ?) "
            "ON CONFLICT DO NOTHING RETURNING 1)"
        )
        params += [session, message_id, ts]
        source = "SELECT ?, ?, 'user', 'message', ?, ?, NULL, ? FROM seen"
    parts.append(
        "entry AS (INSERT INTO history (session, generation, role, kind, content, tokens, "
        f"reply_to, ts) {source} RETURNING id)"
    )
    params += [session, generation, text, tokens, ts]
    if address:
        parts.append(
            "address AS (INSERT INTO reply_addresses (session, inbound) SELECT ?, ? FROM entry "
            "ON CONFLICT (session) DO UPDATE SET inbound = excluded.inbound)"
        )
        params += [session, address]
    row = conn.execute(f"WITH {', '.join(parts)} SELECT id FROM entry", params).fetchone()
    return None if row is None else int(row[0])


def _bind(conn: Conn, session: str, binding: Binding) -> None:
    conn.execute(
        "INSERT INTO session_bindings (session, soul, scope) VALUES (?, ?, ?) "
        "ON CONFLICT (session) DO UPDATE SET soul = excluded.soul, scope = excluded.scope",
        (session, *binding),
    )


def read_mood(conn: Conn, session: str, soul: str) -> str | None:
    """The mood `session` moved to under `soul` (`session_moods`), or None."""
    row = conn.execute(
        "SELECT mood FROM session_moods WHERE session = ? AND soul = ?", (session, soul)
    ).fetchone()
    return None if row is None else str(row[0])


class HistoryStore:
    """History rows and delivered message ids (kept for `SEEN_WINDOW_S`), on
    the shared database."""

    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock
        self._until_prune = 0

    def _prune_due(self) -> bool:
        """Whether the id recorded now prunes the old ones (every `PRUNE_EVERY`)."""
        if self._until_prune > 0:
            self._until_prune -= 1
            return False
        self._until_prune = PRUNE_EVERY - 1
        return True

    async def load(self, session: str) -> Snapshot:
        def query(conn: Conn) -> Snapshot:
            # One statement: the generation (0 for a session never reset), the
            # binding and the mood chosen under its soul, joined with its live
            # rows; a session with none gives one row of NULLs.
            found = conn.execute(
                f"SELECT s.generation, b.soul, b.scope, m.mood, {_COLUMNS} FROM (SELECT "
                "COALESCE(MAX(generation), 0) AS generation FROM sessions WHERE session = ?) "
                "AS s LEFT JOIN session_bindings AS b ON b.session = ? "
                "LEFT JOIN (SELECT soul AS mood_soul, mood FROM session_moods "
                "WHERE session = ?) AS m ON m.mood_soul = b.soul "
                f"LEFT JOIN (SELECT {_COLUMNS}, generation FROM history WHERE session = ? "
                f"AND {LIVE}) AS h ON h.generation = s.generation ORDER BY id",
                (session, session, session, session),
            ).fetchall()
            rows = [r[4:] for r in found if r[4] is not None]
            summary = next((r[3] for r in reversed(rows) if r[2] == "summary"), None)
            entries = [Entry(r[0], r[1], r[3], r[4], r[5], r[6], bool(r[7]))
                       for r in rows if r[2] == "message"]  # fmt: skip
            entries.sort(key=lambda e: e.order)
            soul, scope, mood = found[0][1:4]
            binding = None if soul is None else (str(soul), str(scope))
            chosen = None if mood is None else str(mood)
            return Snapshot(int(found[0][0]), summary, entries, binding, chosen)

        return await self._db.run(query)

    async def append(
        self,
        session: str,
        generation: int,
        role: Role,
        text: str,
        reply_to: int | None = None,
        delivered: bool = True,
    ) -> Entry:
        """Store a row (a reply not sent yet: `delivered` False)."""
        tokens = count_tokens(text)
        ts = self._clock()

        def insert(conn: Conn) -> int:
            cursor = conn.execute(
                "INSERT INTO history (session, generation, role, kind, content, tokens, "
                "reply_to, ts, delivered) VALUES (?, ?, ?, 'message', ?, ?, ?, ?, ?) RETURNING id",
                (session, generation, role, text, tokens, reply_to, ts, int(delivered)),
            )
            return int(cursor.fetchone()[0])

        return Entry(await self._db.run(insert), role, text, tokens, reply_to, ts, delivered)

    async def append_message(
        self, session: str, generation: int, text: str, message_id: str, address: str = ""
    ) -> Entry | None:
        """Store a user message, unless its platform message id (when not empty)
        was delivered to `session` before: then None. `address` (the message as
        JSON, without its text) is kept as the session's reply address, for a
        restart. One round trip to the database for all of it."""
        tokens = count_tokens(text)
        ts = self._clock()
        prune = bool(message_id) and self._prune_due()

        def insert(conn: Conn) -> int | None:
            if conn.engine == "postgresql" and not prune:  # a prune goes in a transaction
                return _append_in_one(
                    conn, session, generation, text, tokens, ts, message_id, address
                )
            with conn.transaction():
                if message_id and not _mark_seen(conn, session, message_id, ts, prune):
                    return None
                cursor = conn.execute(
                    "INSERT INTO history (session, generation, role, kind, content, tokens, "
                    "reply_to, ts) VALUES (?, ?, 'user', 'message', ?, ?, NULL, ?) RETURNING id",
                    (session, generation, text, tokens, ts),
                )
                row_id = int(cursor.fetchone()[0])
                if address:
                    conn.execute(
                        "INSERT INTO reply_addresses (session, inbound) VALUES (?, ?) "
                        "ON CONFLICT (session) DO UPDATE SET inbound = excluded.inbound",
                        (session, address),
                    )
                return row_id

        row = await self._db.run(insert)
        return None if row is None else Entry(row, "user", text, tokens, None, ts)

    async def unanswered(self, since: float) -> list[tuple[str, str]]:
        """(session, reply address) of every session whose newest message (of
        its current generation) is a person's, stored at `since` or later, that
        no delivered reply answers: what a crash or a kill left unanswered (a
        reply stored and not sent included). One statement, which reads only
        the rows stored since `since` (the index history_recent) and, for each
        of their sessions, a few rows by the index history_session: the time it
        takes follows the recent traffic, not every session ever."""

        def query(conn: Conn) -> list[tuple[str, str]]:
            rows = conn.execute(
                # MATERIALIZED: the recent rows first, by their index (SQLite would
                # rather walk every session's rows in history_session's order).
                "WITH rows AS MATERIALIZED (SELECT session, generation, id FROM history "
                f"WHERE {RECENT} AND ts >= ?), "
                "recent AS (SELECT session, generation, max(id) AS last FROM rows "
                "GROUP BY session, generation) "
                "SELECT a.session, a.inbound FROM recent r "
                "JOIN reply_addresses a ON a.session = r.session "
                "LEFT JOIN sessions s ON s.session = r.session "
                "WHERE r.generation = COALESCE(s.generation, 0) "
                "AND NOT EXISTS (SELECT 1 FROM history h WHERE h.session = r.session AND "
                "h.generation = r.generation AND h.id > r.last AND h.kind = 'message' AND "
                "h.role = 'user') "  # a newer message stored before `since` (a clock set back)
                "AND NOT EXISTS (SELECT 1 FROM history h WHERE h.session = r.session AND "
                "h.generation = r.generation AND h.id > r.last AND h.role = 'assistant' AND "
                "h.reply_to >= r.last AND h.delivered = 1) "  # stored after what it answers
                "ORDER BY a.session",
                (since,),
            ).fetchall()
            return [(str(session), str(address)) for session, address in rows]

        return await self._db.run(query)

    async def compact(
        self, session: str, generation: int, entry_ids: list[int], summary: str
    ) -> None:
        """Mark `entry_ids` compacted and make `summary` the live summary, at once."""
        ts = self._clock()

        def update(conn: Conn) -> None:
            with conn.transaction():
                conn.executemany(
                    "UPDATE history SET kind = 'compacted' WHERE id = ?",
                    [(i,) for i in entry_ids],
                )
                conn.execute(
                    "UPDATE history SET kind = 'old_summary' "
                    f"WHERE session = ? AND generation = ? AND {LIVE} AND kind = 'summary'",
                    (session, generation),
                )
                conn.execute(
                    "INSERT INTO history (session, generation, role, kind, content, tokens, ts) "
                    "VALUES (?, ?, 'user', 'summary', ?, ?, ?)",
                    (session, generation, summary, count_tokens(summary), ts),
                )

        await self._db.run(update)

    async def reset(self, session: str, binding: Binding | None = None) -> int:
        """Start a new, empty history for `session` (said under `binding`, when
        given); returns its generation."""

        def bump(conn: Conn) -> int:
            with conn.transaction():
                conn.execute(
                    "INSERT INTO sessions (session, generation) VALUES (?, 1) "
                    "ON CONFLICT (session) DO UPDATE SET generation = sessions.generation + 1",
                    (session,),
                )
                if binding is not None:
                    _bind(conn, session, binding)
                conn.execute("DELETE FROM session_moods WHERE session = ?", (session,))
                row = conn.execute(
                    "SELECT generation FROM sessions WHERE session = ?", (session,)
                ).fetchone()
                return int(row[0])

        return await self._db.run(bump)

    async def bind(self, session: str, binding: Binding) -> None:
        """Record the binding `session`'s history is said under."""
        await self._db.run(lambda conn: _bind(conn, session, binding))

    async def erase(self, sessions: list[str]) -> None:
        """Delete every history row and delivered id of `sessions` (all generations)."""

        def delete(conn: Conn) -> None:
            with conn.transaction():
                for table in ("history", "seen_messages", "sessions", "session_bindings",
                              "reply_addresses", "sent_messages", "session_moods"):  # fmt: skip
                    conn.executemany(
                        f"DELETE FROM {table} WHERE session = ?", [(s,) for s in sessions]
                    )

        await self._db.run(delete)

    async def set_mood(self, session: str, soul: str, mood: str | None) -> None:
        """Keep the mood `session` moved to under `soul`; None: back to the
        soul's default (the row goes)."""
        ts = self._clock()

        def write(conn: Conn) -> None:
            if mood is None:
                conn.execute("DELETE FROM session_moods WHERE session = ?", (session,))
                return
            conn.execute(
                "INSERT INTO session_moods (session, soul, mood, ts) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (session) DO UPDATE SET soul = excluded.soul, "
                "mood = excluded.mood, ts = excluded.ts",
                (session, soul, mood, ts),
            )

        await self._db.run(write)

    async def mood(self, session: str, soul: str) -> str | None:
        """The mood `session` moved to under `soul`, or None (the default)."""
        return await self._db.run(lambda conn: read_mood(conn, session, soul))

    async def record_sent(self, session: str, message_ids: list[str], text: str) -> None:
        """Keep the platform ids of a reply's messages, with its text (cut to
        SENT_TEXT_CHARS), for `SENT_WINDOW_S`."""
        if not message_ids:
            return
        insert = self._sent_rows(session, message_ids, text)
        await self._db.run(insert)

    async def delivered(
        self, session: str, entry_id: int, message_ids: list[str], text: str
    ) -> None:
        """Mark reply row `entry_id` delivered and keep its messages' platform
        ids (as `record_sent`), in one transaction."""
        insert = self._sent_rows(session, message_ids, text)

        def update(conn: Conn) -> None:
            with conn.transaction():
                conn.execute("UPDATE history SET delivered = 1 WHERE id = ?", (entry_id,))
                insert(conn)

        await self._db.run(update)

    def _sent_rows(self, session: str, message_ids: list[str], text: str) -> Callable[[Conn], None]:
        """The write of `record_sent` (nothing for no ids)."""
        ts, cut = self._clock(), text[:SENT_TEXT_CHARS]
        ids = list(dict.fromkeys(message_ids))  # one statement may not upsert a row twice

        def insert(conn: Conn) -> None:
            if not ids:
                return
            conn.execute(  # one statement: atomic without a transaction
                "INSERT INTO sent_messages (session, message_id, text, ts) VALUES "
                + ", ".join(["(?, ?, ?, ?)"] * len(ids))
                + " ON CONFLICT (session, message_id) DO UPDATE SET text = excluded.text, "
                "ts = excluded.ts",
                [value for message_id in ids for value in (session, message_id, cut, ts)],
            )

        return insert

    async def sent_text(self, session: str, message_id: str) -> str | None:
        """The text of the bot's reply that was sent as `message_id` in
        `session`, or None when it is not one of the bot's (or too old)."""

        def query(conn: Conn) -> str | None:
            row = conn.execute(
                "SELECT text FROM sent_messages WHERE session = ? AND message_id = ?",
                (session, message_id),
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._db.run(query)

    async def reply_ids(self, session: str, text: str, since: float) -> list[str]:
        """The platform ids of the bot's messages in `session` that hold the
        reply `text` (as `delivered` kept them), recorded at `since` or later,
        oldest first: the messages of the reply stored at `since`."""
        cut = text[:SENT_TEXT_CHARS]

        def query(conn: Conn) -> list[str]:
            rows = conn.execute(
                "SELECT message_id FROM sent_messages WHERE session = ? AND text = ? AND ts >= ?",
                (session, cut, since),
            ).fetchall()
            return sorted((str(r[0]) for r in rows), key=lambda i: (len(i), i))  # ids grow

        return await self._db.run(query)

    async def reply_address(self, session: str) -> tuple[str, float | None] | None:
        """The address of the newest message stored in `session` (the one its
        last turn replied to) and when its row was stored (None when that is
        not known: a message without a platform id), or None for no address."""

        def query(conn: Conn) -> tuple[str, float | None] | None:
            row = conn.execute(
                "SELECT inbound FROM reply_addresses WHERE session = ?", (session,)
            ).fetchone()
            if row is None:
                return None
            message_id = json.loads(row[0]).get("message_id") or ""
            seen = conn.execute(
                "SELECT ts FROM seen_messages WHERE session = ? AND message_id = ?",
                (session, message_id),
            ).fetchone()
            return str(row[0]), None if seen is None else float(seen[0])

        return await self._db.run(query)

    async def take_back(self, session: str, entry_ids: list[int], message_ids: list[str]) -> None:
        """Delete the history rows `entry_ids` of `session` and the sent ids
        `message_ids` of its replies, in one transaction (`/retry`, `/undo`)."""

        def delete(conn: Conn) -> None:
            with conn.transaction():
                conn.executemany(
                    "DELETE FROM history WHERE session = ? AND id = ?",
                    [(session, i) for i in entry_ids],
                )
                conn.executemany(
                    "DELETE FROM sent_messages WHERE session = ? AND message_id = ?",
                    [(session, m) for m in message_ids],
                )

        await self._db.run(delete)

    async def update_text(self, entry_id: int, text: str) -> None:
        """Replace the text of a history row (an image's placeholder, once
        the model has said what it showed)."""

        def update(conn: Conn) -> None:
            with conn.transaction():
                conn.execute(
                    "UPDATE history SET content = ?, tokens = ? WHERE id = ?",
                    (text, count_tokens(text), entry_id),
                )

        await self._db.run(update)

    async def first_delivery(self, session: str, message_id: str) -> bool:
        """Record a platform message id; False when it was delivered before."""
        ts, prune = self._clock(), self._prune_due()

        def insert(conn: Conn) -> bool:
            with conn.transaction():
                return _mark_seen(conn, session, message_id, ts, prune)

        return await self._db.run(insert)
