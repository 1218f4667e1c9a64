"""Chat commands (docs/commands.md): `/help`, `/reset`, `/forget`, `/memory ...`,
`/reminders`, `/timezone`, `/checkins` (bot/chat/reminder_commands.py) for everyone; `/soul ...`
and `/pair ...` for admins.

Admins are the ids in `admins.<platform>`; the console (the operator's own
terminal) is always an admin. A command from anyone else gets one refusal line
and is logged as `command.refused`; a command that runs is logged as
`command.run`, both with the platform, the user id and the command.
`/forget` erases nothing until it is repeated as `/forget confirm`.
`/soul compile` answers at once and reports when the compile is done, so the
chat is not held up while it runs. `/soul usage` is the usage table in the
terminal, and on Telegram and Discord (`CHARTED`: a phone's screen as often as
not) the compact form with the chart under it.

`/memory` works in a DM only (anywhere else it says so in one line, and shows
nothing of anyone's memory), on the person's own scope: `/memory` lists the
pages of their wiki (newest first: id, summary, date; at most 10, the rest
counted), how many daily logs it has, and the latest notes: the messages, theirs
and the soul's, that no compile has folded into the pages yet (the newest 3,
the rest counted); the whole reply stays under 1,900 characters, one message
on every platform. `/memory drop PAGE` takes one page out for good with the
messages it was built from (see `Memory.drop_page`); a daily log is not a page
to drop. `/memory export` sends the whole wiki as one markdown file, then one
line saying what it holds. Below the list, one line per server or group where
the person has member memory (`memory: per-member`); `/memory server ID` lists
that one, and takes `drop PAGE`, `export` and `forget` as the DM's own do.
`/forget` in a per-member place erases the caller's own member memory there
(anyone may: it is theirs), not the channel's conversation. `/forget` in a DM
erases the person's reminders (wherever set) and time zone too; an admin's
`/forget` of a group erases the reminders set there; a member's `/forget` in a
per-member place, the reminders they set there.

Replies never show a private scope (a person's or a chat's own wiki) outside the
admin's own DM: there `/soul status` and the compile report count them. Every
string a reply shows that soulbot did not write itself (names, words typed as
arguments, error messages) goes through `markup.plain`, so no Markdown in it
renders on any platform.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import structlog
from structlog.contextvars import bound_contextvars

from bot import prompts
from bot.chat.access import Access
from bot.chat.manager import SessionManager
from bot.chat.markup import plain
from bot.chat.reminder_commands import ReminderCommands
from bot.chat.sessions import Send, internal_cause, reply_to, send_safely
from bot.chat.takeback import Taken
from bot.chat.weblogin import WebAuth
from bot.errors import (
    BudgetExceeded,
    InvalidWikiPageIdError,
    ModelRejected,
    ModelUnavailable,
    SoulbotError,
    WikiBusy,
)
from bot.memory.compile import CompileResult
from bot.memory.service import Memory, MemoryView
from bot.memory.store import Trace
from bot.model.usage import day_totals, usage_table
from bot.model.usage_chart import render, usage_days
from bot.model.usage_compact import usage_compact
from bot.soul.persona import SOUL_ID
from bot.soul.registry import ReloadReport, SoulRegistry
from bot.soul.soulfile import new_epoch, rollback_soul
from bot.soul.soullock import SoulLocks
from bot.storage.db import Database
from bot.types import SHARED, Attachment, Inbound, Outbound, Route, Scope

log = structlog.get_logger(__name__)

# The menu a platform shows (Telegram's command list; Discord's app commands).
MENU: tuple[tuple[str, str], ...] = (
    ("help", "What I can do and the commands"),
    ("reset", "Start a new conversation"),
    ("forget", "Erase what I remember from this conversation"),
    ("retry", "Write my last answer again"),
    ("undo", "Take back your last message and my answer"),
    ("memory", "What I remember of you: list it, drop a page, export it"),
    ("reminders", "Your reminders: list them, cancel one"),
    ("timezone", "The time zone I read your times in: show it, set it"),
    ("checkins", "Whether I may write first to ask how something went"),
    ("soul", "Admins: reload, status, compile, usage, rollback, epoch, web"),
    ("pair", "Admins: approve or deny pairing codes, revoke approvals, list them"),
)
ADMIN_ONLY = frozenset({"soul", "pair"})
MAX_USAGE_DAYS = 366
MEMORY_PAGES_SHOWN = 10
MEMORY_NOTES_SHOWN = 3
MEMORY_MAX_CHARS = 1900  # one message on Discord (2,000) and Telegram (4,096)
MEMORY_SERVERS_SHOWN = 10
SHOWN_CHARS = 80  # a summary or a note is cut to this in the list
EXPORT_MAX_BYTES = 8 * 1024 * 1024  # under Discord's 10 MiB upload cap (Telegram's: 50 MB)
# Where `/soul usage` is read on a phone as often as not: the compact form and the chart
# (the terminal, an operator's wide screen, keeps the table, as `soulbot usage` prints it).
CHARTED = frozenset({"telegram", "discord"})

Reply = str | Outbound
"""A command's answer: its text (sent in the chat that asked), or the whole reply."""


