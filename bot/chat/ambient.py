"""Ambient mode (`respond: ambient`): the persona speaks unprompted when a
group's talk calls for it, and stays silent otherwise (docs/groups.md).

Every message of an ambient channel joins the channel's window (its last
WINDOW lines, the persona's own replies among them: `replied`; in memory only,
like the channel context). An unaddressed one is then decided in stages, each
logged as one `ambient.decided` line (its score, stage, decision and reason:
signal names, never a message's text):

1. `scorer`: bot/chat/ambient_score.py's figure, no model; below
   `groups.ambient.threshold`, silence.
2. `cap`, `cooldown`: at most `replies_per_hour` unprompted replies a channel
   in the hour before the message, none within `cooldown_s` after the last
   (the messages' own timestamps).
3. `model`: one forced `speak` tool call ({speak: bool, reason: str}) on
   `groups.ambient.model` (default `model.fallback`, else `model.name`),
   ledgered under the source `ambient`. It fails safe: no call of the tool, a
   malformed one, a refused or failed request, a budget reached: silence, and
   the one line says why (at warning level).

A "speak" reserves its place under the caps and hands the message to its
session as an unprompted turn (ledgered as `ambient_reply`); silence sends
nothing, ever.
"""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import structlog
from cachetools import LRUCache

from bot import prompts
from bot.chat.ambient_score import Line, Score, persona, score
from bot.chat.transcript import one_line
from bot.config.schema import AmbientConfig, ModelConfig
from bot.errors import BudgetExceeded, ModelError
from bot.model.client import ModelClient
from bot.model.usage import CallContext
from bot.soul.registry import SoulRegistry
from bot.types import Inbound, Route

log = structlog.get_logger(__name__)

