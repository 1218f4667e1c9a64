"""The compile: new traces -> filed on pages (bot/memory/filing.py) -> one model
call per page touched -> pages -> daily logs -> catalog -> `.meta/` (hashes,
backlinks, the notes still waiting and, last, the watermark).

A compile cannot lose a fact. A page whose merge does not land (a page whose
front matter a person broke, an answer that stops short of its end, an empty
answer, a path the file system refuses) is a conflict: reported, the page is
left as it was, and its notes wait in `.meta` (`pending`, by page) for the next
compile, which takes them up with the new ones. A page created in a wiki whose
catalog reaches other people's prompts (the shared wiki's, in every conversation
of the soul; a chat's, in every member's) is summarised from its id
(`default_summary`), never in the filing model's words, which may be a sentence
someone said; only a person's own wiki (`user:`, and a member's of a server,
`member:`, read only in their own turns) keeps the model's summary. A
summary a page already has, a person's included, is kept everywhere. Which traces a page has folded
is kept in the store (`memory_folds`), so a page written before a crash does not
get them twice, and a page's front matter stays small however long it lives.
Any other failure (a full disk, a budget refusal, a failed model call) stops
the compile before the watermark moves, so the next compile takes the same
traces up again. Before each write the compile awaits its `guard` (the wiki's
lock still held, the scope not erased since it started: bot/cluster/wikilock.py),
which stops it, nothing more written, with ScopeErased or WikiLockLost.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import structlog
from structlog.contextvars import bound_contextvars

from bot import prompts
from bot.errors import PageFormatError, ScopeErased, WikiPathRefused
from bot.memory import pagesize
from bot.memory.filing import DEFAULT_PAGE, Filer, Filing
from bot.memory.page import Page
from bot.memory.pageid import default_summary, is_wiki_page_id
from bot.memory.pagesize import tokens
from bot.memory.store import Trace, TraceStore
from bot.memory.wiki import Wiki
from bot.model.client import ModelClient, Reply
from bot.model.usage import CallContext
from bot.types import Scope

log = structlog.get_logger(__name__)

Guard = Callable[[], Awaitable[None]]
"""Called before each write of a compile; raises to stop it before it writes
(ScopeErased, WikiLockLost: see `Memory._guard`)."""


async def _unguarded() -> None:
    """The guard of a compile nothing else may erase under."""


_FRONT_MATTER = re.compile(r"\A\s*---[ \t]*\n.*?\n---[ \t]*(\n|\Z)", re.DOTALL)


@dataclass(frozen=True)
class CompileResult:
    """What one compile of one wiki did: the pages it wrote, the traces it took
    up (new ones and those waiting from an earlier conflict), what it refused,
    and how many traces still wait for the next compile."""

    soul: str
    scope: str
    pages: tuple[str, ...]
    traces: int
    conflicts: tuple[str, ...]
    duration_ms: float
    waiting: int = 0


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def _fact(trace: Trace) -> str:
    who = trace.name or trace.speaker or "someone"
    when = datetime.fromtimestamp(trace.created_at, UTC).strftime("%Y-%m-%d %H:%M")
    return f"- [{when}, {who}] " + " ".join(trace.text.split())


def log_line(trace: Trace) -> str:
    when = datetime.fromtimestamp(trace.created_at, UTC).strftime("%H:%M")
    who = trace.name or trace.speaker or "?"
    return f"- {when} {who}: " + " ".join(trace.text.split())


def _legacy_sources(page: Page | None) -> list[int]:
    """The trace ids a page written before fold records listed in `sources`."""
    return [int(s) for s in page.sources if s.isdigit()] if page else []


class _Run:
    """One compile of one wiki: what it wrote, refused and left waiting."""

    def __init__(self, soul: str, scope: str, wiki: Wiki, stamp: str, now: float,
                 guard: Guard, epoch: int | None) -> None:  # fmt: skip
        self.soul, self.scope, self.wiki, self.stamp, self.now = soul, scope, wiki, stamp, now
        self.guard, self.epoch = guard, epoch
        self.ctx = CallContext(soul, scope, f"compile:{scope}", "", "compile")
        self.written: list[str] = []
        self.conflicts: list[str] = []
        self.waiting: dict[str, list[int]] = {}
        self.catalog: dict[str, str] = {}

    def wait(self, page_id: str, items: Sequence[Trace], why: str) -> None:
        self.conflicts.append(
            f"{page_id}: {why}; the page is kept as it was and its {len(items)} notes wait "
            "for the next compile"
        )
        self.waiting[page_id] = [t.id for t in items]


class Compiler:
    """Compiles the wiki of one (soul, scope) from its traces. `max_tokens`
    caps each compile answer, `page_max_tokens` each page (bot/memory/pagesize.py)."""

    def __init__(
        self,
        store: TraceStore,
        model: ModelClient,
        *,
        max_tokens: int = 4096,
        page_max_tokens: int = 1500,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._model = model
        self._max_tokens = max_tokens
        self._cap = page_max_tokens
        self._filer = Filer(model, max_tokens)
        self._clock = clock

    async def compile(
        self, soul: str, scope: str, wiki: Wiki, guard: Guard = _unguarded,
        epoch: int | None = None,
    ) -> CompileResult:  # fmt: skip
        """Fold the scope's new traces, and those waiting since a conflict, into `wiki`.
        `guard` is awaited before each write of pages, daily logs, catalog and
        .meta; with `epoch` (the scope's erase epoch when it started), a page's
        chunks are indexed only while the store's is the same.

        Raises what stopped it (OSError, BudgetExceeded, ModelError, ...), after
        logging `wiki.compile_failed`; the watermark is then where it was.
        ScopeErased (from `guard` or the index) is raised without that log.
        """
        started = time.perf_counter()
        with bound_contextvars(soul=soul, scope=scope):
            try:
                result = await self._compile(soul, scope, wiki, started, guard, epoch)
            except ScopeErased:
                raise
            except Exception as exc:
                log.error("wiki.compile_failed", error_class=type(exc).__name__, error=str(exc))
                raise
            if result.traces:
                log.info("wiki.compiled", pages_written=len(result.pages),
                         traces_folded=result.traces, conflicts=list(result.conflicts),
                         waiting=result.waiting, duration_ms=result.duration_ms)  # fmt: skip
        return result

    async def _compile(
        self, soul: str, scope: str, wiki: Wiki, started: float, guard: Guard, epoch: int | None
    ) -> CompileResult:
        await asyncio.to_thread(wiki.remove_stale_temps)
        watermark = await asyncio.to_thread(wiki.watermark)
        pending = await asyncio.to_thread(wiki.pending)
        new = await self._store.after(soul, scope, watermark)
        waiting = await self._store.traces(
            soul, scope, [i for ids in pending.values() for i in ids]
        )
        if not new and not waiting:
            return CompileResult(soul, scope, (), 0, (), 0.0)
        now = self._clock()
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        run = _Run(soul, scope, wiki, stamp, now, guard, epoch)
        run.catalog = {p.id: p.summary for p in await asyncio.to_thread(wiki.list_pages)}
        filing = await self._filer.file(run.ctx, new, run.catalog)
        run.conflicts += filing.conflicts
        _take_up(filing, pending, waiting)
        own = Scope.parse(scope).kind in ("user", "member")  # see the module docstring
        for page_id, items in filing.pages.items():
            summary = filing.summaries.get(page_id, "") if own else ""
            await self._page(run, page_id, items, summary)
        await guard()
        await self._log(wiki, new)
        await asyncio.to_thread(wiki.write_catalog)
        mark = new[-1].id if new else watermark
        await guard()
        await asyncio.to_thread(wiki.update_meta, mark, run.waiting)
        duration = round((time.perf_counter() - started) * 1000, 1)
        return CompileResult(soul, scope, tuple(run.written), len(new) + len(waiting),
                             tuple(run.conflicts), duration,
                             sum(len(ids) for ids in run.waiting.values()))  # fmt: skip

    async def _page(self, run: _Run, page_id: str, items: list[Trace], summary: str) -> None:
        """Merge `items` into page `page_id`, write it (and its parts) and index it."""
        try:
            current = await asyncio.to_thread(run.wiki.read_page, page_id)
        except PageFormatError as exc:  # a hand-broken page is left for its editor
            run.wait(page_id, items, exc.reason)
            return
        # Only the scope's own traces: a hand-edited list may name anything.
        listed = _legacy_sources(current)
        held = await self._store.traces(run.soul, run.scope, listed) if listed else []
        legacy = [t.id for t in held]
        folded = set(await self._store.folded_into(run.soul, run.scope, page_id)) | set(legacy)
        # A page written before a crash already holds its traces: not again.
        items = [t for t in items if t.id not in folded]
        if not items:
            return
        reply = await self._merge(run.ctx, page_id, current, items)
        body = _FRONT_MATTER.sub("", reply.text, count=1).strip()
        if not reply.finished:
            run.wait(page_id, items, f"the model's answer stopped early ({reply.stop_reason})")
            return
        if not body:
            run.wait(page_id, items, "the model's answer was empty")
            return
        await run.guard()
        try:  # a part page a person broke is a conflict of the page, like the page itself
            body = await self._fit(run, page_id, body)
            if current is None:
                page = Page.new(page_id, body, run.stamp)
                page = replace(page, summary=summary or page.summary)
            else:  # the summary and any field a person added stay as they are
                page = replace(current, summary=current.summary or default_summary(page_id),
                               updated=run.stamp, sources=(), body=body)  # fmt: skip
            await asyncio.to_thread(run.wiki.write_page, page)
        except PageFormatError as exc:
            run.wait(page_id, items, f"{exc.page_id}: {exc.reason}")
            return
        except WikiPathRefused as exc:
            run.wait(page_id, items, str(exc))
            return
        await self._store.record_folds(
            run.soul, run.scope, page_id, [*legacy, *(t.id for t in items)]
        )
        await self._store.index_page(run.soul, run.scope, page_id, body, run.now, run.epoch)
        run.catalog[page_id] = page.summary
        run.written.append(page_id)

    async def _merge(
        self, ctx: CallContext, page_id: str, page: Page | None, traces: Sequence[Trace]
    ) -> Reply:
        current = pagesize.without_part_links(page.body) if page else ""
        text = prompts.COMPILE_USER.format(
            page_id=page_id, body=current or prompts.EMPTY_PAGE,
            facts="\n".join(_fact(t) for t in traces), cap=self._cap, chars=self._cap * 4,
        )  # fmt: skip
        return await self._model.complete(
            ctx,
            [{"type": "text", "text": prompts.COMPILE_SYSTEM}],
            [{"role": "user", "content": [{"type": "text", "text": text}]}],
            max_tokens=self._max_tokens,
        )

    async def _fit(self, run: _Run, page_id: str, body: str) -> str:
        """`body` held to the page cap: what is over it moves to the page's parts
        (written here); returns the page's body with its link to its newest part."""
        newest = max((n for other in run.catalog if (n := pagesize.part_number(page_id, other))),
                     default=0)  # fmt: skip
        room = self._cap - tokens(pagesize.with_part_links("", page_id, newest + 1))
        kept, moved = pagesize.fit(pagesize.without_part_links(body), room)
        if moved and not pagesize.parts_can_be_named(page_id):
            run.conflicts.append(f"{page_id}: over its cap, and its id is too long for part pages")
            kept, moved = pagesize.without_part_links(body), []
        if not moved:
            return pagesize.with_part_links(kept, page_id, newest)
        last = None
        if newest:
            last = await asyncio.to_thread(run.wiki.read_page, pagesize.part_id(page_id, newest))
        start = pagesize.without_part_links(last.body) if last else None
        bodies = pagesize.pack(start, moved, room)
        first = newest if last else newest + 1
        for number, part_body in enumerate(bodies, first):
            part = pagesize.part_id(page_id, number)
            text = pagesize.with_part_links(part_body, page_id, number - 1)
            if last is not None and number == newest:
                page = replace(last, updated=run.stamp, body=text)
            else:
                summary = prompts.PART_SUMMARY.format(page_id=page_id)
                page = replace(Page.new(part, text, run.stamp), summary=summary)
            await asyncio.to_thread(run.wiki.write_page, page)
            await self._store.index_page(run.soul, run.scope, part, part_body, run.now, run.epoch)
            run.catalog[part] = page.summary
            run.written.append(part)
        return pagesize.with_part_links(kept, page_id, first + len(bodies) - 1)

    async def _log(self, wiki: Wiki, traces: Sequence[Trace]) -> None:
        """Append the new traces' lines to the daily logs, once each."""
        logged = await asyncio.to_thread(wiki.logged_through)
        by_day: dict[str, list[str]] = {}
        for trace in traces:
            if trace.id > logged:
                by_day.setdefault(_day(trace.created_at), []).append(log_line(trace))
        for day, lines in by_day.items():
            await asyncio.to_thread(wiki.append_log, day, lines)
        if by_day:
            await asyncio.to_thread(wiki.mark_logged, traces[-1].id)


def _take_up(filing: Filing, pending: dict[str, list[int]], waiting: Sequence[Trace]) -> None:
    """Add the traces waiting since a conflict to the pages they wait for (a
    page id .meta holds that breaks the rule: the default page)."""
    by_id = {t.id: t for t in waiting}
    for page_id, ids in pending.items():
        target = page_id if is_wiki_page_id(page_id) else DEFAULT_PAGE
        for trace_id in ids:
            if trace_id in by_id:
                filing.add(target, by_id[trace_id])
    for items in filing.pages.values():
        items.sort(key=lambda t: t.id)
