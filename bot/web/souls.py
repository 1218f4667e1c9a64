"""The Souls and Memory pages: each soul's files, prompt size, load warnings,
reload; SOUL.md's backups (the heartbeat's writes) as dated diffs, with
rollback; the shared and group wikis' pages and catalog, their last compile
and its conflicts, and a compile button. A private scope (a person's, a
private thread's, a member's, and a `chat:` scope not known to be a group's:
bot/chat/chat_places.py) is only counted, with its last compile's date: its
words never reach a page (people read their own with `/memory`)."""

from __future__ import annotations

import asyncio
import difflib
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from bot.chat.commands import reload_lines
from bot.errors import SoulbotError
from bot.memory.service import Memory
from bot.memory.wiki import Wiki
from bot.soul.loader import BYTES_PER_TOKEN, Soul
from bot.soul.prompt import estimate_tokens, system_blocks
from bot.soul.soulfile import SoulFile, rollback_soul
from bot.types import SHARED
from bot.web.server import changed, console_of

DIFF_LINES = 400  # of one backup's diff, shown


@dataclass(frozen=True)
class Change:
    """What SOUL.md's backup of `day` was, against the version after it."""

    day: str
    diff: str


TOO_LARGE = "(too large to show: over the soul loader's limit of {limit:,} bytes)"


def _text(path: Path, max_bytes: int) -> str | None:
    """The file's text, or None when it is over `max_bytes` (it is not read).
    Raises OSError, UnicodeDecodeError."""
    if path.stat().st_size > max_bytes:
        return None
    return path.read_text("utf-8")


def _changes(soul: Soul, max_bytes: int) -> list[Change]:
    """Each backup, newest first, as the diff to the next version (the next
    backup, or SOUL.md now); a file over `max_bytes` (the loader's limit) is
    not read, and its diffs say it is too large to show. Raises OSError,
    UnicodeDecodeError."""
    file = SoulFile(soul.folder)
    days = file.dates()
    texts = [_text(file.backups / f"SOUL.md.{day}", max_bytes) for day in days]
    texts.append(_text(file.path, max_bytes))
    changes = []
    for i, day in enumerate(days):
        before, after = texts[i], texts[i + 1]
        if before is None or after is None:
            changes.append(Change(day, TOO_LARGE.format(limit=max_bytes)))
            continue
        lines = difflib.unified_diff(before.splitlines(), after.splitlines(),
                                     f"SOUL.md {day}", "after", lineterm="")  # fmt: skip
        changes.append(Change(day, "\n".join(list(lines)[:DIFF_LINES])))
    return changes[::-1]


def _prompt_tokens(soul: Soul) -> int:
    return sum(estimate_tokens(block.text) for block in system_blocks(soul))


