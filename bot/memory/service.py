"""Memory for the runtime, one face over its parts: the trace writer
(bot/memory/traces.py), the wikis and scope indexes (bot/memory/scopes.py), the
recall block (bot/memory/recall.py), the `read_memory_page` tool
(bot/memory/tool.py); and what spans them: the `self` page of a private
scope's heartbeat, the compile of every wiki with new traces, `forget`.
A turn reads its own scope and the shared wiki, nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import structlog
from filelock import FileLock, Timeout

from bot import prompts
from bot.errors import CompileFailed, SoulbotError
from bot.memory.compile import Compiler, CompileResult
from bot.memory.page import Page
from bot.memory.pageid import page_type
from bot.memory.recall import recall_block
from bot.memory.scopes import Scopes
from bot.memory.store import NewTrace, TraceStore
from bot.memory.tool import read_page_tool
from bot.memory.traces import TraceWriter
from bot.memory.wiki import Wiki
from bot.soul.registry import SoulRegistry
from bot.types import SHARED, Route, Scope, Tool

log = structlog.get_logger(__name__)

T = TypeVar("T")

SELF_PAGE = "self"
_FACTS_HEADING = "\n## Facts\n"


def compile_lock_path(data_dir: Path, soul: str, scope: str) -> Path:
    """The file whose flock says a process is compiling this wiki."""
    key = hashlib.sha256(f"{soul}\0{scope}".encode()).hexdigest()[:32]
    return data_dir / "locks" / f"compile-{key}.lock"


def _whole(value: object) -> int:
    """A watermark read from .meta, 0 when it is missing or not a whole number."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class Memory:
    """The memory side of the runtime. `drain` before closing the store."""

    def __init__(
        self,
        data_dir: Path,
        registry: SoulRegistry,
        store: TraceStore,
        compiler: Compiler,
        recall_budget: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self._store = store
        self._compiler = compiler
        self._recall_budget = recall_budget
        self._clock = clock
        self._data_dir = data_dir
        self._scopes = Scopes(data_dir, registry, clock)
        self._writer = TraceWriter(store)
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    @property
    def store(self) -> TraceStore:
        return self._store

    def wiki(self, soul_id: str, scope: str) -> Wiki | None:
        """The wiki of `scope` (None when the soul is not loaded)."""
        return self._scopes.wiki(soul_id, scope)

    # -- traces -----------------------------------------------------------------------

    def record(self, route: Route, speaker: str, name: str, text: str) -> None:
        """Store a trace in the background: the turn goes on at once. Traces
        queued while a write is in flight go together in the next one (one
        transaction for many turns under load). An assistant trace without a
        name carries the soul's name."""
        if not name and speaker == "assistant":
            soul = self._registry.get(route.soul)
            name = soul.name if soul else route.soul
        trace = NewTrace(route.soul, route.scope, route.session, speaker, name, text, self._clock())
        self._writer.add(trace)

    def pending_writes(self) -> int:
        """Traces not stored yet (queued or being written)."""
        return self._writer.pending()

    async def drain(self, seconds: float) -> int:
        """Wait up to `seconds` for the trace writes; returns how many remain."""
        return await self._writer.drain(seconds)

    async def close(self) -> None:
        """Stop the trace writer (`drain` first). Idempotent."""
        await self._writer.close()

    # -- a turn's memory ----------------------------------------------------------------

    async def recall(self, route: Route, query: str, skip_after: float | None) -> str:
        """The recall block for `query` ("" when nothing is relevant)."""
        scopes = [route.scope] if route.scope == SHARED else [route.scope, SHARED]
        return await recall_block(
            self._store, soul=route.soul, scopes=scopes, query=query,
            budget_tokens=self._recall_budget, now=self._clock(),
            group=Scope.parse(route.scope).kind == "chat", skip_after=skip_after,
        )  # fmt: skip

    async def scope_index(self, route: Route) -> str | None:
        """The catalog of the route's private wiki, or None (see Scopes.index)."""
        return await self._scopes.index(route)

    def tools(self, route: Route) -> list[Tool]:
        """`read_memory_page` for the route's scope and the soul's shared wiki."""
        return [read_page_tool(self._scopes, route)]

    # -- the heartbeat of a private scope ------------------------------------------------

    async def add_self_notes(self, route: Route, entry: str, facts: Sequence[str]) -> int:
        """Put a reflection line (newest first) and new facts on the `self` page
        of the route's private wiki, and refresh its catalog. Returns how many
        facts were new. Raises ValueError for the shared scope, OSError."""
        if route.scope == SHARED:
            raise ValueError("the shared scope's heartbeat writes SOUL.md, not a self page")
        wiki = Wiki(self._scopes.folder(route.soul, route.scope))
        updated = datetime.fromtimestamp(self._clock(), UTC).isoformat(timespec="seconds")

        def write() -> int:
            page = wiki.read_page(SELF_PAGE)
            head, _, tail = (page.body if page else "").partition(_FACTS_HEADING)
            entries = [ln for ln in head.splitlines() if ln.startswith("- ")]
            known = [ln for ln in tail.splitlines() if ln.startswith("- ")]
            seen = {ln.casefold() for ln in known}
            new = [f"- {f}" for f in dict.fromkeys(facts) if f"- {f}".casefold() not in seen]
            body = "\n".join(["## Reflections", entry, *entries, "", _FACTS_HEADING.strip(),
                               *known, *new])  # fmt: skip
            base = page or Page(SELF_PAGE, page_type(SELF_PAGE), prompts.SELF_PAGE_SUMMARY)
            wiki.write_page(replace(base, body=body + "\n", updated=updated))
            wiki.write_catalog()
            return len(new)

        async with self._lock(route.soul, route.scope):
            added = await _finish(asyncio.to_thread(write))
        self._scopes.changed(route.soul, route.scope)
        return added

    # -- compile and forget ---------------------------------------------------------------

    async def pending_wikis(self, souls: Sequence[str] | None = None,
                            scope: str | None = None) -> list[tuple[str, str]]:  # fmt: skip
        """(soul, scope) of every wiki with traces past its watermark."""
        pending = []
        for soul in souls or [s.id for s in self._registry.all()]:
            scopes = [scope] if scope else await self._store.scopes_after(soul, {})
            marks = {}
            for name in scopes:
                wiki = self.wiki(soul, name)
                if wiki is None:
                    continue
                try:
                    marks[name] = await asyncio.to_thread(wiki.watermark)
                except (OSError, ValueError):
                    # Its compile fails the same way, logged and counted, and the
                    # other wikis still compile.
                    pending.append((soul, name))
            ready = set(await self._store.scopes_after(soul, marks)) if marks else set()
            pending += [(soul, name) for name in marks if name in ready]
        return pending

    async def compile_status(self, soul: str) -> list[tuple[str, str | None, bool]]:
        """(scope, time of its last compile or None, new traces waiting) for the
        shared wiki and every scope of `soul` that holds traces."""
        metas: dict[str, dict[str, Any]] = {}
        for scope in sorted({SHARED, *await self._store.scopes_after(soul, {})}):
            wiki = self.wiki(soul, scope)
            try:
                metas[scope] = await asyncio.to_thread(wiki.read_meta) if wiki else {}
            except (OSError, ValueError):
                metas[scope] = {}
        marks = {scope: _whole(meta.get("watermark")) for scope, meta in metas.items()}
        waiting = set(await self._store.scopes_after(soul, marks))
        status = []
        for scope, meta in metas.items():
            compiled = meta.get("compiled_at")
            status.append((scope, compiled if isinstance(compiled, str) else None,
                           scope in waiting))  # fmt: skip
        return status

    async def compile_one(self, soul: str, scope: str) -> CompileResult:
        """Compile one wiki, one compile at a time: a compile of it in this
        process is waited for (it leaves nothing new to fold), one in another
        process is left to finish (`wiki.compile_busy`, nothing compiled here).
        Raises what stopped it (see Compiler.compile)."""
        wiki = self.wiki(soul, scope)
        if wiki is None:
            raise SoulbotError(f"no soul with id '{soul}' is loaded")
        try:
            async with self._lock(soul, scope):
                with self._process_lock(soul, scope) as held:
                    if not held:
                        log.info("wiki.compile_busy", soul=soul, scope=scope,
                                 reason="another process is compiling this wiki")  # fmt: skip
                        return CompileResult(soul, scope, (), 0, (), 0.0)
                    result = await self._compiler.compile(soul, scope, wiki)
        finally:
            self._scopes.changed(soul, scope)
        if scope == SHARED and result.traces:
            # The shared index is part of the soul's own prompt blocks: load it again.
            await asyncio.to_thread(self._registry.reload, soul)
        return result

    async def compile_all(self, souls: Sequence[str] | None = None,
                          scope: str | None = None) -> list[CompileResult]:  # fmt: skip
        """Compile every wiki with new traces (of `souls`, of one `scope`); a
        failed wiki is logged (`wiki.compile_failed`) and the others go on.

        Raises CompileFailed after the last wiki when any failed; it carries the
        results of those that compiled.
        """
        results, failures = [], []
        for soul, name in await self.pending_wikis(souls, scope):
            try:
                results.append(await self.compile_one(soul, name))
            except Exception as exc:  # logged by the compiler; the next wiki still compiles
                failures.append(f"{soul} {name}: {type(exc).__name__}: {exc}")
        if failures:
            raise CompileFailed(results, failures)
        return results

    async def sessions_of(self, route: Route) -> list[str]:
        """The session keys the route's scope holds traces of (after the
        writes queued now are stored, within 5 s)."""
        await self.drain(5.0)
        return await self._store.sessions(route.soul, route.scope)

    async def forget(self, route: Route) -> int:
        """Erase the route's private scope: its traces and its wiki, after a
        compile or a self note of it that is running now. A trace of it still
        queued is dropped (`memory.write_dropped`). Returns how many traces
        were erased. Refuses the shared scope (ValueError)."""
        if route.scope == SHARED:
            raise ValueError("the shared scope cannot be forgotten from a chat")
        async with self._lock(route.soul, route.scope):
            self._writer.erase(route.soul, route.scope, self._clock())
            await self.drain(5.0)
            erased = await self._store.forget(route.soul, route.scope)
            folder = self._scopes.folder(route.soul, route.scope)
            await asyncio.to_thread(shutil.rmtree, folder, True)
        self._scopes.changed(route.soul, route.scope)
        log.info("memory.forgotten", soul=route.soul, scope=route.scope, traces=erased)
        return erased

    @contextlib.contextmanager
    def _process_lock(self, soul: str, scope: str) -> Iterator[bool]:
        """The wiki's lock across processes (`data_dir/locks/`, an flock the
        kernel drops when its process dies); yields whether it was taken."""
        path = compile_lock_path(self._data_dir, soul, scope)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = FileLock(path, mode=0o600, thread_local=False)
        try:
            lock.acquire(timeout=0)  # one flock(2) call: it never waits
        except Timeout:
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    def _lock(self, soul: str, scope: str) -> asyncio.Lock:
        """The lock of one wiki: its compile, its self notes and its erasure
        take turns."""
        lock = self._locks.get((soul, scope))
        if lock is None:
            lock = self._locks[(soul, scope)] = asyncio.Lock()
        return lock


async def _finish(work: Awaitable[T]) -> T:
    """Await `work` (a thread's file writes); when cancelled, wait for it to
    finish before the cancel goes on, so no write lands after the caller let
    go of the wiki's lock."""
    future = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.gather(future, return_exceptions=True)
        raise
