"""`soulbot check --online`'s question to the model: who answers, and whether
tool calls work there.

Two calls at most, through the same SDK client the daemon builds (key, base
URL, timeout), with no retry: a 1-token `messages.create` (token counting is
not served by every compatible server), then, when it answered, one tiny
forced tool call. Neither is ledgered or counted against a budget. The memory
compile and the heartbeat need tool calls; chat turns do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anthropic

from bot import prompts
from bot.config.schema import ModelConfig
from bot.model.client import sdk_client, translate

# Room for the forced call's input ({"ready": true}) and nothing more.
TOOL_MAX_TOKENS = 64
PROBE_TOOL: dict[str, Any] = {
    "name": prompts.PROBE_TOOL_NAME,
    "description": prompts.PROBE_TOOL_DESCRIPTION,
    "input_schema": {
        "type": "object",
        "properties": {"ready": {"type": "boolean"}},
        "required": ["ready"],
    },
}


@dataclass(frozen=True)
class ProbeResult:
    """What the model said: `answered`, the model id its answer named (None
    when it failed: `error`, one line); `tools`, whether the forced tool call
    came back as one (None when it was not asked), `tools_error` why not."""

    answered: str | None
    error: str | None = None
    tools: bool | None = None
    tools_error: str | None = None


def _line(error: object, key: str) -> str:
    """`error` on one line, the API key masked should a server echo it."""
    text = "; ".join(str(error).splitlines())
    return text.replace(key, "[key]") if key else text


async def probe(config: ModelConfig) -> ProbeResult:
    """Ask the model of `config` (see the module docstring). Never raises for
    what the model or the network answers."""
    client = sdk_client(config, config.base_url, max_retries=0)
    key = config.api_key.get_secret_value()
    ask = {"model": config.name, "max_tokens": 1}
    try:
        try:
            first = await _create(client, ask, prompts.PROBE_USER)
        except anthropic.APIError as exc:
            return ProbeResult(None, _line(translate(exc), key))
        forced = {"type": "tool", "name": prompts.PROBE_TOOL_NAME}
        ask |= {"max_tokens": TOOL_MAX_TOKENS, "tools": [PROBE_TOOL], "tool_choice": forced}
        try:
            second = await _create(client, ask, prompts.PROBE_TOOL_USER)
        except anthropic.APIError as exc:
            error = _line(translate(exc), key)
            return ProbeResult(first.model, tools=False, tools_error=error)
        called = any(
            block.type == "tool_use" and block.name == prompts.PROBE_TOOL_NAME
            for block in second.content
        )
        why = None if called else f"it answered without the tool call (stop: {second.stop_reason})"
        return ProbeResult(first.model, tools=called, tools_error=why)
    finally:
        await client.close()


async def _create(
    client: anthropic.AsyncAnthropic, request: dict[str, Any], text: str
) -> anthropic.types.Message:
    message: anthropic.types.Message = await client.messages.create(
        **request, messages=[{"role": "user", "content": text}]
    )
    return message