def parse(text: str) -> tuple[str, list[str]]:
    """`/name@bot args...` -> ("name", [args]); the name is lower case."""
    words = text.split()
    return words[0][1:].split("@", 1)[0].lower(), words[1:]


def _when(iso: str | None) -> str:
    if iso is None:
        return "never compiled"
    try:
        moment = datetime.fromisoformat(iso).astimezone(UTC)
    except ValueError:
        return "compiled at an unreadable time"
    return "compiled " + moment.strftime("%Y-%m-%d %H:%M UTC")


def _error(error: object) -> str:
    """An error message as plain text on one line (its lines joined by "; ")."""
    return plain("; ".join(str(error).splitlines()))


def _day(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M UTC")


def reload_lines(report: ReloadReport) -> list[str]:
    """One line per soul of a reload: loaded (then one line per warning of its
    load: a field ignored, with its did-you-mean, ...), failed (and why), removed."""
    lines = []
    for soul in report.loaded:
        lines.append(f"- {soul.id}: loaded (version {soul.version}; {', '.join(soul.files)})")
        lines += [f"  - warning: {_error(warning)}" for warning in soul.warnings]
    for failure, kept in report.failed:
        after = "its previous version stays live" if kept else "it is not live"
        lines.append(f"- {plain(failure.path.name)}: failed: {_error(failure.error)} ({after})")
    lines += [f"- {soul_id}: removed (its folder is gone)" for soul_id in report.removed]
    return lines or ["- no soul folder found"]


@dataclass(frozen=True)
class WikiFailure:
    """A wiki the compile could not fold its traces into, and what stopped it."""

    soul: str
    scope: str
    error: Exception


def failure_reason(error: Exception) -> str:
    """Why a wiki did not compile, in a few fixed words: never the error's own
    text (a model error carries the API's answer; the log has it all), but the
    system's words for a failed file operation ("File too large")."""
    if isinstance(error, ModelRejected):
        return prompts.COMPILE_REJECTED
    if isinstance(error, ModelUnavailable):
        return prompts.COMPILE_UNAVAILABLE
    if isinstance(error, BudgetExceeded):
        return prompts.COMPILE_BUDGET
    if isinstance(error, OSError):
        return prompts.COMPILE_FILES.format(why=error.strerror or type(error).__name__)
    return prompts.COMPILE_OTHER


def failure_lines(failures: Sequence[WikiFailure], *, private: bool) -> list[str]:
    """One line per failed wiki (its error's class and reason) when `private`
    scopes may be named; otherwise the shared wikis by name and the private
    ones counted, per soul and kind of error."""
    lines: list[str] = []
    counted: Counter[tuple[str, str, str]] = Counter()
    for f in failures:
        kind, reason = type(f.error).__name__, failure_reason(f.error)
        if private or f.scope == SHARED:
            lines.append(f"- {f.soul} {f.scope}: {kind}: {reason}")
        else:
            counted[f.soul, kind, reason] += 1
    for (soul, kind, reason), count in sorted(counted.items()):
        wikis = "private wiki" if count == 1 else "private wikis"
        lines.append(f"- {soul}, {count} {wikis}: {kind}: {reason}")
    return lines


def _cut(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` on one line, as plain text, cut to `limit` characters with "…"."""
    line = " ".join(text.split())
    return plain(line if len(line) <= limit else line[: limit - 1].rstrip() + "…")


def _note(trace: Trace) -> str:
    when = datetime.fromtimestamp(trace.created_at, UTC).strftime("%Y-%m-%d %H:%M")
    return f"- {when} {_cut(trace.name or trace.speaker or '?', 40)}: {_cut(trace.text)}"


def memory_list(view: MemoryView, foot: str = prompts.MEMORY_FOOT,
                room: int = MEMORY_MAX_CHARS) -> str:  # fmt: skip
    """The `/memory` reply: the pages (newest first, at most MEMORY_PAGES_SHOWN,
    fewer when the reply would pass `room` characters; the rest counted), the
    daily logs counted, the latest notes not compiled yet, what to do next
    (`foot`)."""
    if not (view.pages or view.logs or view.waiting):
        return prompts.MEMORY_EMPTY
    pages = sorted(view.pages, key=lambda p: (p.updated, p.id), reverse=True)
    lines = [
        f"- {plain(p.id)}: {_cut(p.summary)}" + (f" ({plain(p.updated[:10])})" if p.updated else "")
        for p in pages
    ]
    tail = []
    if view.logs:
        tail.append(prompts.MEMORY_LOGS.format(count=len(view.logs), first=min(view.logs),
                                               last=max(view.logs)))  # fmt: skip
    if view.waiting:
        tail.append(prompts.MEMORY_NOTES.format(count=view.waiting))
        tail += [_note(t) for t in view.latest]
    else:
        tail.append(prompts.MEMORY_NO_NOTES)
    tail.append(foot)
    shown = min(len(lines), MEMORY_PAGES_SHOWN)
    while True:
        head = [prompts.MEMORY_HEAD]
        if pages:
            head.append(prompts.MEMORY_PAGES.format(count=len(pages)))
        more = (
            [prompts.MEMORY_MORE_PAGES.format(count=len(lines) - shown)]
            if shown < len(lines)
            else []
        )
        text = "\n".join([*head, *lines[:shown], *more, *tail])
        if len(text) <= room or shown == 0:
            return text
        shown -= 1


class Commands:
    """Runs one command and returns the reply."""

    def __init__(
        self,
        *,
        registry: SoulRegistry,
        sessions: SessionManager,
        memory: Memory,
        access: Access,
        db: Database,
        souls: SoulLocks,
        send: Send,
        notes: Callable[[], list[str]] = list,
        clock: Callable[[], float] = time.time,
        reminders: ReminderCommands | None = None,
        web_login: WebAuth | None = None,
    ) -> None:
        self._notes = notes
        self._reminders = reminders
        self._web_login = web_login
        self._registry = registry
        self._sessions = sessions
        self._memory = memory
        self._access = access
        self._db = db
        self._souls = souls
        self._send = send
        self._clock = clock
        self._background: set[asyncio.Task[None]] = set()
        self._handlers: dict[str, Callable[[Inbound, Route, list[str]], Awaitable[Reply]]] = {
            "help": self._cmd_help,
            "start": self._cmd_help,  # Telegram sends /start when a chat opens
            "reset": self._cmd_reset,
            "forget": self._cmd_forget,
            "retry": self._cmd_retry,
            "undo": self._cmd_undo,
            "memory": self._cmd_memory,
            "soul": self._cmd_soul,
            "pair": self._cmd_pair,
        }
        if reminders is not None:
            self._handlers["reminders"] = self._cmd_reminders
            self._handlers["timezone"] = self._cmd_timezone
            self._handlers["checkins"] = self._cmd_checkins

    async def wait(self, seconds: float) -> int:
        """Wait up to `seconds` for the `/soul compile` runs and the take-backs'
        answers started here (the daemon's shutdown); returns how many still run."""
        if self._background:
            await asyncio.wait(set(self._background), timeout=seconds)
        return len(self._background)

    def knows(self, text: str) -> bool:
        """Whether `text` starts with one of the commands."""
        return parse(text)[0] in self._handlers

    async def run(self, inbound: Inbound, route: Route, text: str) -> Outbound:
        """The reply to the command `text`, in the chat (and thread) of `inbound`."""
        reply = await self._answer(inbound, route, text)
        return reply if isinstance(reply, Outbound) else reply_to(inbound, reply)

    async def _answer(self, inbound: Inbound, route: Route, text: str) -> Reply:
        name, args = parse(text)
        what = " ".join([name, *args[:1]])
        with bound_contextvars(platform=inbound.platform, user_id=inbound.user_id, command=what):
            admin = self._access.is_admin(inbound.platform, inbound.user_id)
            if name in ADMIN_ONLY and not admin:
                log.warning("command.refused")
                return prompts.ADMIN_ONLY.format(command=name)
            handler = self._handlers.get(name)
            if handler is None:
                log.info("command.unknown")
                return (
                    prompts.UNKNOWN_COMMAND.format(command=plain(name)) + "\n" + self._help(admin)
                )
            log.info("command.run")
            return await handler(inbound, route, args)

    def _help(self, admin: bool) -> str:
        return prompts.HELP + ("\n" + prompts.ADMIN_HELP if admin else "")

    async def _cmd_help(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        return self._help(self._access.is_admin(inbound.platform, inbound.user_id))

    async def _cmd_reset(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        await self._sessions.reset(route)
        return prompts.RESET_DONE

    async def _cmd_forget(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        if route.scope == SHARED:
            return prompts.FORGET_SHARED
        if Scope.parse(route.scope).per_member:  # the caller's own memory of the server
            mine = replace(route, scope=str(Scope.parse(route.scope).member(inbound.user_id)))
            if [a.lower() for a in args] != ["confirm"]:
                return prompts.FORGET_ASK_MEMBER
            try:
                await self._sessions.forget(mine)
            except WikiBusy:
                return prompts.MEMORY_BUSY
            if self._reminders is not None:  # their own set here
                await self._reminders.forget(inbound, route)
            return prompts.FORGET_DONE_MEMBER
        # A group's memory is everyone's there: only an admin may erase it.
        group = not route.is_dm
        if group and not self._access.is_admin(inbound.platform, inbound.user_id):
            log.warning("command.refused", reason="group memory")
            return prompts.FORGET_GROUP_MEMBER
        if [a.lower() for a in args] != ["confirm"]:
            return prompts.FORGET_ASK_GROUP if group else prompts.FORGET_ASK
        try:
            await self._sessions.forget(route)
        except WikiBusy:  # a compile in another process held the wiki all along
            return prompts.MEMORY_BUSY
        if route.is_dm and self._reminders is not None:  # theirs, wherever they were set
            await self._reminders.forget(inbound, route)
        return prompts.FORGET_DONE_GROUP if group else prompts.FORGET_DONE

    async def _cmd_retry(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        return await self._take_back(inbound, route, undo=False)

    async def _cmd_undo(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        return await self._take_back(inbound, route, undo=True)

    async def _take_back(self, inbound: Inbound, route: Route, *, undo: bool) -> str:
        """`/retry` or `/undo` (bot/chat/takeback.py): only for whom the answer
        was to, anyone in a DM (it is theirs), or an admin. Queued in the
        conversation's order, then answered when done, so the chat goes on
        meanwhile (a message sent during a `/retry` is answered after it); ""
        now: the line comes then."""
        admin = self._access.is_admin(inbound.platform, inbound.user_id)

        def may(who: str | None) -> bool:
            return route.is_dm or admin or who == inbound.user_id

        # A retry is a model call, held to the rate limit as a message is; an undo
        # asks nothing of the model, and taking one's words back is never held back.
        wait = 0.0 if undo else self._sessions.admit(inbound)
        if wait:
            return prompts.RETRY_SLOW_DOWN.format(seconds=max(1, math.ceil(wait)))

        done = await self._sessions.take_back(route, undo, may, admin)
        task = asyncio.create_task(self._taken_back(inbound, done, undo), name="take-back")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return ""

    async def _taken_back(self, inbound: Inbound, done: Awaitable[Taken], undo: bool) -> None:
        """Say how a take-back went, once it is done."""
        cause = None
        try:
            taken = await done
            outcome = taken.outcome
        except WikiBusy:
            text = prompts.MEMORY_BUSY
        except Exception as exc:  # logged here; the person gets the one line
            log.exception("command.failed", command="undo" if undo else "retry")
            text, cause = prompts.APOLOGY, internal_cause(exc, "the command")
        else:
            if outcome == "refused":
                log.warning("command.refused", platform=inbound.platform,
                            user_id=inbound.user_id, reason="answer to someone else")  # fmt: skip
            text = {"none": prompts.UNDO_NONE if undo else prompts.RETRY_NONE,
                    "refused": prompts.TAKE_BACK_OTHER, "gone": prompts.TAKE_BACK_GONE,
                    "undone": prompts.UNDO_DONE, "retried": prompts.RETRY_DONE,
                    "failed": prompts.RETRY_FAILED}[outcome]  # fmt: skip
            if taken.kept:  # a member's: the group's pages hold what others said too
                text += "\n" + prompts.TAKE_BACK_PAGES_KEPT
        await send_safely(self._send, reply_to(inbound, text, cause))

    async def _cmd_reminders(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        assert self._reminders is not None  # registered only with them
        admin = self._access.is_admin(inbound.platform, inbound.user_id)
        return await self._reminders.reminders(inbound, route, args, admin)

    async def _cmd_timezone(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        assert self._reminders is not None  # registered only with them
        return await self._reminders.timezone(inbound, args)

    async def _cmd_checkins(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        assert self._reminders is not None  # registered only with them
        return await self._reminders.checkins(inbound, route, args)

    async def _cmd_memory(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        if not route.is_dm:
            return prompts.MEMORY_DM_ONLY
        if route.scope == SHARED:
            return prompts.MEMORY_SHARED
        sub = args[0].lower() if args else ""
        if not args:
            return await self._memory_list(route)
        if sub == "server":
            return await self._server_memory(inbound, route, args[1:])
        if sub == "drop" and len(args) > 1:
            return await self._drop(route, " ".join(args[1:]))
        if sub == "export" and len(args) == 1:
            return await self._export(inbound, route)
        return prompts.MEMORY_USAGE

    async def _memory_list(self, route: Route) -> str:
        """`/memory`: the DM's own wiki, then a line per server with member memory."""
        servers = []
        for scope in await self._memory.member_scopes(route):
            view = await self._memory.view(replace(route, scope=scope), 0)
            if view.pages or view.waiting:
                member = Scope.parse(scope)
                servers.append(prompts.MEMORY_SERVER.format(
                    platform=member.platform, server=member.server, pages=len(view.pages),
                    waiting=view.waiting))  # fmt: skip
        if not servers:
            return memory_list(await self._memory.view(route, MEMORY_NOTES_SHOWN))
        more = len(servers) - MEMORY_SERVERS_SHOWN
        lines = [prompts.MEMORY_SERVERS, *servers[:MEMORY_SERVERS_SHOWN]]
        lines += [prompts.MEMORY_MORE_SERVERS.format(count=more)] if more > 0 else []
        tail = "\n".join([*lines, prompts.MEMORY_SERVERS_FOOT])
        view = await self._memory.view(route, MEMORY_NOTES_SHOWN)
        return memory_list(view, room=MEMORY_MAX_CHARS - len(tail) - 1) + "\n" + tail

    async def _server_memory(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        """`/memory server ID [drop PAGE | export | forget [confirm]]`: the
        person's member memory of one server or group."""
        if not args:
            return prompts.MEMORY_SERVER_USAGE
        person = Scope.parse(route.scope)
        try:
            member = Scope("member", person.platform, person.id, server=args[0])
        except ValueError:
            return prompts.MEMORY_BAD_SERVER.format(server=plain(args[0]))
        there = replace(route, scope=str(member))
        names = {"platform": member.platform, "server": member.server}
        sub, rest = (args[1].lower(), args[2:]) if len(args) > 1 else ("", [])
        if not sub:
            view = await self._memory.view(there, MEMORY_NOTES_SHOWN)
            head = prompts.MEMORY_SERVER_HEAD.format(**names)
            foot = prompts.MEMORY_SERVER_FOOT.format(server=member.server)
            return head + "\n" + memory_list(view, foot, MEMORY_MAX_CHARS - len(head) - 1)
        if sub == "drop" and rest:
            return await self._drop(there, " ".join(rest))
        if sub == "export" and not rest:
            return await self._export(inbound, there, f"server-{member.server}-")
        if sub == "forget" and [a.lower() for a in rest] in ([], ["confirm"]):
            if not rest:
                return prompts.MEMORY_SERVER_FORGET_ASK.format(**names)
            try:
                await self._sessions.forget(there)
            except WikiBusy:
                return prompts.MEMORY_BUSY
            return prompts.MEMORY_SERVER_FORGOTTEN.format(**names)
        return prompts.MEMORY_SERVER_USAGE

    async def _drop(self, route: Route, page_id: str) -> str:
        shown = plain(page_id)
        try:
            dropped = await self._memory.drop_page(route, page_id)
        except InvalidWikiPageIdError as exc:
            return prompts.MEMORY_BAD_ID.format(page=shown, reason=plain(exc.reason))
        except WikiBusy:
            return prompts.MEMORY_BUSY
        except ValueError:  # a daily log (the shared scope is refused before)
            return prompts.MEMORY_NOT_LOG.format(page=shown)
        if dropped is None:
            return prompts.MEMORY_NO_PAGE.format(page=shown)
        return prompts.MEMORY_DROPPED.format(page=shown, traces=dropped.traces,
                                             lines=dropped.log_lines)  # fmt: skip

    async def _export(self, inbound: Inbound, route: Route, label: str = "") -> str:
        """Send the wiki as a file to the chat that asked; the line returned
        says what it holds, or why it did not go."""
        text = await self._memory.export(route)
        view = await self._memory.view(route, 0)
        data = text.encode("utf-8")
        if len(data) > EXPORT_MAX_BYTES:
            return prompts.MEMORY_TOO_LARGE.format(size=round(len(data) / 2**20, 1),
                                                   limit=EXPORT_MAX_BYTES // 2**20)  # fmt: skip
        day = datetime.fromtimestamp(self._clock(), UTC).strftime("%Y-%m-%d")
        file = Attachment(f"memory-{route.soul}-{label}{day}.md", data, "text/markdown")
        try:
            await self._send(replace(reply_to(inbound, ""), attachment=file))
        except Exception as exc:  # the platform refused it: the person is told, the log has it
            log.error("adapter.error", platform=inbound.platform, stage="memory export",
                      error=f"{type(exc).__name__}: {exc}")  # fmt: skip
            return prompts.MEMORY_EXPORT_FAILED.format(reason=type(exc).__name__)
        return prompts.MEMORY_EXPORTED.format(pages=len(view.pages), logs=len(view.logs),
                                              waiting=view.waiting)  # fmt: skip

    async def _cmd_soul(self, inbound: Inbound, route: Route, args: list[str]) -> Reply:
        sub, rest = (args[0].lower(), args[1:]) if args else ("", [])
        if sub == "reload" and len(rest) <= 1:
            if rest and not SOUL_ID.fullmatch(rest[0]):  # a soul id or folder name, no path
                return prompts.RELOAD_ID_ONLY
            return await self._reload(rest[0] if rest else None)
        if sub == "status" and not rest:
            return await self._status(route, private=inbound.is_dm)
        if sub == "compile" and len(rest) <= 1:
            return self._compile(inbound, rest[0] if rest else None)
        if sub == "usage" and len(rest) <= 1:
            return await self._usage(inbound, rest[0] if rest else "1")
        if sub == "rollback" and len(rest) == 2:
            return await self._file_op(rest[0], rollback_soul, self._registry, rest[0], rest[1])
        if sub == "epoch" and len(rest) == 1:
            return await self._file_op(rest[0], new_epoch, self._registry, rest[0])
        if sub == "web" and not rest:
            return await self._web_link(inbound)
        return prompts.SOUL_USAGE

    async def _web_link(self, inbound: Inbound) -> str:
        """A one-time sign-in link to the web console, in the admin's own DM only."""
        if self._web_login is None or not self._web_login.enabled:
            return prompts.WEB_OFF
        if not inbound.is_dm:
            return prompts.WEB_DM_ONLY
        link = await self._web_login.issue_link(f"{inbound.platform}:{inbound.user_id}")
        log.info("web.link_given", admin=f"{inbound.platform}:{inbound.user_id}")
        return prompts.WEB_LINK.format(link=link, minutes=self._web_login.link_minutes)

    async def _file_op(self, soul: str, op: Callable[..., str], *args: object) -> str:
        """`op(*args, check)`: a write of `soul`'s SOUL.md, under its lock."""
        try:
            async with self._souls.hold(soul) as check:
                return await asyncio.to_thread(op, *args, check)
        except SoulbotError as exc:
            return _error(exc)

    async def _reload(self, name: str | None) -> str:
        try:
            if name is None:
                report = await asyncio.to_thread(self._registry.reload_all)
            else:
                report = await asyncio.to_thread(self._registry.reload, name)
        except SoulbotError as exc:
            return f"Reload failed: {_error(exc)}"
        head = "Reload: every problem is listed; live souls keep answering."
        return "\n".join([head, *reload_lines(report)])

    async def _status(self, route: Route, *, private: bool) -> str:
        """Souls, this conversation's mood, sessions, wikis, today's usage; each
        private wiki by name only when `private` (the admin's own DM), else counted."""
        lines = ["Souls:"]
        for soul in self._registry.all():
            lines.append(f"- {soul.id} version {soul.version} ({', '.join(soul.files)})")
        lines.append(await self._mood_line(route))
        lines.append(
            f"Sessions in memory: {len(self._sessions)}; turns in flight: "
            f"{len(self._sessions.in_flight())}"
        )
        lines.append("Memory wikis:")
        for soul in self._registry.all():
            lines += await self._wiki_lines(soul.id, private=private)
        tokens, cost = await self._db.run(lambda conn: day_totals(conn, self._clock()))
        lines.append(f"Today (UTC): {tokens:,} tokens, ${cost:,.4f}")
        notes = self._notes()
        if notes:
            lines += ["Platforms:", *(f"- {note}" for note in notes)]
        return "\n".join(lines)

    async def _mood_line(self, route: Route) -> str:
        """This conversation's mood, with its soul's default and allowed moods."""
        mood = await self._sessions.mood(route)
        soul = self._registry.get(route.soul)
        persona = soul.persona if soul is not None else None
        about = []
        if persona is not None and persona.default_mood:
            about.append(f"default {plain(persona.default_mood)}")
        if persona is not None and persona.allowed_moods:
            about.append("allowed: " + ", ".join(plain(m) for m in persona.allowed_moods))
        shown = plain(mood) if mood else "none"
        return f"Mood here ({route.soul}): {shown}" + (f" ({'; '.join(about)})" if about else "")

    async def _wiki_lines(self, soul: str, *, private: bool) -> list[str]:
        """The soul's wikis, the shared one first, at most 10 by name; without
        `private`, only the shared one by name and the private ones counted."""
        status = await self._memory.compile_status(soul)
        shown = sorted(status, key=lambda s: (s[0] != SHARED, s[1] is None, s[1] or ""))
        hidden = [] if private else [s for s in shown if s[0] != SHARED]
        if hidden:
            shown = [s for s in shown if s[0] == SHARED]
        lines = []
        for scope, compiled, waiting in shown[:10]:
            new = "; new traces waiting" if waiting else ""
            lines.append(f"- {soul} {scope}: {_when(compiled)}{new}")
        if len(shown) > 10:
            lines.append(f"- {soul}: {len(shown) - 10} more wikis")
        if hidden:
            wikis = "private wiki" if len(hidden) == 1 else "private wikis"
            ready = sum(1 for s in hidden if s[2])
            lines.append(f"- {soul}: {len(hidden)} {wikis} ({ready} with new traces waiting)")
        return lines

    def _compile(self, inbound: Inbound, name: str | None) -> str:
        if name is not None and self._registry.get(name) is None:
            known = ", ".join(s.id for s in self._registry.all())
            return f"No soul with id '{plain(name)}' is loaded (loaded: {known})."
        souls = [name] if name else None
        task = asyncio.create_task(self._compile_and_report(inbound, souls), name="soul-compile")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return prompts.COMPILE_STARTED.format(souls=name or "every soul")

    async def _compile_and_report(self, inbound: Inbound, souls: Sequence[str] | None) -> None:
        """Compile each wiki with new traces (one that fails is logged as
        `wiki.compile_failed` and the others go on), then report to the chat
        that asked: private wikis by name only in the admin's own DM."""
        results: list[CompileResult] = []
        failures: list[WikiFailure] = []
        try:
            for soul, scope in await self._memory.pending_wikis(souls):
                try:
                    results.append(await self._memory.compile_one(soul, scope))
                except Exception as exc:  # logged by the compiler; the next wiki still compiles
                    failures.append(WikiFailure(soul, scope, exc))
        except Exception as exc:  # finding the wikis failed: reported and logged
            log.exception("command.failed", command="soul compile")
            stopped = prompts.COMPILE_STOPPED.format(error=type(exc).__name__,
                                                     reason=failure_reason(exc))  # fmt: skip
            await send_safely(self._send, reply_to(inbound, stopped))
            return
        traces = sum(r.traces for r in results)
        pages = sum(len(r.pages) for r in results)
        text = prompts.COMPILE_DONE.format(wikis=len(results), traces=traces, pages=pages)
        if failures:
            lines = "\n".join(failure_lines(failures, private=inbound.is_dm))
            text = prompts.COMPILE_FAILED.format(count=len(failures), failures=lines, done=text)
        await send_safely(self._send, reply_to(inbound, text))

    async def _usage(self, inbound: Inbound, days_text: str) -> Reply:
        """The usage table; on a `CHARTED` platform the compact form and, when
        the days hold any usage, the chart by source as the reply's image (a
        drawing that fails is logged, and the text goes alone)."""
        if not days_text.isdigit() or not 1 <= int(days_text) <= MAX_USAGE_DAYS:
            return f"/soul usage [days]: days is a whole number from 1 to {MAX_USAGE_DAYS}."
        days, now = int(days_text), self._clock()
        if inbound.platform not in CHARTED:
            table = await self._db.run(
                lambda conn: usage_table(conn, days=days, by="soul", now=now)
            )
            return f"```\n{table}\n```"
        text = await self._db.run(lambda conn: usage_compact(conn, days=days, now=now))
        reply = reply_to(inbound, f"```\n{text}\n```")
        try:
            usage = await self._db.run(lambda conn: usage_days(conn, days=days, now=now))
            if not usage.parts:
                return reply
            png = await asyncio.to_thread(render, usage)
        except Exception as exc:  # the figures are in the text: they go without the picture
            log.error("usage.chart_failed", days=days, error=f"{type(exc).__name__}: {exc}")
            return reply
        chart = Attachment(f"usage-{usage.days[-1]}.png", png, "image/png")
        return replace(reply, image=chart)

    async def _cmd_pair(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        sub, rest = (args[0].lower(), args[1:]) if args else ("", [])
        admin = f"{inbound.platform}:{inbound.user_id}"
        if sub == "approve" and len(rest) == 1:
            return await self._approve(rest[0], admin)
        if sub == "deny" and len(rest) == 1:
            pending = await self._access.deny(rest[0], admin)
            if pending is None:
                return prompts.PAIR_UNKNOWN.format(code=plain(rest[0]))
            return prompts.PAIR_DENIED.format(
                code=pending.code,
                name=plain(pending.user_name),
                platform=pending.platform,
                user_id=pending.user_id,
            )
        if sub == "revoke" and len(rest) == 1 and rest[0].count(":") == 1:
            platform, user_id = rest[0].split(":")
            if platform and user_id:
                return await self._revoke(platform.lower(), user_id, admin)
        if sub == "list" and not rest:
            return await self._pair_list()
        return prompts.PAIR_USAGE

    async def _approve(self, code: str, admin: str) -> str:
        pending = await self._access.approve(code, admin)
        if pending is None:
            return prompts.PAIR_UNKNOWN.format(code=plain(code))
        notice = Outbound(pending.platform, pending.chat_id, prompts.PAIR_WELCOME)
        await send_safely(self._send, notice)
        return prompts.PAIR_APPROVED.format(
            name=plain(pending.user_name), platform=pending.platform, user_id=pending.user_id
        )

    async def _revoke(self, platform: str, user_id: str, admin: str) -> str:
        who = plain(f"{platform}:{user_id}")
        if await self._access.revoke(platform, user_id, admin):
            reply, after = prompts.PAIR_REVOKED.format(who=who), prompts.PAIR_GATED
        else:
            reply, after = prompts.PAIR_NOT_APPROVED.format(who=who), ""
        if self._access.configured(platform, user_id):
            after = prompts.PAIR_STILL_ADMITTED
        return f"{reply} {after}" if after else reply

    async def _pair_list(self) -> str:
        """The waiting codes (names as plain text) and the approved people."""
        waiting, approved = await self._access.pending(), await self._access.approved()
        if not waiting and not approved:
            return prompts.PAIR_NONE
        now, lines = self._clock(), []
        if waiting:
            lines.append(f"Waiting pairing codes ({len(waiting)}):")
            lines += [
                f"- {p.code}: {plain(p.user_name)} ({p.platform} id {p.user_id}), "
                f"{max(1, round((p.expires - now) / 60))} min left"
                for p in waiting
            ]
        if approved:
            lines.append(f"Approved people ({len(approved)}):")
            lines += [
                f"- {a.platform} id {a.user_id}, approved {_day(a.approved_at)} by {a.approved_by}"
                for a in approved
            ]
        return "\n".join(lines)