WINDOW = 12
"""The lines of a channel the scorer and the gate read."""
CHATS = 4096
"""Channels whose window is kept (the ones heard from last)."""
LINE_CHARS = 300
"""A line of the gate's transcript is cut here."""
GATE_MAX_TOKENS = 200
HOUR_S = 3600.0
TOOL: dict[str, Any] = {
    "name": "speak",
    "description": prompts.AMBIENT_TOOL_DESCRIPTION,
    "input_schema": {
        "type": "object",
        "properties": {"speak": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["speak", "reason"],
    },
}
# Another member named in the text: a Discord mention, or an @username.
_MENTION = re.compile(r"<@!?\d+>|(?<![\w@])@\w{3,}")


@dataclass
class _Channel:
    lines: deque[Line] = field(default_factory=lambda: deque(maxlen=WINDOW))
    replies: deque[float] = field(default_factory=deque)
    """The timestamps of the unprompted replies of the last hour, oldest first."""


def to_other(inbound: Inbound) -> bool:
    """Whether `inbound` replies to or names another member (not the bot)."""
    if inbound.reply_to_bot or inbound.mentions_bot:
        return False
    replies = inbound.quote is not None or inbound.reply_to_id is not None
    return replies or bool(_MENTION.search(inbound.text))


class Ambient:
    """The windows and caps of every ambient channel, and the gate."""

    def __init__(
        self,
        config: AmbientConfig,
        model_config: ModelConfig,
        model: ModelClient,
        registry: SoulRegistry,
    ) -> None:
        self._config = config
        self._model = model
        self._registry = registry
        self._gate_model = config.model or model_config.fallback or model_config.name
        self._channels: LRUCache[str, _Channel] = LRUCache(maxsize=CHATS)

    def hear(self, session: str, inbound: Inbound) -> None:
        """Add a message of an ambient channel to its window."""
        channel = self._channels.get(session)
        if channel is None:
            channel = self._channels[session] = _Channel()
        channel.lines.append(Line(inbound.user_id, inbound.user_name, inbound.text, inbound.ts,
                                  to_other=to_other(inbound)))  # fmt: skip

    def replied(self, route: Route, text: str) -> None:
        """Add the persona's reply to the window of its channel, when it has one
        (the sessions' `on_reply`): just after the newest line."""
        channel = self._channels.get(route.session)
        if channel is None or route.is_dm:
            return
        ts = channel.lines[-1].ts if channel.lines else time.time()
        channel.lines.append(Line("", self._name(route.soul), text, ts, own=True))

    def drop(self, sessions: list[str]) -> None:
        """Forget the windows and caps of `sessions` (`/forget`)."""
        for session in sessions:
            self._channels.pop(session, None)

    def _name(self, soul: str) -> str:
        live = self._registry.live(soul)
        return live.soul.name if live is not None else soul

    async def speaks(self, route: Route) -> bool:
        """Whether the persona speaks, unprompted, after the newest line of the
        route's channel (`hear` it first); every stage is logged (module
        docstring). Never raises: a failure is silence."""
        channel = self._channels.get(route.session)
        live = self._registry.live(route.soul)
        if channel is None or not channel.lines or live is None:
            return False
        soul = live.soul
        lines = list(channel.lines)
        newest = lines[-1]
        scored = score(persona(soul.name, soul.id, soul.persona.role or ""), lines,
                       self._config.unanswered_after_s)  # fmt: skip
        reason = ",".join(scored.signals) or "none"
        if scored.value < self._config.threshold:
            return _decided(route, scored, "scorer", False, reason)
        replies = channel.replies
        while replies and newest.ts - replies[0] >= HOUR_S:
            replies.popleft()
        if len(replies) >= self._config.replies_per_hour:
            return _decided(route, scored, "cap", False, f"{len(replies)} unprompted this hour")
        if replies and newest.ts - replies[-1] < self._config.cooldown_s:
            return _decided(route, scored, "cooldown", False,
                            f"{newest.ts - replies[-1]:.0f} s since the last")  # fmt: skip
        ctx = CallContext(route.soul, route.scope, route.session, route.user, "ambient")
        verdict = await ask(self._model, self._gate_model, ctx, soul.name, soul.persona.role, lines)
        if isinstance(verdict, str):
            log.warning("ambient.decided", session=route.session, soul=route.soul,
                        score=scored.value, stage="model", decision="silent",
                        reason=f"the gate failed: {verdict}")  # fmt: skip
            return False
        if verdict:
            replies.append(newest.ts)
        return _decided(route, scored, "model", verdict, reason)


async def ask(
    model: ModelClient,
    gate_model: str,
    ctx: CallContext,
    name: str,
    role: str | None,
    lines: list[Line],
) -> bool | str:
    """The gate's answer on `lines` (the channel's window, the newest last) for
    the persona `name` (`role`): whether to speak, or why there is none (a
    failure, which the caller takes as silence). One forced `speak` call to
    `gate_model`, ledgered under `ctx`. Never raises."""
    own = prompts.AMBIENT_OWN.format(name=name)
    transcript = "\n".join(
        f"{own if line.own else one_line(line.name)}: {_cut(one_line(line.text))}" for line in lines
    )
    system = prompts.AMBIENT_SYSTEM.format(name=name, role=f", {role}" if role else "")
    try:
        answer = await model.use_tool(
            ctx,
            [{"type": "text", "text": system}],
            [{"role": "user", "content": [{"type": "text",
              "text": prompts.AMBIENT_USER.format(lines=transcript)}]}],
            TOOL, GATE_MAX_TOKENS, model=gate_model,
        )  # fmt: skip
    except BudgetExceeded as exc:
        return f"daily {exc.kind} budget reached"
    except ModelError as exc:
        return exc.cause
    except Exception as exc:  # a bug of ours must not make the persona speak
        log.exception("ambient.gate_error")
        return f"internal error: {type(exc).__name__}"
    if answer is None:
        return "no speak call in the answer"
    if not isinstance(answer, dict) or not isinstance(answer.get("speak"), bool):
        return "a malformed speak call"
    return bool(answer["speak"])


def _cut(text: str) -> str:
    return text if len(text) <= LINE_CHARS else text[:LINE_CHARS] + "…"


def _decided(route: Route, scored: Score, stage: str, speak: bool, reason: str) -> bool:
    log.info("ambient.decided", session=route.session, soul=route.soul, score=scored.value,
             stage=stage, decision="speak" if speak else "silent", reason=reason)  # fmt: skip
    return speak
