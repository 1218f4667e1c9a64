"""Memory for the runtime, one face over its parts: the trace writer
(bot/memory/traces.py), the wikis and scope indexes (bot/memory/scopes.py), the
recall block (bot/memory/recall.py), the `read_memory_page` tool
(bot/memory/tool.py); and what spans them: the `self` page of a private
scope's heartbeat, the compile of every wiki with new traces, `forget`.
A turn reads its own scope and the shared wiki, nothing else; a turn of a
per-member place with no one speaker (`members:`) reads the shared wiki alone.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import structlog

from bot import prompts
from bot.cluster.cluster import Cluster
from bot.cluster.wikilock import WikiLock
from bot.errors import CompileFailed, PageFormatError, ScopeErased, SoulbotError, WikiBusy
from bot.memory.compile import Compiler, CompileResult, Guard, log_line
from bot.memory.page import Page, render_page
from bot.memory.pageid import check_page_id, page_type
from bot.memory.pagesize import part_number
from bot.memory.recall import recall_block
from bot.memory.scopes import Scopes
from bot.memory.store import NewTrace, Trace, TraceStore
from bot.memory.tool import read_page_tool
from bot.memory.traces import TraceWriter
from bot.memory.wiki import Wiki
from bot.soul.registry import SoulRegistry
from bot.types import SHARED, Route, Scope, Tool

log = structlog.get_logger(__name__)

T = TypeVar("T")

SELF_PAGE = "self"
# A self note or a forget waits this long for the lock of its wiki, held by a
# compile in another process (bot/cluster/wikilock.py); a compile never waits: it
# is left to the other, and so is a `/memory drop` (its person tries again).
WIKI_WAIT_S = 600.0
# A compile the erasure of its scope sent back to the store starts over at most
# this many times, then fails (`wiki.compile_failed`): its next run does it.
COMPILE_RESTARTS = 3
_FACTS_HEADING = "\n## Facts\n"


@dataclass(frozen=True)
class MemoryView:
    """What a private wiki keeps (`/memory`): its pages but the daily logs, by
    id; the days it has logs of; how many traces no compile has folded yet, and
    the newest of them (oldest first)."""

    pages: tuple[Page, ...]
    logs: tuple[str, ...]
    waiting: int
    latest: tuple[Trace, ...]


@dataclass(frozen=True)
class DroppedPage:
    """What `/memory drop` took out: the page, how many traces it was built
    from, how many lines of the daily logs went with them."""

    page_id: str
    traces: int
    log_lines: int


@dataclass(frozen=True)
class Said:
    """A history row of an exchange taken back (`Memory.take_back`): who said it
    (`user`, `assistant`), its text as the history keeps it, and when it was
    stored."""

    speaker: str
    text: str
    at: float


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
        cluster: Cluster,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self._cluster = cluster
        self._data_dir = data_dir
        self._store = store
        self._compiler = compiler
        self._recall_budget = recall_budget
        self._clock = clock
        self._scopes = Scopes(data_dir, registry, clock)
        self._writer = TraceWriter(store)
        # A wiki's lock lives while someone holds or waits for it.
        self._locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

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
        name carries the soul's name. Raises ValueError for a per-member place
        (`members:`), which keeps nothing of its own: a speaker's words go to
        their `member` scope (bot/chat/places.py `member_route`)."""
        if Scope.parse(route.scope).per_member:
            raise ValueError(f"{route.scope} is a per-member place: it keeps no traces")
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
        """The recall block for `query` ("" when nothing is relevant): of the
        route's scope and the shared one (the shared one alone for a per-member
        place); traces of the route's session from `skip_after` on are in the
        history already, and left out."""
        scope = Scope.parse(route.scope)
        scopes = [SHARED] if scope.is_shared or scope.per_member else [route.scope, SHARED]
        return await recall_block(
            self._store, soul=route.soul, scopes=scopes, query=query,
            budget_tokens=self._recall_budget, now=self._clock(),
            group=scope.kind in ("chat", "member", "members"), skip_after=skip_after,
            skip_session=route.session,
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
        of the route's private wiki, and refresh its catalog, under the wiki's
        lock (waiting up to WIKI_WAIT_S for a compile in another process).
        Returns how many facts were new. Raises ValueError for the shared scope,
        WikiBusy when the wait was not enough, OSError."""
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

        async with (
            self._lock(route.soul, route.scope),
            self._wiki_lock(route.soul, route.scope).hold(WIKI_WAIT_S) as held,
        ):
            if not held:
                raise WikiBusy(route.soul, route.scope)
            added = await _finish(asyncio.to_thread(write))
        self._scopes.changed(route.soul, route.scope)
        return added

    # -- compile and forget ---------------------------------------------------------------

    async def pending_wikis(self, souls: Sequence[str] | None = None,
                            scope: str | None = None) -> list[tuple[str, str]]:  # fmt: skip
        """(soul, scope) of every wiki with traces past its watermark, or
        waiting since a conflict."""
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
                    if await asyncio.to_thread(wiki.pending):  # notes a conflict left waiting
                        pending.append((soul, name))
                        del marks[name]
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
                           scope in waiting or bool(meta.get("pending"))))  # fmt: skip
        return status

    async def compile_one(self, soul: str, scope: str) -> CompileResult:
        """Compile one wiki, one compile at a time: a compile of it in this
        process is waited for (it leaves nothing new to fold), one in another
        process is left to finish (`wiki.compile_busy`, nothing compiled here).
        Under the wiki's lock, guarded (`_guard`): a compile whose scope was
        erased meanwhile starts over from the store (`wiki.compile_restarted`).
        Raises what stopped it (see Compiler.compile; ScopeErased after
        COMPILE_RESTARTS restarts, WikiLockLost)."""
        wiki = self.wiki(soul, scope)
        if wiki is None:
            raise SoulbotError(f"no soul with id '{soul}' is loaded")
        lock = self._wiki_lock(soul, scope)
        try:
            async with self._lock(soul, scope), lock.hold() as held:
                if not held:
                    log.info("wiki.compile_busy", soul=soul, scope=scope,
                             reason="another process is compiling this wiki")  # fmt: skip
                    return CompileResult(soul, scope, (), 0, (), 0.0)
                result = await self._compile_guarded(soul, scope, wiki, lock)
        finally:
            self._scopes.changed(soul, scope)
        if scope == SHARED and result.traces:
            # The shared index is part of the soul's own prompt blocks: load it
            # again, for every session at its next turn (what a compile folded
            # is what the next question may be about).
            await asyncio.to_thread(self._registry.reload, soul)
        return result

    async def _compile_guarded(
        self, soul: str, scope: str, wiki: Wiki, lock: WikiLock
    ) -> CompileResult:
        """Compile with the scope's erase epoch read now, the lock held; over
        again when the scope was erased meanwhile (what was prepared is thrown
        away: the guard stops it before it writes)."""
        for restart in range(COMPILE_RESTARTS + 1):
            epoch = await self._store.erase_epoch(soul, scope)
            guard = self._guard(lock, soul, scope, epoch)
            try:
                return await self._compiler.compile(soul, scope, wiki, guard, epoch)
            except ScopeErased:
                if restart == COMPILE_RESTARTS:
                    log.error("wiki.compile_failed", soul=soul, scope=scope,
                              error_class="ScopeErased", error="erased at every try")  # fmt: skip
                    raise
                log.warning("wiki.compile_restarted", soul=soul, scope=scope,
                            reason="the scope was erased during the compile")  # fmt: skip
        raise AssertionError("unreachable")  # pragma: no cover

    def _guard(self, lock: WikiLock, soul: str, scope: str, epoch: int) -> Guard:
        """What a compile awaits before each write: the wiki's lock still held
        (taken again after a reconnect, else WikiLockLost), and the scope's
        erase epoch still `epoch` (else ScopeErased: an erasure ran while the
        lock was lost, and what the compile prepared may hold erased words)."""

        async def guard() -> None:
            await lock.keep()
            if await self._store.erase_epoch(soul, scope) != epoch:
                raise ScopeErased(soul, scope)

        return guard

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

    # -- what a person sees and fixes of their own memory (/memory) -------------------------

    async def view(self, route: Route, latest: int = 3) -> MemoryView:
        """The route's private wiki as `/memory` lists it, with the `latest`
        traces no compile has folded yet (past the watermark; all of them when
        .meta cannot be read). Raises ValueError for the shared scope, OSError."""
        wiki = self._private_wiki(route)
        pages = await asyncio.to_thread(wiki.list_pages)
        waiting, newest = await self._store.newest(
            route.soul, route.scope, await self._watermark(wiki), latest
        )
        return MemoryView(
            pages=tuple(p for p in pages if page_type(p.id) != "log"),
            logs=tuple(p.id.removeprefix("log/") for p in pages if page_type(p.id) == "log"),
            waiting=waiting,
            latest=tuple(newest),
        )

    async def export(self, route: Route) -> str:
        """The route's private wiki as one markdown text: a heading, the catalog,
        each page (front matter and body, as its file holds it), the daily logs,
        then the traces no compile has folded yet. A page that does not parse is
        left out (with `wiki.page_unreadable`). Raises ValueError for the shared
        scope, OSError."""
        wiki = self._private_wiki(route)
        soul = self._registry.get(route.soul)
        catalog = await asyncio.to_thread(wiki.catalog_text)
        pages = await asyncio.to_thread(wiki.list_pages)
        _, pending = await self._store.newest(
            route.soul, route.scope, await self._watermark(wiki), 10_000
        )
        when = datetime.fromtimestamp(self._clock(), UTC).strftime("%Y-%m-%d %H:%M UTC")
        parts = [prompts.EXPORT_HEAD.format(soul=soul.name if soul else route.soul,
                                            scope=route.scope, when=when)]  # fmt: skip
        parts.append("# index.md\n\n" + (catalog or "").strip())
        parts += [f"# {p.id}.md\n\n" + render_page(p).strip() for p in pages
                  if page_type(p.id) != "log"]  # fmt: skip
        parts += [f"# {p.id}.md\n\n" + p.body.strip() for p in pages if page_type(p.id) == "log"]
        if pending:
            lines = [log_line(t) for t in pending]
            parts.append(f"# {prompts.EXPORT_PENDING}\n\n" + "\n".join(lines))
        return "\n\n---\n\n".join(parts) + "\n"

    async def drop_page(self, route: Route, page_id: str) -> DroppedPage | None:
        """Take page `page_id` out of the route's private wiki for good: its file,
        the traces it was built from (their rows and index entries: no compile
        folds them again, no recall finds them), their lines in the daily logs,
        the page's indexed chunks, and its part pages (`<id>/part-<n>`, where
        the compile moved what was over the page's cap); then the catalog is
        written again. Done under
        the wiki's lock (this process's and the one across processes:
        bot/cluster/wikilock.py), so it never races a compile or a self note;
        the scope's erase epoch moves with the traces. A trace folded into this
        page and another is dropped too: the other page keeps what the model
        wrote of it. The traces come from the store's fold records and, for a
        page compiled before there were any, from the page's `sources`.

        Returns None when the wiki has no such page (no file, nothing folded
        into it). Raises InvalidWikiPageIdError for an id that breaks the rule,
        ValueError for the shared scope or a daily log's id (its lines go with
        the pages they were folded into), WikiBusy when another process is
        compiling the wiki, OSError."""
        wiki = self._private_wiki(route)
        check_page_id(page_id)
        if page_type(page_id) == "log":
            raise ValueError(f"{page_id} is a daily log, not a page a compile built")
        soul, scope = route.soul, route.scope
        async with self._lock(soul, scope), self._wiki_lock(soul, scope).hold() as held:
            if not held:
                raise WikiBusy(soul, scope)
            dropped = await self._drop_held(route, wiki, page_id)
        self._scopes.changed(soul, scope)
        return dropped

    async def _drop_held(self, route: Route, wiki: Wiki, page_id: str) -> DroppedPage | None:
        """`drop_page`'s work, the wiki's locks held (`memory.page_dropped`)."""
        soul, scope = route.soul, route.scope
        try:
            page = await asyncio.to_thread(wiki.read_page, page_id)
        except PageFormatError:  # dropped all the same: its file goes
            page = None
        if page is not None:
            await self._fold_sources(route, page)
        removed = await _finish(asyncio.to_thread(wiki.remove_page, page_id))
        dropped = await self._store.drop_page(soul, scope, page_id)
        if not removed and not dropped:
            return None
        # What the compile moved to the page's parts was built from the same traces.
        ids = await asyncio.to_thread(wiki.page_ids)
        for part in (other for other in ids if part_number(page_id, other)):
            await _finish(asyncio.to_thread(wiki.remove_page, part))
            await self._store.drop_page(soul, scope, part)
        scrubbed = await _finish(asyncio.to_thread(_scrub_logs, wiki, dropped))
        await _finish(asyncio.to_thread(wiki.write_catalog))
        log.info("memory.page_dropped", soul=soul, scope=scope, page=page_id,
                 traces=len(dropped), log_lines=scrubbed)  # fmt: skip
        return DroppedPage(page_id, len(dropped), scrubbed)

    async def take_back(
        self, route: Route, said: Sequence[Said], until: float, pages: bool = True
    ) -> int:
        """Take an exchange out of the route's scope (`/undo`, `/retry`): the
        traces of `said`'s history rows, one each, of the route's session (see
        `_taken`: a person's by their name and words, within the exchange's
        span, its first row to `until`, the reply's time; the soul's reply by
        its words). Queued traces are stored first (within 5 s). A trace a
        compile folded already takes its pages along, as `drop_page` does (the
        page is made of it: nothing of it may be recalled), when `pages`;
        without, or in the shared wiki, the page stays, only the traces (and
        their fold records) go. All of it under the wiki's locks, so no compile
        folds them meanwhile; the scope's erase epoch moves with the traces.
        Returns how many pages of a private wiki made of them were kept (not
        `pages`). Raises WikiBusy when another process is compiling the wiki
        (nothing is taken then)."""
        soul, scope = route.soul, route.scope
        if not said:
            return 0
        await self.drain(5.0)
        async with self._lock(soul, scope), self._wiki_lock(soul, scope).hold() as held:
            if not held:
                raise WikiBusy(soul, scope)
            since = min(row.at for row in said)
            found = await self._store.said_in(soul, scope, route.session, since)
            mine = _taken(found, said, until, route.is_dm)
            folded = sorted({page for _, into in mine for page in into})
            if scope == SHARED:
                folded = []
            dropped, kept = (folded, []) if pages else ([], folded)
            for page in dropped:
                await self._drop_held(route, self._private_wiki(route), page)
            await self._store.delete_traces(soul, scope, [t.id for t, _ in mine])
        self._scopes.changed(soul, scope)
        log.info("memory.taken_back", soul=soul, scope=scope, traces=len(mine),
                 pages=len(dropped), kept=len(kept))  # fmt: skip
        return len(kept)

    async def member_scopes(self, route: Route) -> list[str]:
        """The `member` scopes of the person whose DM `route` is (its scope is
        `user:<platform>:<id>`) with the route's soul: one a server where they
        said something in a per-member place, with traces in the store or a
        wiki on disk; sorted ([] for another kind of route)."""
        person = Scope.parse(route.scope)
        if person.kind != "user":
            return []
        stored = await self._store.scopes_after(route.soul, {})
        base = self._data_dir / "memory" / route.soul / "member" / person.platform
        folders = await asyncio.to_thread(
            lambda: [p.parent.name for p in base.glob(f"*/{person.id}") if p.is_dir()]
        )
        found = set()
        for scope in [*stored, *(f"member:{person.platform}:{s}:{person.id}" for s in folders)]:
            try:
                member = Scope.parse(scope)
            except ValueError:  # a folder name no scope has
                continue
            if member.kind == "member" and (member.platform, member.id) == (
                person.platform, person.id,
            ):  # fmt: skip
                found.add(str(member))
        return sorted(found)

    def _private_wiki(self, route: Route) -> Wiki:
        """The route's private wiki. Raises ValueError (InvalidKeyError) for the
        shared scope, the soul's own, and a per-member place, which has none."""
        return Wiki(self._scopes.folder(route.soul, route.scope))

    async def _watermark(self, wiki: Wiki) -> int:
        """The wiki's watermark; 0 when .meta cannot be read (everything then
        counts as not compiled yet)."""
        try:
            return await asyncio.to_thread(wiki.watermark)
        except (OSError, ValueError):
            return 0

    async def _fold_sources(self, route: Route, page: Page) -> None:
        """Record the page's `sources` (the trace ids its front matter lists) as
        folds into it, so a page compiled before the store kept fold records
        takes its traces along. An id that is not of the route's scope (a
        hand-edited page) is not recorded: another scope's traces are never
        dropped from here."""
        ids = [int(s) for s in page.sources if s.isdigit()]
        try:
            await self._store.record_folds(route.soul, route.scope, page.id, ids)
        except ValueError:
            results = await asyncio.gather(
                *(self._store.record_folds(route.soul, route.scope, page.id, [i]) for i in ids),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, BaseException) and not isinstance(result, ValueError):
                    raise result from None

    async def sessions_of(self, route: Route) -> list[str]:
        """The session keys the route's scope holds traces of (after the
        writes queued now are stored, within 5 s)."""
        await self.drain(5.0)
        return await self._store.sessions(route.soul, route.scope)

    async def forget(self, route: Route) -> int:
        """Erase the route's private scope: its traces (and its erase epoch
        moves, in the same transaction) and its wiki, under the wiki's lock:
        after a compile or a self note of it running now, in this process or
        another (waiting up to WIKI_WAIT_S). A trace of it still queued is
        dropped (`memory.write_dropped`). Returns how many traces were erased.
        Raises ValueError for the shared scope, WikiBusy when the wait was not
        enough (nothing is erased then)."""
        soul, scope = route.soul, route.scope
        if scope == SHARED or Scope.parse(scope).per_member:
            raise ValueError(f"{scope} is no private scope to forget")
        async with self._lock(soul, scope), self._wiki_lock(soul, scope).hold(WIKI_WAIT_S) as held:
            if not held:
                raise WikiBusy(soul, scope)
            self._writer.erase(route.soul, route.scope, self._clock())
            await self.drain(5.0)
            erased = await self._store.forget(route.soul, route.scope)
            folder = self._scopes.folder(route.soul, route.scope)
            await asyncio.to_thread(shutil.rmtree, folder, True)
        self._scopes.changed(route.soul, route.scope)
        log.info("memory.forgotten", soul=route.soul, scope=route.scope, traces=erased)
        return erased

    def _wiki_lock(self, soul: str, scope: str) -> WikiLock:
        """The wiki's lock across processes (bot/cluster/wikilock.py)."""
        return self._cluster.wiki_lock(soul, scope)

    def _lock(self, soul: str, scope: str) -> asyncio.Lock:
        """The lock of one wiki in this process, taken before the one across
        processes: its compile, its self notes and its erasure take turns."""
        lock = self._locks.get((soul, scope))
        if lock is None:
            lock = self._locks[(soul, scope)] = asyncio.Lock()
        return lock


