"""Inbound message -> route (soul, memory scope, session) -> session; chat commands.

Session keys (DESIGN §2): `discord:<channel_id>` (a thread is its own channel),
`discord:dm:<user_id>`, `telegram:<chat_id>` (+ `:<topic_id>` in forum groups),
`console:<name>`. The soul is the first matching binding's, else `default_soul`.
The memory scope is the binding's `memory`, else `memory.scope`; `auto` is
per user in a DM and per chat in a group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from adapters.base import Inbound, Outbound
from bot import prompts
from bot.agent import Route
from bot.config import Binding, Config
from bot.sessions import Send, SessionManager

if TYPE_CHECKING:
    from bot.memory.service import Memory

log = structlog.get_logger(__name__)

HELP = (
    "Commands: /reset starts a new conversation; /forget erases what I remember from "
    "this conversation (its memory and its history); /help shows this. Anything else is "
    "a message for me."
)
RESET_DONE = "Started a new conversation. I still remember what my memory holds."


def session_key(inbound: Inbound) -> str:
    """The session key of a message (see the module docstring)."""
    if inbound.platform == "discord":
        if inbound.is_dm:
            return f"discord:dm:{inbound.user_id}"
        return f"discord:{inbound.thread_id or inbound.chat_id}"
    if inbound.thread_id:
        return f"{inbound.platform}:{inbound.chat_id}:{inbound.thread_id}"
    return f"{inbound.platform}:{inbound.chat_id}"


def _matches(binding: Binding, inbound: Inbound) -> bool:
    if binding.platform != inbound.platform:
        return False
    if binding.guild is not None and str(binding.guild) != inbound.guild_id:
        return False
    if binding.channel is not None and str(binding.channel) != inbound.chat_id:
        return False
    return binding.chat is None or str(binding.chat) == inbound.chat_id


class Router:
    """Routes messages to sessions and answers chat commands."""

    def __init__(
        self,
        config: Config,
        default_soul: str,
        sessions: SessionManager,
        send: Send,
        memory: Memory | None = None,
    ) -> None:
        self._memory = memory
        self._config = config
        self._default_soul = default_soul
        self._sessions = sessions
        self._send = send

    def route(self, inbound: Inbound) -> Route:
        binding = next((b for b in self._config.bindings if _matches(b, inbound)), None)
        soul = binding.soul if binding else self._default_soul
        mode = (binding.memory if binding and binding.memory else None) or self._config.memory.scope
        if mode == "auto":
            mode = "per-user" if inbound.is_dm else "per-chat"
        if mode == "shared":
            scope = "shared"
        elif mode == "per-user":
            scope = f"user:{inbound.platform}:{inbound.user_id}"
        else:
            scope = f"chat:{inbound.platform}:{inbound.chat_id}"
        return Route(
            soul=soul,
            scope=scope,
            session=session_key(inbound),
            user=f"{inbound.platform}:{inbound.user_id}",
            is_dm=inbound.is_dm,
        )

    async def handle(self, inbound: Inbound) -> None:
        """Route one message; never raises (failures are logged)."""
        text = inbound.text.strip()
        if not text:
            return
        try:
            route = self.route(inbound)
            if text.startswith("/"):
                await self._command(text, inbound, route)
                return
            rendered = text if inbound.is_dm else f"{inbound.user_name}: {text}"
            await self._sessions.deliver(route, inbound, rendered)
        except Exception as exc:  # the dispatch boundary: one line, the loop lives on
            log.exception("router.failed", platform=inbound.platform, error=str(exc))

    async def _command(self, text: str, inbound: Inbound, route: Route) -> None:
        name = text.split()[0][1:].split("@")[0].lower()
        if name == "reset":
            await self._sessions.reset(route)
            reply = RESET_DONE
        elif name == "forget" and self._memory is not None:
            if route.scope == "shared":
                reply = prompts.FORGET_SHARED
            else:
                sessions = await self._memory.forget(route)
                await self._sessions.erase(sorted({*sessions, route.session}))
                reply = prompts.FORGET_DONE
        else:
            reply = HELP
        log.info("command.run", command=name, session=route.session, user=route.user)
        await self._send(Outbound(inbound.platform, inbound.chat_id, reply, inbound.thread_id))