async def souls_page(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    souls = []
    max_bytes = console.runtime.registry.max_prompt_tokens * BYTES_PER_TOKEN  # as the loader
    for soul in console.runtime.registry.all():
        try:
            changes = await asyncio.to_thread(_changes, soul, max_bytes)
        except (OSError, UnicodeDecodeError) as exc:
            changes = [Change("?", f"the backups cannot be read: {exc}")]
        souls.append((soul, _prompt_tokens(soul), changes))
    loaded = {soul.folder.name for soul in console.runtime.registry.all()}
    unloaded = await asyncio.to_thread(_folders, console.runtime.registry.workspaces)
    return console.render(request, "souls.html", souls=souls,
                          unloaded=[name for name in unloaded if name not in loaded])  # fmt: skip


def _folders(workspaces: Path) -> list[str]:
    """The soul folders' names under `workspaces` (as the registry looks for them)."""
    try:
        return sorted(p.name for p in workspaces.iterdir()
                      if not p.name.startswith(".") and (p.is_dir() or p.is_symlink()))  # fmt: skip
    except OSError:
        return []


async def reload_action(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    form = await request.post()
    name = str(form.get("soul", ""))
    registry = console.runtime.registry
    try:
        report = await asyncio.to_thread(registry.reload, name) if name else None
    except SoulbotError as exc:
        return console.render(request, "result.html", code=400, lines=[str(exc)])
    if report is None:
        report = await asyncio.to_thread(registry.reload_all)
    changed(request, "soul.reload", soul=name or "every soul")
    return console.render(request, "result.html", lines=reload_lines(report))


async def rollback_action(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    form = await request.post()
    soul, day = str(form.get("soul", "")), str(form.get("day", ""))
    runtime = console.runtime
    try:
        async with runtime.souls.hold(soul) as check:
            line = await asyncio.to_thread(rollback_soul, runtime.registry, soul, day, check)
    except SoulbotError as exc:
        return console.render(request, "result.html", code=400, lines=[str(exc)])
    changed(request, "soul.rollback", soul=soul, day=day)
    return console.render(request, "result.html", lines=[line])


@dataclass(frozen=True)
class SharedWiki:
    """A wiki the console shows: a soul's shared wiki, or a group's (`chat:`)."""

    soul: str
    scope: str
    compiled: str | None
    waiting: bool
    catalog: str
    pages: list[tuple[str, str, str]]  # id, summary, body
    conflicts: list[str]  # the pages a compile left waiting
    unreadable: str = ""  # the error class when the wiki could not be read


@dataclass(frozen=True)
class PrivateCount:
    soul: str
    wikis: int
    waiting: int
    last: str | None  # the newest compile among them


async def _shown(memory: Memory, soul: str, scope: str, compiled: str | None,
                 waiting: bool) -> SharedWiki:  # fmt: skip
    """A shown wiki (the shared one, a group's) as the page lists it; one that
    cannot be read is listed as such, by its error's class alone."""
    try:
        catalog, pages, conflicts = await asyncio.to_thread(_read_shared, memory.wiki(soul, scope))
    except (OSError, ValueError, SoulbotError) as exc:  # this wiki alone
        return SharedWiki(soul, scope, compiled, waiting, "", [], [], type(exc).__name__)
    return SharedWiki(soul, scope, compiled, waiting, catalog, pages, conflicts)


async def memory_page(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    memory = console.runtime.memory
    places = console.runtime.router.places
    groups = await places.groups() if places is not None else set()
    shared, private = [], []
    for soul in console.runtime.registry.all():
        status = await memory.compile_status(soul.id)
        for scope, compiled, waiting in status:
            if scope == SHARED or scope in groups:
                shared.append(await _shown(memory, soul.id, scope, compiled, waiting))
        others = [s for s in status if s[0] != SHARED and s[0] not in groups]
        dates = [c for _, c, _ in others if c]
        private.append(PrivateCount(soul.id, len(others), sum(1 for s in others if s[2]),
                                    max(dates) if dates else None))  # fmt: skip
    return console.render(request, "memory.html", shared=shared, private=private)


def _read_shared(wiki: Wiki | None) -> tuple[str, list[tuple[str, str, str]], list[str]]:
    """A shown wiki's catalog, pages (id, summary, body) and the pages a
    compile left waiting; empty without a wiki. Raises OSError, ValueError
    (not UTF-8, not JSON), SoulbotError (SoulLoadError, WikiPathRefused)."""
    if wiki is None:
        return "", [], []
    pages = [(p.id, p.summary, p.body) for p in wiki.list_pages()]
    catalog = wiki.catalog_text() or ""
    conflicts = sorted(wiki.read_meta().get("pending") or {})
    return catalog, pages, conflicts


async def compile_action(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    memory = console.runtime.memory
    wikis = await memory.pending_wikis()
    compiled = failed = 0
    for soul, scope in wikis:
        try:
            await memory.compile_one(soul, scope)
        except Exception:  # logged by the compiler (wiki.compile_failed); the next one goes on
            failed += 1
        else:
            compiled += 1
    changed(request, "memory.compile", wikis=str(compiled), failed=str(failed))
    lines = [f"{compiled} wiki(s) compiled."]
    if failed:
        lines.append(f"{failed} wiki(s) failed: the log says why (wiki.compile_failed).")
    return console.render(request, "result.html", lines=lines)
