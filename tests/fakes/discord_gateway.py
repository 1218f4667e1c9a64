"""The gateway of the Discord fake (tests/fakes/discord_fake.py): its websocket at
``/gateway``, sessions, RESUMEs, intents and shards (the connection and session
types are in tests/fakes/discord_sessions.py).

Gateway (plain TEXT frames; discord.py asks for zlib-stream but inflates only binary
frames): HELLO on connect (``heartbeat_interval_ms``); op 1 → op 11 (unless
``answer_heartbeats(False)`` for its shard; each counted in ``heartbeats``); IDENTIFY
(op 2) with the right token → READY (all its guilds unavailable) then one GUILD_CREATE
per guild (``"unavailable": false``), then the events pushed before a session held
them; a wrong token → close 4004; the message content intent asked for while
``application_flags`` has neither GATEWAY_MESSAGE_CONTENT flag → close 4014, as on
Discord. RESUME (op 6) of a live session → the events after the client's ``seq``, then
RESUMED; any other session → op 9 (``d: false``), and discord.py IDENTIFYs afresh.
op 8 → one GUILD_MEMBERS_CHUNK. Events pushed while a session's connection is down
are kept and replayed on RESUME; a fresh IDENTIFY starts a new session and old events
are lost, as on Discord. Intents are honoured: no MESSAGE_CREATE without
GUILD_MESSAGES (guilds) or DIRECT_MESSAGES (DMs), and without MESSAGE_CONTENT a guild
message that neither mentions nor is written by the bot arrives with empty content.

Shards: an IDENTIFY with ``shard: [id, count]`` starts the session of that shard (one
per shard id; a later IDENTIFY of the same id replaces it; an id not below count →
close 4010), recorded in ``identified`` (``None`` for an unsharded one) and, while its
connection is up, in ``shards``. A guild's events (its GUILD_CREATE, THREAD_CREATE,
MESSAGE_CREATE, INTERACTION_CREATE, member chunks) go only to the shard
``(guild_id >> 22) % count``, and its READY lists only those guilds; events with no
guild (DMs) go to shard 0, Discord's rule; an unsharded session gets everything.
``guild_id_on_shard(shard, count)`` makes a guild id that lands on a given shard.
"""

from __future__ import annotations

import asyncio
import json
import uuid

from aiohttp import WSMsgType, web

from tests.fakes.discord_records import JSON
from tests.fakes.discord_sessions import Conn, Session, guild_of
from tests.fakes.discord_state import (
    GATEWAY_MESSAGE_CONTENT,
    GATEWAY_MESSAGE_CONTENT_LIMITED,
    DiscordState,
)

GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 9, 1 << 12, 1 << 15


