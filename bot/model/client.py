"""The model client: the anthropic SDK, a tool loop, the usage ledger and budgets.

Every call is checked against the budget first (a refused call is not made),
bounded by `model.max_concurrency` across sessions, and recorded in the ledger
(one row and one `llm.usage` line per call). The SDK retries 429, 529, 5xx and
timeouts `model.max_retries` times; what still fails is raised as
ModelUnavailable, and a request the API refuses (another 4xx) as ModelRejected.
A ModelUnavailable call is sent once more to `model.fallback` when one is set
(`llm.fallback`), and ledgered under the fallback's name.

`complete(..., on_text=...)` streams (`messages.stream`): `on_text` is awaited
with the round's text so far after each delta; a tool round's text is
followed by the next round's, from empty again, and a fallback starts over.
A stream that breaks mid-way is a ModelUnavailable like any lost call (the
SDK retries a request only before its answer starts).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import structlog

from bot.config.schema import ModelConfig
from bot.errors import ModelError, ModelRejected, ModelUnavailable
from bot.model.usage import CallContext, Ledger, Usage
from bot.types import Tool

log = structlog.get_logger(__name__)

# What a streamed call is told after each delta: the round's text so far.
OnText = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class Reply:
    """The text that ends a turn, the summed usage of its calls, how long the
    requests took (`model_ms`) and waited for a `max_concurrency` slot
    (`queue_ms`), in milliseconds across every round; the last call's stop
    reason (`end_turn` for a finished answer, `max_tokens` for one that ran out
    of room, `refusal`, ...)."""

    text: str
    usage: Usage
    calls: int
    model_ms: float
    queue_ms: float
    stop_reason: str = "end_turn"

    @property
    def cut(self) -> bool:
        """Whether the answer ended at `max_tokens`, mid-sentence."""
        return self.stop_reason == "max_tokens"

    @property
    def finished(self) -> bool:
        """Whether the model ended its answer itself (`end_turn` or a stop sequence)."""
        return self.stop_reason in ("end_turn", "stop_sequence")


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cache_creation_input_tokens=a.cache_creation_input_tokens + b.cache_creation_input_tokens,
        cache_read_input_tokens=a.cache_read_input_tokens + b.cache_read_input_tokens,
    )


def _usage(message: anthropic.types.Message) -> Usage:
    u = message.usage
    return Usage(
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        cache_creation_input_tokens=u.cache_creation_input_tokens or 0,
        cache_read_input_tokens=u.cache_read_input_tokens or 0,
    )


def estimate_request_tokens(*parts: Any) -> int:
    """A rough token count of request parts (JSON characters / 4)."""
    return sum(len(json.dumps(p, ensure_ascii=False)) for p in parts) // 4


def sdk_client(
    config: ModelConfig, base_url: str | None, max_retries: int
) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key=config.api_key.get_secret_value() or "no-key",
        base_url=base_url,
        timeout=config.timeout_s,
        max_retries=max_retries,
        # aiohttp's connection pool: httpx's checks every idle connection with
        # two system calls per request, most of the daemon's CPU under load.
        http_client=anthropic.DefaultAioHttpClient(),
    )


class ModelClient:
    """One AsyncAnthropic client shared by every session (two when the
    fallback is served at another base URL). Close it once."""

    def __init__(self, config: ModelConfig, ledger: Ledger) -> None:
        self._config = config
        self._ledger = ledger
        self._semaphore = asyncio.Semaphore(config.max_concurrency)
        self._client = sdk_client(config, config.base_url, config.max_retries)
        # The fallback is asked once: no retries of its own.
        self._own_fallback_client = (
            sdk_client(config, config.fallback_base_url, 0)
            if config.fallback_base_url not in (None, config.base_url)
            else None
        )
        self._fallback_client = self._own_fallback_client or self._client.with_options(
            max_retries=0
        )

    @property
    def model(self) -> str:
        return self._config.name

    async def close(self) -> None:
        try:
            await self._client.close()
        finally:
            if self._own_fallback_client is not None:
                await self._own_fallback_client.close()

    async def _call(
        self,
        ctx: CallContext,
        request: dict[str, Any],
        timing: list[float],
        on_text: OnText | None = None,
    ) -> anthropic.types.Message:
        """One request, and the same request to `model.fallback` when the
        primary is unavailable (ModelUnavailable) after its retries; adds
        (queued s, model s) to `timing`. The budget is checked once, for both.

        Raises BudgetExceeded; ModelRejected; ModelUnavailable (the primary's,
        when the fallback fails too, or there is none)."""
        if self._ledger.enforces_limits:
            estimate = estimate_request_tokens(request) + self._config.max_tokens
            await self._ledger.check(ctx, estimate)
        model = self.model
        try:
            message = await self._send(self._client, request, timing, on_text)
        except ModelUnavailable as primary:
            if self._config.fallback is None:
                raise
            model = self._config.fallback
            message = await self._fall_back(ctx, {**request, "model": model}, timing, primary,
                                            on_text)  # fmt: skip
        await self._ledger.record(ctx, message.model or model, _usage(message))
        return message

    async def _fall_back(
        self,
        ctx: CallContext,
        request: dict[str, Any],
        timing: list[float],
        primary: ModelUnavailable,
        on_text: OnText | None,
    ) -> anthropic.types.Message:
        """`request` (for the fallback model) sent once, after `primary` failed;
        both failures are logged as warnings (the caller logs the turn's end).
        Raises `primary` when the fallback fails too."""
        fallback = request["model"]
        log.warning("llm.fallback", model=self.model, fallback=fallback,
                    error_class=primary.error_class, source=ctx.source)  # fmt: skip
        try:
            return await self._send(self._fallback_client, request, timing, on_text)
        except ModelError as failed:
            log.warning("llm.fallback_failed", model=self.model, fallback=fallback,
                        error_class=failed.error_class, source=ctx.source)  # fmt: skip
            raise primary from failed

    async def _send(
        self,
        client: anthropic.AsyncAnthropic,
        request: dict[str, Any],
        timing: list[float],
        on_text: OnText | None = None,
    ) -> anthropic.types.Message:
        """One request through `client`, in a `max_concurrency` slot, streamed
        when there is `on_text`. Raises ModelError."""
        queued = time.perf_counter()
        async with self._semaphore:
            started = time.perf_counter()
            try:
                if on_text is None:
                    message: anthropic.types.Message = await client.messages.create(**request)
                else:
                    message = await _streamed(client, request, on_text)
            except anthropic.APIError as exc:
                raise translate(exc) from exc
            finally:
                timing[0] += started - queued
                timing[1] += time.perf_counter() - started
        return message

    async def use_tool(
        self,
        ctx: CallContext,
        system: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        tool: dict[str, Any],
        max_tokens: int | None = None,
    ) -> object:
        """One call that must use `tool` (a tool spec): returns its input, or
        None when the answer holds no such call or was cut at `max_tokens`
        (a cut call's input is incomplete). Raises BudgetExceeded, ModelError."""
        request = {
            "model": self.model,
            "max_tokens": max_tokens or self._config.max_tokens,
            "system": system,
            "messages": messages,
            "tools": [tool],
            "tool_choice": {"type": "tool", "name": tool["name"]},
        }
        message = await self._call(ctx, request, [0.0, 0.0])
        calls = [b for b in message.content if b.type == "tool_use" and b.name == tool["name"]]
        return calls[0].input if calls and message.stop_reason != "max_tokens" else None

    async def complete(
        self,
        ctx: CallContext,
        system: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        tools: Sequence[Tool] = (),
        max_tokens: int | None = None,
        on_text: OnText | None = None,
    ) -> Reply:
        """Run the model until it answers with text, calling tools on the way
        (at most `model.tool_rounds` rounds; the last round may not call one),
        streamed to `on_text` when given (see the module docstring).

        Raises BudgetExceeded when a call is refused and ModelError when a call
        fails after the SDK's retries. `messages` is not modified.
        """
        by_name = {tool.name: tool for tool in tools}
        convo = list(messages)
        total = Usage()
        timing = [0.0, 0.0]
        for round_no in range(1, self._config.tool_rounds + 1):
            request: dict[str, Any] = {
                "model": self.model,
                "max_tokens": max_tokens or self._config.max_tokens,
                "system": system,
                "messages": convo,
            }
            if tools:
                request["tools"] = [tool.spec() for tool in tools]
                if round_no == self._config.tool_rounds:
                    request["tool_choice"] = {"type": "none"}
            message = await self._call(ctx, request, timing, on_text)
            total = _add(total, _usage(message))
            calls = [b for b in message.content if b.type == "tool_use"]
            if message.stop_reason != "tool_use" or not calls:
                text = "".join(b.text for b in message.content if b.type == "text").strip()
                stop = message.stop_reason or "end_turn"
                return Reply(text, total, round_no, timing[1] * 1000, timing[0] * 1000, stop)
            content = [b.model_dump(mode="json", exclude_none=True) for b in message.content]
            convo.append({"role": "assistant", "content": content})
            results = [await _run_tool(by_name, call) for call in calls]
            convo.append({"role": "user", "content": results})
        # Another try asks again, and the model may well answer in text then.
        raise ModelUnavailable("ToolLoopError", "the model kept calling tools past the last round")


async def _streamed(
    client: anthropic.AsyncAnthropic, request: dict[str, Any], on_text: OnText
) -> anthropic.types.Message:
    """`request` streamed: `on_text` gets the text so far after each delta;
    returns the whole message, as `create` would. The raw events, gathered
    here: the SDK's `messages.stream` helper costs about twice the CPU a call
    (bench/turns.py), for event objects nothing here reads."""
    message: anthropic.types.Message | None = None
    pieces: dict[int, list[str]] = {}  # each block's text, or its tool input's JSON
    shown = ""
    stream = await client.messages.create(**request, stream=True)
    async with stream:
        async for event in stream:
            if event.type == "message_start":
                message = event.message
            elif event.type == "content_block_start" and message is not None:
                message.content.append(event.content_block)
                pieces[event.index] = []
            elif event.type == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    pieces[event.index].append(delta.text)
                    shown += delta.text
                    await on_text(shown)
                elif delta.type == "input_json_delta":
                    pieces[event.index].append(delta.partial_json)
            elif event.type == "message_delta" and message is not None:
                message.stop_reason = event.delta.stop_reason
                message.stop_sequence = event.delta.stop_sequence
                _totals(message.usage, event.usage)
    if message is None:  # another try may well stream whole
        raise ModelUnavailable("StreamError", "the stream ended before its message began")
    for index, block in enumerate(message.content):
        if block.type == "text":
            block.text = "".join(pieces.get(index, ()))
        elif block.type == "tool_use" and pieces.get(index):
            block.input = json.loads("".join(pieces[index]))
    return message


def _totals(usage: anthropic.types.Usage, delta: anthropic.types.MessageDeltaUsage) -> None:
    """A `message_delta`'s counts, which are totals so far (those it leaves
    out keep the `message_start` values)."""
    usage.output_tokens = delta.output_tokens
    if delta.input_tokens is not None:
        usage.input_tokens = delta.input_tokens
    if delta.cache_creation_input_tokens is not None:
        usage.cache_creation_input_tokens = delta.cache_creation_input_tokens
    if delta.cache_read_input_tokens is not None:
        usage.cache_read_input_tokens = delta.cache_read_input_tokens


async def _run_tool(tools: dict[str, Tool], call: Any) -> dict[str, Any]:
    tool = tools.get(call.name)
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id}
    if tool is None:
        return {**result, "content": f"unknown tool {call.name!r}", "is_error": True}
    try:
        return {**result, "content": await tool.handler(dict(call.input))}
    except Exception as exc:  # a tool's failure is the model's to handle
        log.warning("tool.failed", tool=call.name, error=f"{type(exc).__name__}: {exc}")
        return {**result, "content": f"{type(exc).__name__}: {exc}", "is_error": True}


def translate(exc: anthropic.APIError) -> ModelError:
    """The SDK's error as ours: ModelRejected for a 4xx our request caused
    (another try gets the same answer), ModelUnavailable for the rest
    (timeouts, lost connections, 429, 5xx, 529)."""
    status = exc.status_code if isinstance(exc, anthropic.APIStatusError) else None
    rejected = status is not None and 400 <= status < 500 and status != 429
    kind = ModelRejected if rejected else ModelUnavailable
    return kind(type(exc).__name__, _describe(exc))


def _describe(exc: anthropic.APIError) -> str:
    if isinstance(exc, anthropic.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}"
    return str(exc) or type(exc).__name__
