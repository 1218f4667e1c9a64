"""The heartbeat in the runtime (docs/heartbeat.md): when a conversation ends, the soul
reflects on it and writes its autobiography.

Only souls whose SOUL.md has regions have a heartbeat. A conversation ends
when its session has been idle for `heartbeat.idle_minutes`, when the model
calls the `end_conversation` tool (the person said goodbye), or at shutdown
for every session with turns not reflected on yet. Only the turns said under
the conversation's soul and scope are reflected on (a changed binding starts a
new history: bot/chat/sessions.py), and of those only the ones since the last
reflection (the mark is kept in SQLite); they must hold at least
`min_conversation_tokens` (META), else they wait for more. Then one model
call (source `heartbeat`) with the forced tool `save_soul`; its input is
checked (`bot/soul/heartbeat.validate`): a rejected call writes nothing and
logs `heartbeat.rejected` with the reason.

Where it goes: a session of the soul's shared scope writes SOUL.md (under the
file lock and, on a shared store, the soul's lock across processes:
bot/soul/soullock.py; with the daily backup; then the soul is reloaded: a
session whose prompt cache is warm keeps the version it has, see
bot/chat/turn.py). A write that lost the soul's lock does not happen
(`heartbeat.failed`), and its turns are reflected on with the next ones;
past `max_autobiography_entries` the oldest entries are folded by the model into
one `- [history]` line. A private scope's reflection and facts go to the `self`
page of that scope's wiki, never into SOUL.md, so they never reach another
person's prompt; rules from a private scope are dropped. A per-member place
(`memory: per-member`) has no heartbeat: its conversations are several
people's, and no scope there is everyone's. `heartbeat.written` logs what
changed. Then, where a binding turns them on, the conversation's check-in is
planned (`after`: bot/chat/check_ins.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from structlog.contextvars import bound_contextvars

from bot import prompts
from bot.chat.history import Entry, HistoryStore
from bot.chat.transcript import transcript
from bot.config.schema import HeartbeatConfig
from bot.errors import BudgetExceeded, ModelError, Rejected, SoulWriteStopped
from bot.memory.service import Memory
from bot.model.client import ModelClient
from bot.model.usage import CallContext
from bot.soul import heartbeat
from bot.soul.loader import Soul
from bot.soul.registry import SoulRegistry
from bot.soul.soulfile import SoulFile
from bot.soul.soullock import SoulLocks
from bot.storage.db import Database
from bot.storage.sql import Conn
from bot.types import SHARED, Route, Scope, Tool

log = structlog.get_logger(__name__)

SAVE_SOUL = {
    "name": "save_soul",
    "description": "Save your reflection on the conversation that just ended.",
    "input_schema": heartbeat.SAVE_SOUL_SCHEMA,
}
END_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass
class _Open:
    """A session with turns not reflected on yet."""

    route: Route
    last_turn: float
    ended: bool = False


class Reflector:
    """Tracks conversations and reflects on them when they end."""

    def __init__(
        self,
        config: HeartbeatConfig,
        registry: SoulRegistry,
        model: ModelClient,
        history: HistoryStore,
        memory: Memory,
        db: Database,
        souls: SoulLocks,
        clock: Callable[[], float] = time.time,
        after: Callable[[Route, list[Entry]], Awaitable[None]] | None = None,
    ) -> None:
        self._after = after  # told of each conversation reflected on (check-ins plan then)
        self._config = config
        self._souls = souls
        self._registry = registry
        self._model = model
        self._history = history
        self._memory = memory
        self._db = db
        self._clock = clock
        self._open: dict[str, _Open] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def _soul(self, route: Route) -> Soul | None:
        if Scope.parse(route.scope).kind in ("member", "members"):
            return None  # a per-member place (see the module docstring)
        soul = self._registry.get(route.soul)
        return soul if self._config.enabled and soul and soul.heartbeat else None

    # -- hooks for the turn --------------------------------------------------------------

    def tools(self, route: Route) -> list[Tool]:
        """The `end_conversation` tool, for souls with a heartbeat."""
        if self._soul(route) is None:
            return []

        async def end_conversation(_args: dict[str, Any]) -> str:
            entry = self._open.setdefault(route.session, _Open(route, self._clock()))
            entry.ended = True
            return "noted"

        return [Tool("end_conversation", prompts.END_CONVERSATION, END_SCHEMA, end_conversation)]

    def turn_done(self, route: Route) -> None:
        """A turn of `route` was answered: its conversation is open (and ends now
        when the model said so)."""
        if self._soul(route) is None:
            return
        entry = self._open.get(route.session)
        if entry is None:
            entry = self._open[route.session] = _Open(route, self._clock())
        entry.route, entry.last_turn = route, self._clock()
        if entry.ended:
            self._start(route.session)

    # -- when -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the idle sweep (inside the running loop)."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="heartbeat-sweep")

    async def _sweep_forever(self) -> None:
        every = min(60.0, self._config.idle_minutes * 60 / 2)
        while True:
            await asyncio.sleep(every)
            self.sweep()

    def sweep(self) -> int:
        """Start the reflection of every conversation idle for `idle_minutes`;
        returns how many started."""
        limit = self._clock() - self._config.idle_minutes * 60
        idle = [key for key, entry in self._open.items() if entry.last_turn <= limit]
        for key in idle:
            self._start(key)
        return len(idle)

    def _start(self, session: str) -> None:
        if session in self._running:
            return
        entry = self._open.pop(session, None)
        if entry is None:
            return
        # A task of its own context: it binds its own log fields, not the turn's.
        task = asyncio.create_task(
            self._reflect(entry.route), name=f"heartbeat:{session}", context=contextvars.Context()
        )
        self._running[session] = task
        task.add_done_callback(lambda _: self._running.pop(session, None))

    async def flush(self) -> None:
        """Reflect on every open conversation and wait for all reflections
        (the shutdown task)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for session in list(self._open):
            self._start(session)
        await self.wait()

    async def wait(self) -> None:
        """Wait for the reflections running now."""
        if self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def forget(self, sessions: list[str]) -> None:
        """`sessions` are being forgotten: drop their open conversations, cancel
        their reflections running now (and wait for them), and delete their
        marks, so the next conversation there is reflected on from its start."""
        tasks = []
        for session in sessions:
            self._open.pop(session, None)
            task = self._running.get(session)
            if task is not None:
                task.cancel()
                tasks.append(task)
        await asyncio.gather(*tasks, return_exceptions=True)

        def delete(conn: Conn) -> None:
            conn.executemany("DELETE FROM heartbeat_marks WHERE session = ?",
                             [(s,) for s in sessions])  # fmt: skip

        await self._db.run(delete)

    async def stop(self) -> None:
        """Cancel the sweep and the reflections still running."""
        tasks = [t for t in (self._sweeper, *self._running.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._sweeper = None

    # -- the reflection -------------------------------------------------------------------

    async def _mark(self, session: str) -> int:
        row = await self._db.run(
            lambda c: c.execute(
                "SELECT entry FROM heartbeat_marks WHERE session = ?", (session,)
            ).fetchone()
        )
        return int(row[0]) if row else 0

    async def _set_mark(self, session: str, entry: int) -> None:
        def write(conn: Conn) -> None:
            conn.execute(
                "INSERT INTO heartbeat_marks (session, entry) VALUES (?, ?) "
                "ON CONFLICT (session) DO UPDATE SET entry = excluded.entry",
                (session, entry),
            )

        await self._db.run(write)

    async def _reflect(self, route: Route) -> None:
        soul = self._soul(route)
        if soul is None or soul.heartbeat is None:
            return
        with bound_contextvars(soul=route.soul, scope=route.scope, session=route.session):
            await self._reflect_bound(soul, route)

    async def _reflect_bound(self, soul: Soul, route: Route) -> None:
        assert soul.heartbeat is not None
        try:
            mark = await self._mark(route.session)
            snapshot = await self._history.load(route.session)
            if snapshot.binding != (route.soul, route.scope):  # said under another binding
                log.debug("heartbeat.skipped", binding=snapshot.binding)
                return
            entries = [e for e in snapshot.entries if e.id > mark]
            tokens = sum(e.tokens for e in entries)
            if not entries or tokens < soul.heartbeat.min_conversation_tokens:
                log.debug("heartbeat.skipped", tokens=tokens)
                return
            data = await self._ask(soul, route, entries)
            try:
                reflection = heartbeat.validate(data, soul.heartbeat, self._config.empty_phrases)
            except Rejected as exc:
                log.warning("heartbeat.rejected", reason=str(exc))
            else:
                await self._write(soul, route, reflection)
            await self._set_mark(route.session, entries[-1].id)
            if self._after is not None:
                await self._after(route, entries)
        except (BudgetExceeded, ModelError, SoulWriteStopped) as exc:
            log.warning("heartbeat.failed", error=str(exc))
        except Exception as exc:  # the boundary of a background task
            log.exception("heartbeat.failed", error=f"{type(exc).__name__}: {exc}")

    async def _ask(self, soul: Soul, route: Route, entries: list[Entry]) -> object:
        file = SoulFile(soul.folder, self._clock)
        text = await asyncio.to_thread(file.read)
        lines = transcript(("Them" if e.role == "user" else soul.name, e.text) for e in entries)
        system = [{"type": "text", "text": prompts.HEARTBEAT_SYSTEM.format(name=soul.name)}]
        user = prompts.HEARTBEAT_USER.format(soul=text, transcript=lines)
        ctx = CallContext(route.soul, route.scope, route.session, route.user, "heartbeat")
        messages = [{"role": "user", "content": user}]
        return await self._model.use_tool(ctx, system, messages, SAVE_SOUL)

    async def _write(self, soul: Soul, route: Route, reflection: heartbeat.Reflection) -> None:
        now = datetime.fromtimestamp(self._clock(), UTC)
        if route.scope != SHARED:
            entry = f"- [{now.strftime('%Y-%m-%d %H:%M')}] {reflection.text}"
            facts = await self._memory.add_self_notes(route, entry, reflection.facts)
            log.info("heartbeat.written", target="self page", entries_added=1,
                     facts_added=facts, rules_added=0, rules_dropped=len(reflection.rules),
                     facts_below_importance=reflection.dropped_facts)  # fmt: skip
            return
        file = SoulFile(soul.folder, self._clock)
        changes: list[heartbeat.Changes] = []

        def edit(text: str, at: datetime) -> str:
            new, change = heartbeat.merge(text, reflection, at)
            changes.append(change)
            return new

        async with self._souls.hold(soul.id) as check:
            text = await asyncio.to_thread(file.update, edit, check)
        await self._fold(soul, route, file, text)
        await asyncio.to_thread(self._registry.reload, soul.id, at_once=False)
        change = changes[0]
        log.info("heartbeat.written", target="SOUL.md", entries_added=change.entries_added,
                 facts_added=change.facts_added, rules_added=change.rules_added,
                 facts_below_importance=reflection.dropped_facts,
                 version=change.version)  # fmt: skip

    async def _fold(self, soul: Soul, route: Route, file: SoulFile, text: str | None) -> None:
        """Fold the oldest entries of `text` (the file as just written; None when
        the write changed nothing) into one history line when there are too many."""
        assert soul.heartbeat is not None
        if text is None:
            return
        folded = heartbeat.fold_plan(text, soul.heartbeat)
        if not folded:
            return
        ctx = CallContext(route.soul, route.scope, route.session, route.user, "heartbeat")
        system = [{"type": "text", "text": prompts.FOLD_SYSTEM}]
        user = prompts.FOLD_USER.format(entries="\n".join(folded))
        reply = await self._model.complete(ctx, system, [{"role": "user", "content": user}])
        try:
            async with self._souls.hold(soul.id) as check:
                result = await asyncio.to_thread(
                    file.update,
                    lambda text, at: heartbeat.apply_fold(text, folded, reply.text, at),
                    check,
                )
        except Rejected as exc:
            log.warning("heartbeat.fold_rejected", reason=str(exc), soul=soul.id)
            return
        except SoulWriteStopped as exc:  # the entries are folded at the next write
            log.warning("heartbeat.fold_stopped", reason=str(exc), soul=soul.id)
            return
        log.info("heartbeat.folded", soul=soul.id, entries=len(folded), written=result is not None)
