"""One turn of a soul: the prompt laid out for the cache, then the model.

Layout (docs/conversations.md), in the order the API caches it: tools; the soul's system
blocks, ending at a breakpoint (the same bytes for every session on one version
of the soul); the session's own system blocks (its mood, right after the soul's
hard limits; its scope's memory index; the compacted-history summary), ending at
a breakpoint; the history, with a
breakpoint where the previous turn's history ended (so the previous turn's cache
entry is read) and one at its end; then the per-turn part in the newest user
message: the recall block, the group chat's unaddressed lines
(bot/chat/context.py), the clock, the note that asks for a line on the images,
and the new messages, each with its images before its text.
Nothing that changes per turn sits above a breakpoint, and nothing of one
conversation above the soul's: a mood change (`set_mood`, bot/chat/moods.py)
writes that conversation's own blocks and history again, once, and leaves every
other conversation's prefix as it was, byte for byte. Images are sent in the
turn of their message only; the history keeps their placeholder.

A session keeps the soul version its cached prefix was written with while that
cache is warm (`Agent.soul`): a heartbeat write of SOUL.md would otherwise make
every live session of the soul write its whole prefix, history included, again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from bot import prompts
from bot.chat.history import Entry
from bot.chat.media import Image
from bot.chat.transcript import transcript
from bot.errors import SoulbotError
from bot.model.client import ModelClient, OnText, Reply
from bot.model.usage import CallContext, Source
from bot.soul.prompt import current_mood, mood_block, system_blocks
from bot.soul.registry import LiveSoul, SoulRegistry
from bot.types import Route, Tool

if TYPE_CHECKING:
    from bot.memory.service import Memory

EPHEMERAL = {"type": "ephemeral"}
# How long the API keeps a cache entry after the last request that read or wrote
# it: the breakpoints above set no `ttl`, so the default, "5m".
CACHE_TTL_S = 300.0


@dataclass(frozen=True)
class CachedSoul:
    """The soul version a session's cached prefix was written with, and the
    time (the agent's clock) until which the cache keeps it."""

    version: LiveSoul
    warm_until: float


@dataclass(frozen=True)
class Prompt:
    """A laid-out request; `breakpoint_id` is the history entry whose block
    carries the history-end breakpoint (None with no history); `soul`, the soul
    version it was laid out with, warm for CACHE_TTL_S once it is sent (None
    from `layout` alone); `mood`, the mood its conversation is in (the
    `current_mood` of that version)."""

    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    breakpoint_id: int | None
    soul: CachedSoul | None = None
    mood: str | None = None


def _text(text: str, cached: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if cached:
        block["cache_control"] = dict(EPHEMERAL)
    return block


def layout(
    soul_blocks: Sequence[str],
    session_blocks: Sequence[str],
    history: Sequence[Entry],
    new: Sequence[Entry],
    previous_breakpoint: int | None,
    turn_blocks: Sequence[str],
    images: Mapping[int, Sequence[Image]] | None = None,
) -> Prompt:
    """Lay out one request (see the module docstring). `history` must start with
    a user entry; consecutive entries of one role share a message; `turn_blocks`
    (the recall block, the clock) open the newest user message; `images`, by
    entry id, go just before the text of their entry in `new`."""
    system = [_text(t) for t in soul_blocks]
    if system:
        system[-1]["cache_control"] = dict(EPHEMERAL)
    if session_blocks:
        system += [_text(t) for t in session_blocks]
        system[-1]["cache_control"] = dict(EPHEMERAL)
    messages: list[dict[str, Any]] = []

    def add(role: str, block: dict[str, Any]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})

    for i, entry in enumerate(history):
        last = i == len(history) - 1
        add(entry.role, _text(entry.text, cached=last or entry.id == previous_breakpoint))
    for text in turn_blocks:
        add("user", _text(text))
    for entry in new:
        for image in (images or {}).get(entry.id, ()):
            add("user", image.block())
        add("user", _text(entry.text))
    return Prompt(system, messages, history[-1].id if history else None)


def now_line(now: float, zone: ZoneInfo | None) -> str:
    """The turn's clock line: UTC, and the person's own time when their zone is known."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M")
    if zone is None or zone.key == "UTC":
        return prompts.NOW_LINE.format(now=stamp)
    local = datetime.fromtimestamp(now, zone).strftime("%a %H:%M")
    return prompts.NOW_LINE_LOCAL.format(now=stamp, local=local, zone=zone.key)


class Agent:
    """Builds each turn's prompt from the live soul and runs it on the model."""

    def __init__(
        self,
        registry: SoulRegistry,
        model: ModelClient,
        memory: Memory | None = None,
        clock: Callable[[], float] = time.time,
        more_tools: Callable[[Route], list[Tool]] | None = None,
    ) -> None:
        self._more_tools = more_tools
        self._registry = registry
        self._model = model
        self._memory = memory
        self._clock = clock

    def soul(self, route: Route, cached: CachedSoul | None, now: float) -> LiveSoul:
        """The soul version for a turn of `route` at `now`: the `cached` one
        while the cache is warm, it is a version of the route's soul, and no
        reload since was `at_once` (an operator's); else the live one. The
        session lets go of `cached` itself at /reset and compaction.

        Raises SoulbotError when the route's soul is not loaded.
        """
        live = self._registry.live(route.soul)
        if live is None:
            raise SoulbotError(f"soul '{route.soul}' is not loaded")
        if (
            cached is not None
            and now < cached.warm_until
            and cached.version.soul.id == route.soul
            and cached.version.renewal == live.renewal
        ):
            return cached.version
        return live

    def mood(self, route: Route, cached: CachedSoul | None, chosen: str | None) -> str | None:
        """The mood a turn of `route` would show now (`current_mood` under the
        version `soul` picks), for a session that moved to `chosen` (None: it
        never did); `chosen` itself while the route's soul is not loaded."""
        try:
            persona = self.soul(route, cached, self._clock()).soul.persona
        except SoulbotError:
            return chosen
        return current_mood(persona, chosen)

    async def prompt(
        self,
        route: Route,
        summary: str | None,
        history: Sequence[Entry],
        new: Sequence[Entry],
        previous_breakpoint: int | None,
        cached: CachedSoul | None = None,
        context: Sequence[str] = (),
        images: Mapping[int, Sequence[Image]] | None = None,
        mood: str | None = None,
        zone: ZoneInfo | None = None,
    ) -> Prompt:
        """The request for a turn, with the soul version `soul` picks given
        the session's `cached` one; `context`: the group chat's unaddressed
        lines since the bot last spoke; `images` by entry of `new`; `zone`: the
        time zone of whom it answers, when known (the clock line gives their
        time too); `mood`:
        the one the session moved to (None: the soul's default). Raises
        SoulbotError when the soul is gone."""
        now = self._clock()
        version = self.soul(route, cached, now)
        blocks = [b.text for b in system_blocks(version.soul)]
        persona = version.soul.persona
        current = current_mood(persona, mood)
        mood_text = mood_block(persona, current)
        session_blocks = [mood_text] if mood_text else []
        turn_blocks = []
        if self._memory is not None:
            index = await self._memory.scope_index(route)
            if index:
                session_blocks.append(prompts.SCOPE_INDEX_BLOCK.format(index=index))
            # This turn's messages, and today's turns still in the history, are in
            # the prompt already: they need no recalling.
            today = now - now % 86400
            skip_after = max(today, (history or new)[0].ts)
            query = "\n".join(e.text for e in new)
            recalled = await self._memory.recall(route, query, skip_after)
            if recalled:
                turn_blocks.append(prompts.RECALL_BLOCK.format(lines=recalled))
        if summary:
            session_blocks.append(prompts.SUMMARY_BLOCK.format(summary=summary))
        if context:
            turn_blocks.append(prompts.CONTEXT_BLOCK.format(lines="\n".join(context)))
        turn_blocks.append(now_line(now, zone))
        count = sum(len(v) for v in (images or {}).values())
        if count:
            turn_blocks.append(prompts.IMAGES_NOTE.format(count=count))
        prompt = layout(blocks, session_blocks, history, new, previous_breakpoint, turn_blocks,
                        images)  # fmt: skip
        return replace(prompt, soul=CachedSoul(version, now + CACHE_TTL_S), mood=current)

    async def turn(
        self,
        route: Route,
        prompt: Prompt,
        on_text: OnText | None = None,
        own_tools: Sequence[Tool] = (),
        source: Source = "turn",
    ) -> Reply:
        """Run a turn, streamed to `on_text` when given, offering the session's
        `own_tools` after the others; ledgered as `source` (`ambient_reply` for
        an unprompted one). Raises BudgetExceeded, ModelError."""
        ctx = CallContext(route.soul, route.scope, route.session, route.user, source)
        tools = self._memory.tools(route) if self._memory is not None else []
        if self._more_tools is not None:
            tools += self._more_tools(route)
        tools += own_tools
        return await self._model.complete(ctx, prompt.system, prompt.messages, tools,
                                          on_text=on_text)  # fmt: skip

    async def unprompted(
        self, route: Route, history: Sequence[Entry], note: str, source: Source
    ) -> Reply:
        """One call for a message the soul writes unasked in `route`'s
        conversation (a reminder come due): the soul's blocks, the
        conversation's own recent `history` (nothing recalled, no other scope)
        and `note` saying what to write; ledgered as `source`. Raises
        SoulbotError when the soul is gone, BudgetExceeded, ModelError."""
        version = self.soul(route, None, self._clock())
        blocks = [b.text for b in system_blocks(version.soul)]
        start = next((i for i, e in enumerate(history) if e.role == "user"), len(history))
        prompt = layout(blocks, [], history[start:], [], None, [note])
        ctx = CallContext(route.soul, route.scope, route.session, route.user, source)
        return await self._model.complete(ctx, prompt.system, prompt.messages)

    async def summarize(self, route: Route, summary: str | None, entries: Sequence[Entry]) -> str:
        """Fold `entries` into the running summary (a `compact` model call).

        Raises BudgetExceeded, ModelError.
        """
        lines = transcript((e.role, e.text) for e in entries)
        text = prompts.COMPACT_USER.format(summary=summary or "(none)", transcript=lines)
        ctx = CallContext(route.soul, route.scope, route.session, route.user, "compact")
        reply = await self._model.complete(
            ctx,
            [_text(prompts.COMPACT_SYSTEM)],
            [{"role": "user", "content": [_text(text)]}],
        )
        return reply.text