def _taken(
    found: Sequence[tuple[Trace, list[str]]], said: Sequence[Said], until: float, dm: bool
) -> list[tuple[Trace, list[str]]]:
    """The traces of `found` (oldest first, with their pages) that are `said`'s
    rows, at most one a row: a person's, the first made at its row's time or
    later, up to `until`, whose name and words the row holds (`_holds`); the
    soul's reply, its words exactly, the first made at its row's time or later
    (it is recorded just after the row), else the last before."""
    taken: list[tuple[Trace, list[str]]] = []
    for row in said:
        left = [(t, pages) for t, pages in found if t.text and all(t.id != k.id for k, _ in taken)]
        if row.speaker == "assistant":
            mine = [(t, p) for t, p in left if t.speaker == "assistant" and t.text == row.text]
            pick = next(((t, p) for t, p in mine if t.created_at >= row.at), None)
            pick = pick or (mine[-1] if mine else None)
        else:
            pick = next(
                (
                    (t, p)
                    for t, p in left
                    if t.speaker == row.speaker
                    and row.at <= t.created_at <= until
                    and _holds(row.text, t, dm)
                ),
                None,
            )
        if pick is not None:
            taken.append(pick)
    return taken


def _holds(row: str, trace: Trace, dm: bool) -> bool:
    """Whether the history row `row` is the person's message `trace` keeps: in a
    group the row starts with their name ("Ann: "); then, after a quote line or
    not, the trace's words, the whole of it or its first lines (a line that a
    voice note was not heard may follow)."""
    prefix = f"{trace.name}: "
    if not dm and not row.startswith(prefix):
        return False
    body = row if dm else row[len(prefix) :]
    bodies = [body, *body.split("\n", 1)[1:]]
    return any(b == trace.text or b.startswith(trace.text + "\n") for b in bodies)


def _scrub_logs(wiki: Wiki, traces: Sequence[Trace]) -> int:
    """Take the log lines of `traces` out of the wiki's daily logs; returns how
    many went."""
    by_day: dict[str, set[str]] = {}
    for trace in traces:
        day = datetime.fromtimestamp(trace.created_at, UTC).strftime("%Y-%m-%d")
        by_day.setdefault(day, set()).add(log_line(trace))
    return sum(wiki.scrub_log(day, lines) for day, lines in sorted(by_day.items()))


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
