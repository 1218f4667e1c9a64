"""The compile: traces past the watermark -> clusters -> one model call per page
touched -> pages -> daily logs -> catalog -> `.meta/` (hashes, backlinks and,
last, the watermark).

A page id the rule refuses, or a path the file system refuses, is a conflict:
reported, and the compile goes on. Any other failure (a full disk, a budget
refusal, a failed model call) stops the compile before the watermark moves, so
the next compile takes the same traces up again. Log lines of a failed compile
may then be written twice: the daily log is append-only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import structlog
from structlog.contextvars import bound_contextvars

from bot import prompts
from bot.errors import PageFormatError, WikiPathRefused
from bot.memory.page import Page
from bot.memory.pageid import default_summary, is_wiki_page_id
from bot.memory.store import Trace, TraceStore
from bot.memory.wiki import Wiki
from bot.model.client import ModelClient
from bot.model.usage import CallContext
from bot.soul.persona import slugify

log = structlog.get_logger(__name__)

Clusterer = Callable[[Sequence[Trace]], dict[str, list[Trace]]]


def default_clusterer(traces: Sequence[Trace]) -> dict[str, list[Trace]]:
    """A trace with entities goes to `entities/<slug>` (each of them), any
    other to `concepts/notes`; order is kept within a page."""
    clusters: dict[str, list[Trace]] = {}
    for trace in traces:
        slugs = [s for s in (slugify(e) for e in trace.entities) if s]
        for page_id in [f"entities/{s}" for s in slugs] or ["concepts/notes"]:
            clusters.setdefault(page_id, []).append(trace)
    return clusters


@dataclass(frozen=True)
class CompileResult:
    """What one compile of one wiki did."""

    soul: str
    scope: str
    pages: tuple[str, ...]
    traces: int
    conflicts: tuple[str, ...]
    duration_ms: float


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def _fact(trace: Trace) -> str:
    who = trace.name or trace.speaker or "someone"
    when = datetime.fromtimestamp(trace.created_at, UTC).strftime("%Y-%m-%d %H:%M")
    return f"- [{when}, {who}] " + " ".join(trace.text.split())


def _log_line(trace: Trace) -> str:
    when = datetime.fromtimestamp(trace.created_at, UTC).strftime("%H:%M")
    who = trace.name or trace.speaker or "?"
    return f"- {when} {who}: " + " ".join(trace.text.split())


class Compiler:
    """Compiles the wiki of one (soul, scope) from its traces."""

    def __init__(
        self,
        store: TraceStore,
        model: ModelClient,
        clusterer: Clusterer = default_clusterer,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._model = model
        self._clusterer = clusterer
        self._clock = clock

    async def _merge(self, ctx: CallContext, page_id: str, page: Page | None,
                     traces: Sequence[Trace]) -> str:  # fmt: skip
        body = page.body.strip() if page and page.body.strip() else prompts.EMPTY_PAGE
        facts = "\n".join(_fact(t) for t in traces)
        text = prompts.COMPILE_USER.format(page_id=page_id, body=body, facts=facts)
        reply = await self._model.complete(
            ctx,
            [{"type": "text", "text": prompts.COMPILE_SYSTEM}],
            [{"role": "user", "content": [{"type": "text", "text": text}]}],
        )
        return reply.text.strip() + "\n"

    async def compile(self, soul: str, scope: str, wiki: Wiki) -> CompileResult:
        """Fold the scope's new traces into `wiki`.

        Raises what stopped it (OSError, BudgetExceeded, ModelError, ...), after
        logging `wiki.compile_failed`; the watermark is then where it was.
        """
        started = time.perf_counter()
        with bound_contextvars(soul=soul, scope=scope):
            try:
                result = await self._compile(soul, scope, wiki, started)
            except Exception as exc:
                log.error("wiki.compile_failed", error_class=type(exc).__name__, error=str(exc))
                raise
            if result.traces:
                log.info("wiki.compiled", pages_written=len(result.pages),
                         traces_folded=result.traces, conflicts=list(result.conflicts),
                         duration_ms=result.duration_ms)  # fmt: skip
        return result

    async def _compile(self, soul: str, scope: str, wiki: Wiki, started: float) -> CompileResult:
        await asyncio.to_thread(wiki.remove_stale_temps)
        watermark = await asyncio.to_thread(wiki.watermark)
        traces = await self._store.after(soul, scope, watermark)
        if not traces:
            return CompileResult(soul, scope, (), 0, (), 0.0)
        now = self._clock()
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ctx = CallContext(soul, scope, f"compile:{scope}", "", "compile")
        written: list[str] = []
        conflicts: list[str] = []
        for page_id, items in self._clusterer(traces).items():
            if not is_wiki_page_id(page_id):
                conflicts.append(f"{page_id}: not a valid page id")
                continue
            try:
                current = await asyncio.to_thread(wiki.read_page, page_id)
            except PageFormatError as exc:  # a hand-broken page is left for its editor
                conflicts.append(f"{page_id}: {exc.reason}")
                continue
            sources = tuple(current.sources if current else ())
            # A page written before a crash already holds its traces: not again.
            items = [t for t in items if str(t.id) not in sources]
            if not items:
                continue
            body = await self._merge(ctx, page_id, current, items)
            sources += tuple(str(t.id) for t in items)
            if current is None:
                page = Page.new(page_id, body, stamp, sources)
            else:  # the summary and any field a person added stay as they are
                summary = current.summary or default_summary(page_id)
                page = replace(current, summary=summary, updated=stamp, sources=sources, body=body)
            try:
                await asyncio.to_thread(wiki.write_page, page)
            except WikiPathRefused as exc:
                conflicts.append(f"{page_id}: {exc}")
                continue
            await self._store.index_page(soul, scope, page_id, body, now)
            written.append(page_id)
        logged = await asyncio.to_thread(wiki.logged_through)
        by_day: dict[str, list[str]] = {}
        for trace in traces:
            if trace.id > logged:
                by_day.setdefault(_day(trace.created_at), []).append(_log_line(trace))
        for day, lines in by_day.items():
            await asyncio.to_thread(wiki.append_log, day, lines)
        if by_day:
            await asyncio.to_thread(wiki.mark_logged, traces[-1].id)
        await asyncio.to_thread(wiki.write_catalog)
        await asyncio.to_thread(wiki.update_meta, traces[-1].id)
        duration = round((time.perf_counter() - started) * 1000, 1)
        return CompileResult(soul, scope, tuple(written), len(traces), tuple(conflicts), duration)
