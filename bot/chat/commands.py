"""Chat commands (DESIGN §8): `/help`, `/reset`, `/forget` for everyone; `/soul
...` and `/pair ...` for admins.

Admins are the ids in `admins.<platform>`; the console (the operator's own
terminal) is always an admin. A command from anyone else gets one refusal line
and is logged as `command.refused`; a command that runs is logged as
`command.run`, both with the platform, the user id and the command.
`/forget` erases nothing until it is repeated as `/forget confirm`.
`/soul compile` answers at once and reports when the compile is done, so the
chat is not held up while it runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

import structlog
from structlog.contextvars import bound_contextvars

from bot import prompts
from bot.chat.access import Access
from bot.chat.sessions import Send, SessionManager, reply_to, send_safely
from bot.errors import CompileFailed, SoulbotError
from bot.memory.service import Memory
from bot.model.usage import day_totals, usage_table
from bot.soul.registry import ReloadReport, SoulRegistry
from bot.soul.soulfile import new_epoch, rollback_soul
from bot.storage.db import Database
from bot.types import SHARED, Inbound, Outbound, Route

log = structlog.get_logger(__name__)

# The menu a platform shows (Telegram's command list; Discord's app commands).
MENU: tuple[tuple[str, str], ...] = (
    ("help", "What I can do and the commands"),
    ("reset", "Start a new conversation"),
    ("forget", "Erase what I remember from this conversation"),
    ("soul", "Admins: reload, status, compile, usage, rollback, epoch"),
    ("pair", "Admins: approve a pairing code, list the waiting ones"),
)
ADMIN_ONLY = frozenset({"soul", "pair"})
MAX_USAGE_DAYS = 366


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


def reload_lines(report: ReloadReport) -> list[str]:
    """One line per soul of a reload: loaded, failed (and why), removed."""
    lines = [
        f"- {soul.id}: loaded (version {soul.version}; {', '.join(soul.files)})"
        for soul in report.loaded
    ]
    for failure, kept in report.failed:
        after = "its previous version stays live" if kept else "it is not live"
        lines.append(f"- {failure.path.name}: failed: {failure.error} ({after})")
    lines += [f"- {soul_id}: removed (its folder is gone)" for soul_id in report.removed]
    return lines or ["- no soul folder found"]


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
        send: Send,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self._sessions = sessions
        self._memory = memory
        self._access = access
        self._db = db
        self._send = send
        self._clock = clock
        self._background: set[asyncio.Task[None]] = set()
        self._handlers: dict[str, Callable[[Inbound, Route, list[str]], Awaitable[str]]] = {
            "help": self._cmd_help,
            "start": self._cmd_help,  # Telegram sends /start when a chat opens
            "reset": self._cmd_reset,
            "forget": self._cmd_forget,
            "soul": self._cmd_soul,
            "pair": self._cmd_pair,
        }

    def knows(self, text: str) -> bool:
        """Whether `text` starts with one of the commands."""
        return parse(text)[0] in self._handlers

    async def run(self, inbound: Inbound, route: Route, text: str) -> str:
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
                return prompts.UNKNOWN_COMMAND.format(command=name) + "\n" + self._help(admin)
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
        if [a.lower() for a in args] != ["confirm"]:
            return prompts.FORGET_ASK
        await self._sessions.forget(route)
        return prompts.FORGET_DONE

    async def _cmd_soul(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        sub, rest = (args[0].lower(), args[1:]) if args else ("", [])
        if sub == "reload" and len(rest) <= 1:
            return await self._reload(rest[0] if rest else None)
        if sub == "status" and not rest:
            return await self._status()
        if sub == "compile" and len(rest) <= 1:
            return self._compile(inbound, rest[0] if rest else None)
        if sub == "usage" and len(rest) <= 1:
            return await self._usage(rest[0] if rest else "1")
        if sub == "rollback" and len(rest) == 2:
            return await self._file_op(rollback_soul, self._registry, rest[0], rest[1])
        if sub == "epoch" and len(rest) == 1:
            return await self._file_op(new_epoch, self._registry, rest[0])
        return prompts.SOUL_USAGE

    async def _file_op(self, op: Callable[..., str], *args: object) -> str:
        try:
            return await asyncio.to_thread(op, *args)
        except SoulbotError as exc:
            return str(exc)

    async def _reload(self, name: str | None) -> str:
        try:
            if name is None:
                report = await asyncio.to_thread(self._registry.reload_all)
            else:
                report = await asyncio.to_thread(self._registry.reload, name)
        except SoulbotError as exc:
            return f"Reload failed: {exc}"
        head = "Reload: every problem is listed; live souls keep answering."
        return "\n".join([head, *reload_lines(report)])

    async def _status(self) -> str:
        lines = ["Souls:"]
        for soul in self._registry.all():
            lines.append(f"- {soul.id} version {soul.version} ({', '.join(soul.files)})")
        lines.append(
            f"Sessions in memory: {len(self._sessions)}; turns in flight: "
            f"{len(self._sessions.in_flight())}"
        )
        lines.append("Memory wikis:")
        for soul in self._registry.all():
            status = await self._memory.compile_status(soul.id)
            shown = sorted(status, key=lambda s: (s[0] != SHARED, s[1] is None, s[1] or ""))
            for scope, compiled, waiting in shown[:10]:
                new = "; new traces waiting" if waiting else ""
                lines.append(f"- {soul.id} {scope}: {_when(compiled)}{new}")
            if len(status) > 10:
                lines.append(f"- {soul.id}: {len(status) - 10} more wikis")
        tokens, cost = await self._db.run(lambda conn: day_totals(conn, self._clock()))
        lines.append(f"Today (UTC): {tokens:,} tokens, ${cost:,.4f}")
        return "\n".join(lines)

    def _compile(self, inbound: Inbound, name: str | None) -> str:
        if name is not None and self._registry.get(name) is None:
            known = ", ".join(s.id for s in self._registry.all())
            return f"No soul with id '{name}' is loaded (loaded: {known})."
        souls = [name] if name else None
        task = asyncio.create_task(self._compile_and_report(inbound, souls))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return prompts.COMPILE_STARTED.format(souls=name or "every soul")

    async def _compile_and_report(self, inbound: Inbound, souls: Sequence[str] | None) -> None:
        failures: list[str] = []
        try:
            results = await self._memory.compile_all(souls)
        except CompileFailed as exc:  # each failure is logged as wiki.compile_failed
            results, failures = exc.results, exc.failures
        except Exception as exc:  # reported to the admin who asked, and logged
            log.exception("command.failed", command="soul compile")
            results, failures = [], [f"{type(exc).__name__}: {exc}"]
        traces = sum(r.traces for r in results)
        pages = sum(len(r.pages) for r in results)
        text = prompts.COMPILE_DONE.format(wikis=len(results), traces=traces, pages=pages)
        if failures:
            lines = "\n".join(f"- {failure}" for failure in failures)
            text = prompts.COMPILE_FAILED.format(count=len(failures), failures=lines, done=text)
        await send_safely(self._send, reply_to(inbound, text))

    async def _usage(self, days_text: str) -> str:
        if not days_text.isdigit() or not 1 <= int(days_text) <= MAX_USAGE_DAYS:
            return f"/soul usage [days]: days is a whole number from 1 to {MAX_USAGE_DAYS}."
        days = int(days_text)
        table = await self._db.run(
            lambda conn: usage_table(conn, days=days, by="soul", now=self._clock())
        )
        return f"```\n{table}\n```"

    async def _cmd_pair(self, inbound: Inbound, route: Route, args: list[str]) -> str:
        sub = args[0].lower() if args else ""
        if sub == "approve" and len(args) == 2:
            pending = await self._access.approve(args[1], f"{inbound.platform}:{inbound.user_id}")
            if pending is None:
                return prompts.PAIR_UNKNOWN.format(code=args[1])
            notice = Outbound(pending.platform, pending.chat_id, prompts.PAIR_WELCOME)
            await send_safely(self._send, notice)
            return prompts.PAIR_APPROVED.format(
                name=pending.user_name, platform=pending.platform, user_id=pending.user_id
            )
        if sub == "list" and len(args) == 1:
            waiting = await self._access.pending()
            if not waiting:
                return "No pairing code is waiting."
            now = self._clock()
            return "Waiting pairing codes:\n" + "\n".join(
                f"- {p.code}: {p.user_name} ({p.platform} id {p.user_id}), "
                f"{max(1, round((p.expires - now) / 60))} min left"
                for p in waiting
            )
        return prompts.PAIR_USAGE