class Gateway(DiscordState):
    """The gateway: its connections and sessions, and the events sent in them."""

    @property
    def connected(self) -> bool:
        """A client identified or resumed, and the connection of every session
        (each shard's) is up."""
        sessions = self._sessions.values()
        return bool(sessions) and all(s.conn is not None for s in sessions)

    @property
    def identify_count(self) -> int:
        """How many IDENTIFYs the fake accepted (each starts a session)."""
        return len(self.identified)

    @property
    def shards(self) -> list[tuple[int, int]]:
        """The (shard id, count) of each shard's session whose connection is up, sorted."""
        return sorted(s.shard for s in self._sessions.values() if s.shard and s.conn)

    def drop_connection(self, shard: int | None = None) -> None:
        """Abort the live gateway connection of the unsharded session, or of
        ``shard``'s, with no close frame (the client sees 1006).

        The session stays: events pushed meanwhile are replayed when discord.py
        RESUMEs. Raises RuntimeError if that session has no connection up.
        """
        session = self._sessions.get(shard)
        if session is None or session.conn is None:
            raise RuntimeError(f"drop_connection: no client is connected (shard {shard})")
        conn, session.conn = session.conn, None
        conn.abort()
        self._notify()

    def invalidate_session(self, shard: int | None = None) -> None:
        """Forget the unsharded session, or ``shard``'s; its connected client gets op 9
        (``d: false``) and IDENTIFYs.

        Events kept for a RESUME are lost, as on Discord.
        """
        session = self._sessions.pop(shard, None)
        if session is not None and session.conn is not None:
            session.conn.send({"op": 9, "s": None, "t": None, "d": False})
        self._notify()

    def answer_heartbeats(self, answer: bool, *, shard: int | None = None) -> None:
        """Answer the heartbeats of the unsharded connections, or of ``shard``'s, with
        op 11 (the default), or stop answering them: a deaf connection, which
        discord.py closes only after its heartbeat timeout (60 s). The heartbeats are
        still counted in ``heartbeats``."""
        if answer:
            self._unanswered.discard(shard)
        else:
            self._unanswered.add(shard)

    # -- the gateway --------------------------------------------------------------------
    def _dispatch(self, t: str, d: JSON, *, state_event: bool = False) -> None:
        """Send event ``t`` to every session that holds its guild (``Session.holds``);
        one whose connection is down keeps it for a RESUME.

        When no session holds it, an event waits for the next IDENTIFY of one that
        does, except state events (guilds, threads, member chunks): the GUILD_CREATE
        after READY carries that state anyway.
        """
        guild_id = guild_of(t, d)
        sessions = [s for s in self._sessions.values() if s.holds(guild_id)]
        if not sessions and not state_event:
            self._pending.append((t, d))
        for session in sessions:
            self._send(session, t, d)

    def _send(self, session: Session, t: str, d: JSON) -> None:
        """Send event ``t`` in ``session`` as its intents let it see it, logged for a
        RESUME (on its connection, if up)."""
        seen = self._as_seen(session, t, d)
        if seen is None:
            return
        session.seq += 1
        frame = json.dumps({"op": 0, "t": t, "s": session.seq, "d": seen})
        session.log.append((session.seq, frame))
        if session.conn is not None:
            session.conn.send(frame)
        self._notify()

    def _as_seen(self, session: Session, t: str, d: JSON) -> JSON | None:
        """The event as a client with ``session.intents`` gets it; None: not at all."""
        if t != "MESSAGE_CREATE":
            return d
        in_guild = "guild_id" in d
        if not session.intents & (GUILD_MESSAGES if in_guild else DIRECT_MESSAGES):
            return None
        addressed = d["author"]["id"] == str(self.bot_id) or any(
            m["id"] == str(self.bot_id) for m in d["mentions"]
        )
        if in_guild and not addressed and not session.intents & MESSAGE_CONTENT:
            return {**d, "content": "", "embeds": [], "attachments": [], "components": []}
        return d

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        transport = request.transport
        await ws.prepare(request)
        conn = Conn(ws, transport)
        conn.writer = asyncio.create_task(conn.write(), name="discord-fake-gateway-writer")
        self._conns.add(conn)
        conn.send(
            {
                "op": 10,
                "s": None,
                "t": None,
                "d": {"heartbeat_interval": self.heartbeat_interval_ms},
            }
        )
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    self._on_frame(conn, json.loads(msg.data))
        finally:
            self._conns.discard(conn)
            for session in self._sessions.values():
                if session.conn is conn:
                    session.conn = None
            if conn.writer is not None and not conn.writer.done():
                conn.writer.cancel()
            self._notify()
        return ws

    def _on_frame(self, conn: Conn, frame: JSON) -> None:
        self.gateway_received.append(frame)
        op, d = frame.get("op"), frame.get("d") or {}
        if op == 1:
            self.heartbeats[conn.shard] += 1
            if conn.shard not in self._unanswered:
                conn.send({"op": 11, "s": None, "t": None, "d": None})
        elif op == 2:
            self._identify(conn, d)
        elif op == 6:
            self._resume(conn, d)
        elif op == 8:
            self._members_chunk(d)
        self._notify()

    def _identify(self, conn: Conn, d: JSON) -> None:
        """Start a session (of the shard IDENTIFY names, or unsharded): READY, its
        guilds, and the events pushed before a session held them."""
        if d.get("token") != self.token:
            conn.close(4004)
            return
        shard = d.get("shard")
        if shard is not None and not (
            isinstance(shard, list) and len(shard) == 2 and 0 <= shard[0] < shard[1]
        ):
            conn.close(4010)  # Invalid shard
            return
        intents = int(d.get("intents", -1))
        readable = GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED
        if intents & MESSAGE_CONTENT and not self.application_flags & readable:
            conn.close(4014)  # Disallowed intent(s)
            return
        held = (int(shard[0]), int(shard[1])) if shard is not None else None
        session = Session(uuid.uuid4().hex, intents, shard=held, conn=conn)
        conn.shard = held[0] if held else None
        self._sessions[conn.shard] = session
        self.identified.append(held)
        guilds = [g for g in self._guilds.values() if session.holds(g.id)]
        ready: JSON = {
            "v": 10,
            "user": {**self._users[self.bot_id], "verified": True, "mfa_enabled": False},
            "guilds": [{"id": str(g.id), "unavailable": True} for g in guilds],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": str(self.app_id), "flags": self.application_flags},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
            "user_settings": {},
        }
        if shard is not None:
            ready["shard"] = shard
        self._send(session, "READY", ready)
        for guild in guilds:
            self._send(
                session, "GUILD_CREATE", {**self._guild_payload(guild), "unavailable": False}
            )
        pending, self._pending = self._pending, []
        for t, data in pending:
            if session.holds(guild_of(t, data)):
                self._send(session, t, data)
            else:
                self._pending.append((t, data))

    def _resume(self, conn: Conn, d: JSON) -> None:
        session = next((s for s in self._sessions.values() if s.id == d.get("session_id")), None)
        if session is None or d.get("token") != self.token:
            conn.send({"op": 9, "s": None, "t": None, "d": False})
            return
        self.resume_count += 1
        if session.conn is not None and session.conn is not conn:
            session.conn.abort()
        session.conn = conn
        conn.shard = session.shard[0] if session.shard else None
        after = d.get("seq") or 0
        for seq, frame in session.log:
            if seq > after:
                conn.send(frame)
        session.seq += 1  # RESUMED has a sequence number but is not itself replayed
        conn.send({"op": 0, "t": "RESUMED", "s": session.seq, "d": {}})

    def _members_chunk(self, d: JSON) -> None:
        guild = self._guilds.get(int(d.get("guild_id", 0)))
        members = [] if guild is None else [self.bot_id, *guild.members]
        chunk = {
            "guild_id": d.get("guild_id"),
            "members": [self._member(u) for u in dict.fromkeys(members)],
            "chunk_index": 0,
            "chunk_count": 1,
            "not_found": [],
        }
        if d.get("nonce"):
            chunk["nonce"] = d["nonce"]
        self._dispatch("GUILD_MEMBERS_CHUNK", chunk, state_event=True)
