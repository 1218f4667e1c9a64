"""`set_mood`: the tool a turn's model moves its conversation's mood with.

Offered only when the soul has `allowedMoods`; its description names them, so
it is the same for every conversation of one soul version (the tools open the
cached prefix, before the soul's blocks). A mood outside the list is refused:
the tool's answer says so and nothing changes. A change is the session's
(bot/chat/sessions.py): kept in `session_moods`, logged as `mood.changed`, and
shown from the next turn's prompt on (bot/soul/prompt.py `mood_block`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from bot import prompts
from bot.soul.persona import Persona
from bot.types import Tool

log = structlog.get_logger(__name__)

# Moves the conversation to a mood of the list (raises what the store raised).
Change = Callable[[str], Awaitable[None]]


def _error(message: str, code: str) -> str:
    return json.dumps({"error": message, "details": {"code": code}}, ensure_ascii=False)


def set_mood_tool(persona: Persona, current: Callable[[], str | None], change: Change) -> Tool:
    """The tool for a conversation of `persona` (which has allowedMoods), in
    the mood `current()`: its answer is JSON, the `mood` it is in now (with
    `was` when it changed) or an `error` with a code."""
    allowed = persona.allowed_moods
    shown = ", ".join(allowed)

    async def set_mood(args: dict[str, Any]) -> str:
        mood, was = str(args.get("mood", "")).strip(), current()
        if mood not in allowed:
            return _error(f"{mood!r} is not one of your moods ({shown}); "
                          f"your mood stays {was or 'unset'}", "MOOD_NOT_ALLOWED")  # fmt: skip
        if mood == was:
            return json.dumps({"mood": mood}, ensure_ascii=False)
        try:
            await change(mood)
        except Exception as exc:  # the store failed: the mood stays, the model is told
            log.warning("history.write_failed", error_class=type(exc).__name__,
                        error=str(exc), what="mood")  # fmt: skip
            return _error(f"your mood could not be kept; it stays {was or 'unset'}",
                          "MOOD_NOT_KEPT")  # fmt: skip
        return json.dumps({"mood": mood, "was": was}, ensure_ascii=False)

    schema = {
        "type": "object",
        "properties": {"mood": {"type": "string", "enum": list(allowed)}},
        "required": ["mood"],
    }
    return Tool("set_mood", prompts.SET_MOOD.format(moods=shown), schema, set_mood)
