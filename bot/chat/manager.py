"""Every live session of the process, by key (`SessionManager`): it loads a
session from the store on its first message and evicts it when idle, takes each
message in under the session's lock (a message the store fails to take is held,
in memory, and stored with the next), recovers at start what a crash left
unanswered (under the session's lease on a shared store: bot/cluster/leases.py),
and resets and forgets sessions. One session's work is bot/chat/sessions.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import structlog

from bot.chat.history import Entry
from bot.chat.media import Pictured, kept_folder
from bot.chat.places import member_route
from bot.chat.sessions import Session, SessionParts
from bot.chat.takeback import May, Taken
from bot.types import SHARED, Inbound, Outbound, Route, Scope

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class _Held:
    """A message the store failed to take, kept for its session's next try."""

    route: Route
    inbound: Inbound
    text: str
    pictured: Pictured | None
    unprompted: bool = False


class SessionManager:
    """Every live session, by key; loads a session from SQLite on first use."""

    def __init__(self, parts: SessionParts, idle_s: float = 900.0) -> None:
        self._parts = parts
        self._idle_s = idle_s
        self._sessions: dict[str, Session] = {}
        # A session's lock and how many hold or wait for it; kept only while some do.
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        # Messages the store failed to take (a lock timeout, a server gone), by session,
        # oldest first: stored, and answered, with the session's next message.
        self._held: dict[str, list[_Held]] = {}
        self._last_sweep = time.monotonic()

    def limited(self) -> list[tuple[str, float]]:
        """The people the rate limit holds back now (`platform:id`, seconds left); none
        without `limits.messages_per_minute`."""
        return self._parts.rate.limited() if self._parts.rate is not None else []

    def admit(self, inbound: Inbound) -> float:
        """Count a command that asks the model (`/retry`) against its sender's
        rate limit (`limits.messages_per_minute`), as a message counts: the
        seconds until their window has room (0: go on now; logged as
        `limits.rate` once a window). The terminal chat is never held back."""
        if self._parts.rate is None or inbound.platform == "console":
            return 0.0
        wait, tell = self._parts.rate.admit(f"{inbound.platform}:{inbound.user_id}")
        if tell:
            log.info("limits.rate", user_id=inbound.user_id, wait_s=round(wait, 1))
        return wait

    def __len__(self) -> int:
        return len(self._sessions)

    async def _get(self, route: Route) -> Session:
        """The session of `route`, loaded from SQLite when not live (call under its lock)."""
        session = self._sessions.get(route.session)
        if session is None:
            snapshot = await self._parts.store.load(route.session)
            session = Session(route, snapshot, self._parts)
            self._sessions[route.session] = session
        await session.rebind(route)  # the config's binding may have changed
        return session

    @asynccontextmanager
    async def _lock(self, key: str) -> AsyncIterator[None]:
        """Hold the lock of session `key` (`async with`). The lock lives while
        someone holds or waits for it, so sessions gone (evicted, forgotten,
        never seen again) leave none behind."""
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    async def first_delivery(self, session: str, message_id: str) -> bool:
        """Record a platform message id of `session` (an empty id always passes);
        False, logged as `message.duplicate`, when it was delivered before."""
        if not message_id or await self._parts.store.first_delivery(session, message_id):
            return True
        log.info("message.duplicate", session=session, message_id=message_id)
        return False

    async def deliver(
        self,
        route: Route,
        inbound: Inbound,
        text: str,
        pictured: Pictured | None = None,
        start: bool = True,
        unprompted: bool = False,
    ) -> None:
        """Hand a message to its session, in arrival order (`unprompted`: let
        through by ambient mode's gate); a platform message id seen before is
        dropped. Without `start`, it is stored and waits for the next message's
        turn (a voice note not heard: nothing to answer). When the store fails,
        raises what it raised (the caller apologises), and the message is held:
        the session's next message stores it first, and one turn answers both."""
        async with self._lock(route.session):
            held = self._held.pop(route.session, [])
            waiting = [*held, _Held(route, inbound, text, pictured, unprompted)]
            await self._take(route, waiting, start=start)
        self._sweep()

    async def _take(self, route: Route, waiting: list[_Held], start: bool) -> None:
        """Store the `waiting` messages of the route's session in order (with
        `start`, the last starts a turn for them all); raises what the store
        raised, the messages not stored held again (call under its lock)."""
        try:
            session = await self._get(route)
            while waiting:
                held = waiting[0]
                last = start and len(waiting) == 1
                if not await session.receive(held.inbound, held.text, held.pictured, start=last,
                                             unprompted=held.unprompted):  # fmt: skip
                    log.info("message.duplicate", session=route.session,
                             message_id=held.inbound.message_id)  # fmt: skip
                waiting.pop(0)
        except Exception:
            self._held[route.session] = waiting
            log.warning("sessions.message_held", session=route.session, messages=len(waiting))
            raise

    async def store_held(self) -> int:
        """Store the messages held since the store failed them, with no turn (the
        shutdown: the next start's recovery answers them); returns how many are
        still not stored (logged: `sessions.held_lost`)."""
        for key in list(self._held):
            async with self._lock(key):
                waiting = self._held.pop(key, [])
                if waiting:
                    with contextlib.suppress(Exception):  # held again, and counted below
                        await self._take(waiting[-1].route, waiting, start=False)
        left = sum(len(waiting) for waiting in self._held.values())
        if left:
            log.error("sessions.held_lost", messages=left,
                      reason="the store did not take them; they are not answered")  # fmt: skip
        return left

    def overhear(self, route: Route, inbound: Inbound, text: str, remember: bool) -> None:
        """Keep a group message not addressed to the bot as context for the
        next turn of its session (`text`: what the turn is shown); with
        `remember`, as a memory trace of the route's scope too (in a per-member
        place, of its speaker's `member` scope)."""
        if route.is_dm:
            return
        if self._parts.context is not None:
            self._parts.context.add(route.session, inbound.user_name, text)
        speaker = member_route(route, inbound.user_id)
        if remember and self._parts.memory is not None and speaker is not None:
            self._parts.memory.record(speaker, "user", inbound.user_name, text)

    async def sent_text(self, session: str, message_id: str) -> str | None:
        """The text of the bot's reply sent as `message_id` in `session`, or None."""
        return await self._parts.store.sent_text(session, message_id)

    async def recover(self, route: Route, inbound: Inbound) -> bool:
        """Answer, once, what the route's session left unanswered at a crash.
        False, logged as `sessions.recover_skipped`, when a turn of it runs:
        in this process, or in another sharing the store (its lease,
        bot/cluster/leases.py): that turn answers it. Raises what the store raised."""
        key, leases = route.session, self._parts.leases
        async with self._lock(key):
            live = self._sessions.get(key)
            if live is not None and live.busy:
                log.info("sessions.recover_skipped", session=key, reason="its turn runs")
                return False
            if leases is not None and not await leases.claim(key):
                log.info("sessions.recover_skipped", session=key,
                         reason="another process holds its lease")  # fmt: skip
                return False
            try:
                return (await self._get(route)).recover(inbound)
            except BaseException:
                if leases is not None:
                    await leases.release(key)
                raise

    async def recent(self, route: Route, count: int) -> list[Entry]:
        """The newest `count` entries of the route's conversation."""
        async with self._lock(route.session):
            return (await self._get(route)).recent(count)

    async def say_unprompted(self, route: Route, message: Outbound) -> list[str]:
        """Send `message`, which the soul writes unasked into the route's
        conversation (a reminder), and keep it in its history; returns the ids
        of its messages. Raises what the adapter raised (nothing kept then)."""
        async with self._lock(route.session):
            session = await self._get(route)
            ids = list(await self._parts.send(message) or [])
            await session.keep_unprompted(message.text, ids)
            return ids

    async def reset(self, route: Route) -> None:
        """Start a new history for the route's session, after what came before it."""
        async with self._lock(route.session):
            await (await self._get(route)).reset()

    async def take_back(
        self, route: Route, undo: bool, may: May, admin: bool = False
    ) -> asyncio.Future[Taken]:
        """Queue an `/undo` (`undo`) or a `/retry` of the last exchange of the
        route's conversation (`Session.take_back`), after the messages before
        it; returns the future of its outcome."""
        async with self._lock(route.session):
            session = await self._get(route)
            return session.take_back(undo, may, admin)

    async def mood(self, route: Route) -> str | None:
        """The mood of the route's conversation (`Session.mood`), from the
        store when it is not live (nothing loaded for it)."""
        live = self._sessions.get(route.session)
        if live is not None and live.route.soul == route.soul:
            return live.mood
        chosen = await self._parts.store.mood(route.session, route.soul)
        return self._parts.agent.mood(route, None, chosen)

    async def _drop(self, sessions: list[str]) -> None:
        """Take `sessions` out of memory, their running turns cancelled (call
        under their locks)."""
        tasks = []
        for key in sessions:
            self._held.pop(key, None)
            live = self._sessions.pop(key, None)
            if live is not None:
                live.stop_deferred()
            if live is not None and live.task is not None and not live.task.done():
                live.task.cancel()
                tasks.append(live.task)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def forget(self, route: Route) -> int:
        """Erase the route's private scope, so nothing of it is left or comes
        back: under the locks of every session of the scope, their running
        turns are cancelled (a reply must not be recorded into the erased
        scope), their reflections stopped and heartbeat marks dropped (the
        `on_forget` hook), then the traces, the wiki and the history go.
        A member's scope of a server (`member:`) is their traces and wiki only:
        the channels its traces came from are everyone's there, so their
        history and turns go on (no reply is recorded into a member's scope).
        Returns how many sessions' history was erased. Raises RuntimeError
        without memory, ValueError for the shared scope and a per-member place."""
        memory = self._parts.memory
        if memory is None:
            raise RuntimeError("this session manager has no memory to forget")
        if route.scope == SHARED or Scope.parse(route.scope).per_member:
            raise ValueError(f"{route.scope} is no private scope to forget")
        if Scope.parse(route.scope).kind == "member":
            await memory.forget(route)
            log.info("sessions.forgotten", soul=route.soul, scope=route.scope, sessions=0)
            return 0
        live = [k for k, s in self._sessions.items()
                if (s.route.soul, s.route.scope) == (route.soul, route.scope)]  # fmt: skip
        sessions = sorted({*await memory.sessions_of(route), *live, route.session})
        async with AsyncExitStack() as stack:
            for key in sessions:
                await stack.enter_async_context(self._lock(key))
            await self._drop(sessions)
            if self._parts.on_forget is not None:
                await self._parts.on_forget(sessions)
            if self._parts.context is not None:
                self._parts.context.drop(sessions)
            await memory.forget(route)
            await self._parts.store.erase(sessions)
            if self._parts.media_dir is not None:
                for key in sessions:  # the images `media.keep` kept
                    folder = kept_folder(self._parts.media_dir, key)
                    await asyncio.to_thread(shutil.rmtree, folder, ignore_errors=True)
        log.info("sessions.forgotten", soul=route.soul, scope=route.scope, sessions=len(sessions))
        return len(sessions)

    def _sweep(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep >= min(60.0, self._idle_s):
            self._last_sweep = now
            self.evict_idle()
            if self._parts.rate is not None:
                self._parts.rate.sweep()

    def evict_idle(self, idle_s: float | None = None) -> int:
        """Drop sessions with no turn running, no reply waiting to be stored,
        no one holding or waiting for their lock, and no message for `idle_s`
        (default: the manager's); they come back from SQLite. Returns the count."""
        limit = self._idle_s if idle_s is None else idle_s
        now = time.monotonic()
        idle = [  # a session holding a reply it could not store keeps it until it can
            k
            for k, s in self._sessions.items()
            if not s.busy and not s.unsaved and k not in self._locks
            and now - s.last_active >= limit
        ]  # fmt: skip
        for key in idle:
            del self._sessions[key]
        if idle:
            log.debug("sessions.evicted", count=len(idle))
        return len(idle)

    async def store_unsaved(self) -> int:
        """Store the replies whose write failed, of every session with no turn
        running (the shutdown, after the turns); returns how many are still not
        stored (each logged: `history.unsaved`)."""
        left = 0
        for session in list(self._sessions.values()):
            if session.unsaved and not session.busy:
                left += await session.store_unsaved()
        if left:
            log.error("history.unsaved", replies=left,
                      reason="their messages will be answered again at the next start")  # fmt: skip
        return left

    def in_flight(self) -> list[asyncio.Task[None]]:
        """The worker tasks of sessions with a turn running or queued."""
        return [s.task for s in self._sessions.values() if s.busy and s.task is not None]

    async def wait(self, seconds: float) -> int:
        """Wait up to `seconds` for every turn in flight; returns how many remain."""
        tasks = self.in_flight()
        if tasks:
            await asyncio.wait(tasks, timeout=seconds)
        return len(self.in_flight())

    async def cancel(self) -> None:
        """Cancel every turn still running and wait for them to end."""
        tasks = self.in_flight()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
