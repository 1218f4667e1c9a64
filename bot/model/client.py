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
SDK retries a request only before its answer starts). The API bills it all the
same, so once its message began it is one ledger row too: the input as
`message_start` gave it, the output the larger of the last count the stream gave
and the characters streamed / 4.

Another server of the Messages API behind `model.base_url` (docs/model-servers.md)
may report no cache figures (they stay None: unknown) and may not do tool calling:
a turn whose tools it refuses (a 400 whose reason speaks of tools) is sent again
without them, and once that works the client's turns offer no tools
(`llm.tools_refused`) and a forced tool it refuses is a ToolsUnsupported.

The model's text leaves here as text every store and platform takes
(`bot.text.model_text`: no NUL, no lone surrogate), streamed, whole or as a
forced tool's input.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import structlog

from bot.config.schema import ModelConfig
from bot.errors import ModelError, ModelRejected, ModelUnavailable, ToolsUnsupported
from bot.model.cause import failure_cause, server_reason
from bot.model.images import block_tokens
from bot.model.usage import CallContext, Ledger, Usage
from bot.text import model_text
from bot.types import Tool

log = structlog.get_logger(__name__)

# Said of a server that refuses tools, in `llm.tools_refused` and ToolsUnsupported.
_NO_TOOLS = (
    "it does not do tool calling, which the memory compile and the heartbeat need: "
    "they wait, their inputs kept (docs/model-servers.md)"
)

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


def _usage(message: anthropic.types.Message) -> Usage:
    """The message's usage; a cache figure the server left out stays None (unknown)."""
    u = message.usage
    return Usage(
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        cache_creation_input_tokens=u.cache_creation_input_tokens,
        cache_read_input_tokens=u.cache_read_input_tokens,
    )


def estimate_request_tokens(*parts: Any) -> int:
    """A rough token count of request parts: JSON characters / 4, and each
    image block of a request's messages as the API counts it, from the size
    its header declares (`images.block_tokens`): its data is never serialised,
    so the estimate costs the same for a small image and a large one."""
    chars = tokens = 0
    for part in parts:
        for piece in _pieces(part):
            if isinstance(piece, dict) and piece.get("type") == "image":
                tokens += block_tokens(piece)
            else:
                chars += len(json.dumps(piece, ensure_ascii=False))
    return chars // 4 + tokens


def _pieces(part: Any) -> Iterator[Any]:
    """`part`, a request split block by block where its images may be (its
    messages' content); anything else whole."""
    if not isinstance(part, dict) or not isinstance(part.get("messages"), list):
        yield part
        return
    yield {key: value for key, value in part.items() if key != "messages"}
    for message in part["messages"]:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            yield {key: value for key, value in message.items() if key != "content"}
            yield from content
        else:
            yield message


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
        # Set when the server refused a request for its tools and answered it
        # without them: it does not do tool calling (`_call_offering_tools`).
        self._tools_refused = False

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
            estimate = estimate_request_tokens(request) + request["max_tokens"]
            await self._ledger.check(ctx, estimate)
        model = request["model"]
        try:
            message = await self._send(ctx, self._client, request, timing, on_text)
        except ModelUnavailable as primary:
            if self._config.fallback is None:
                raise
            model = self._config.fallback
            message = await self._fall_back(ctx, {**request, "model": model}, timing, primary,
                                            on_text)  # fmt: skip
        await self._ledger.record(ctx, message.model or model, _usage(message))
        return message

    async def _call_offering_tools(
        self,
        ctx: CallContext,
        request: dict[str, Any],
        timing: list[float],
        on_text: OnText | None,
    ) -> anthropic.types.Message:
        """`request`, and when the server refuses it (a 400 whose reason speaks of
        tools) for the tools it offers, the same without them: a server that
        answers that one does not do tool calling, and this client's later calls
        offer none (`llm.tools_refused`, logged once). A 400 for anything else
        (a prompt too long, a bad image) is not sent again: it would be refused
        again. Raises as `_call`."""
        try:
            return await self._call(ctx, request, timing, on_text)
        except ModelRejected as exc:
            if "tools" not in request or exc.status != 400 or "tool" not in exc.reason.lower():
                raise
            bare = {k: v for k, v in request.items() if k not in ("tools", "tool_choice")}
            message = await self._call(ctx, bare, timing, on_text)
            if not self._tools_refused:  # turns under way at once may each find out
                self._tools_refused = True
                log.warning("llm.tools_refused", model=self.model, error=exc.reason,
                            effect="turns offer no tools from now on; " + _NO_TOOLS)  # fmt: skip
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
            return await self._send(ctx, self._fallback_client, request, timing, on_text)
        except ModelError as failed:
            log.warning("llm.fallback_failed", model=self.model, fallback=fallback,
                        error_class=failed.error_class, source=ctx.source)  # fmt: skip
            raise primary from failed

    async def _send(
        self,
        ctx: CallContext,
        client: anthropic.AsyncAnthropic,
        request: dict[str, Any],
        timing: list[float],
        on_text: OnText | None = None,
    ) -> anthropic.types.Message:
        """One request through `client`, in a `max_concurrency` slot, streamed
        when there is `on_text` (a stream cut after it began is recorded here:
        `_record_cut`). Raises ModelError."""
        queued = time.perf_counter()
        async with self._semaphore:
            started = time.perf_counter()
            try:
                if on_text is None:
                    message: anthropic.types.Message = await client.messages.create(**request)
                else:
                    cut = functools.partial(self._record_cut, ctx)
                    message = await _streamed(client, request, on_text, cut)
            except anthropic.APIError as exc:
                raise translate(exc, self._cause(exc, client)) from exc
            finally:
                timing[0] += started - queued
                timing[1] += time.perf_counter() - started
        return message

    def _cause(self, exc: anthropic.APIError, client: anthropic.AsyncAnthropic) -> str:
        """`exc` in one line for an operator (`failure_cause`), the API key never in it."""
        cause = failure_cause(exc, str(client.base_url), self._config.timeout_s)
        key = self._config.api_key.get_secret_value().strip()
        return cause.replace(key, "[redacted]") if len(key) >= 8 else cause

    async def _record_cut(self, ctx: CallContext, begun: anthropic.types.Message) -> None:
        """Record the usage of a stream cut after its message began (billed by
        the API); a failed write is one line, as the cut's own error goes on."""
        try:
            await self._ledger.record(ctx, begun.model, _usage(begun))
        except Exception as exc:
            log.warning("llm.usage_lost", model=begun.model, source=ctx.source,
                        error=f"{type(exc).__name__}: {exc}")  # fmt: skip

    async def use_tool(
        self,
        ctx: CallContext,
        system: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        tool: dict[str, Any],
        max_tokens: int | None = None,
        model: str | None = None,
    ) -> object:
        """One call that must use `tool` (a tool spec), to `model` (default
        `model.name`; a fallback is `model.fallback`): returns its input, or
        None when the answer holds no such call (a server that ignores the tool
        the request forces answers in text) or was cut at `max_tokens` (a cut
        call's input is incomplete).

        Raises ToolsUnsupported when the server refuses the request (a 400) and
        is known not to do tool calling (it answered a turn once its tools were
        taken out: `_call_offering_tools`; docs/model-servers.md); else the
        ModelRejected, with the server's reason. Raises BudgetExceeded, ModelError."""
        request = {
            "model": model or self.model,
            "max_tokens": max_tokens or self._config.max_tokens,
            "system": system,
            "messages": messages,
            "tools": [tool],
            "tool_choice": {"type": "tool", "name": tool["name"]},
        }
        name = tool["name"]
        try:
            message = await self._call(ctx, request, [0.0, 0.0])
        except ModelRejected as exc:
            if exc.status != 400 or not self._tools_refused:  # a 400 for another reason
                raise
            raise ToolsUnsupported(
                exc.error_class,
                f"the model server refused a request with the tool {name} ({exc.reason}); "
                f"{_NO_TOOLS}",
                exc.cause,
                exc.status,
            ) from exc
        calls = [b for b in message.content if b.type == "tool_use" and b.name == name]
        return _cleaned(calls[0].input) if calls and message.stop_reason != "max_tokens" else None

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
        total: Usage | None = None
        timing = [0.0, 0.0]
        for round_no in range(1, self._config.tool_rounds + 1):
            request: dict[str, Any] = {
                "model": self.model,
                "max_tokens": max_tokens or self._config.max_tokens,
                "system": system,
                "messages": convo,
            }
            if tools and not self._tools_refused:
                request["tools"] = [tool.spec() for tool in tools]
                if round_no == self._config.tool_rounds:
                    request["tool_choice"] = {"type": "none"}
            message = await self._call_offering_tools(ctx, request, timing, on_text)
            total = _usage(message) if total is None else total + _usage(message)
            calls = [b for b in message.content if b.type == "tool_use"]
            if message.stop_reason != "tool_use" or not calls:
                text = model_text("".join(b.text for b in message.content if b.type == "text"))
                text = text.strip()
                stop = message.stop_reason or "end_turn"
                return Reply(text, total, round_no, timing[1] * 1000, timing[0] * 1000, stop)
            content = [b.model_dump(mode="json", exclude_none=True) for b in message.content]
            convo.append({"role": "assistant", "content": content})
            results = [await _run_tool(by_name, call) for call in calls]
            convo.append({"role": "user", "content": results})
        # Another try asks again, and the model may well answer in text then.
        raise ModelUnavailable("ToolLoopError", "the model kept calling tools past the last round")


async def _streamed(
    client: anthropic.AsyncAnthropic,
    request: dict[str, Any],
    on_text: OnText,
    cut: Callable[[anthropic.types.Message], Awaitable[None]],
) -> anthropic.types.Message:
    """`request` streamed: `on_text` gets the text so far after each delta;
    returns the whole message, as `create` would. When the stream fails after
    its message began, `cut` is awaited with that message (its usage so far,
    the output at least the characters streamed / 4) before the error goes on.
    The raw events, gathered here: the SDK's `messages.stream` helper costs
    about twice the CPU a call (bench/turns.py), for event objects nothing here
    reads."""
    message: anthropic.types.Message | None = None
    pieces: dict[int, list[str]] = {}  # each block's text, or its tool input's JSON
    shown = ""
    stream = await client.messages.create(**request, stream=True)
    async with stream, _counted_if_cut(lambda: message, pieces, cut):
        async for event in stream:
            if event.type == "message_start":
                message = event.message
            elif event.type == "content_block_start" and message is not None:
                message.content.append(event.content_block)
                pieces[event.index] = []
            elif event.type == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    piece = model_text(delta.text)
                    pieces[event.index].append(piece)
                    shown += piece
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


@contextlib.asynccontextmanager
async def _counted_if_cut(
    begun: Callable[[], anthropic.types.Message | None],
    pieces: dict[int, list[str]],
    cut: Callable[[anthropic.types.Message], Awaitable[None]],
) -> AsyncIterator[None]:
    """Around a stream: when it fails after its message began (`begun()`),
    await `cut` with that message, its output at least the characters of
    `pieces` / 4, then let the error go on."""
    try:
        yield
    except BaseException:
        message = begun()
        if message is not None:
            streamed = sum(len(p) for block in pieces.values() for p in block)
            message.usage.output_tokens = max(message.usage.output_tokens, -(-streamed // 4))
            await cut(message)
        raise


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


def _cleaned(value: object) -> object:
    """A forced tool's input with `model_text` applied to every string in it."""
    if isinstance(value, str):
        return model_text(value)
    if isinstance(value, dict):
        return {model_text(str(k)): _cleaned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    return value


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


def translate(exc: anthropic.APIError, cause: str = "") -> ModelError:
    """The SDK's error as ours: ModelRejected for a 4xx our request caused
    (another try gets the same answer), ModelUnavailable for the rest
    (timeouts, lost connections, 429, 5xx, 529); `cause` for the operator."""
    status = exc.status_code if isinstance(exc, anthropic.APIStatusError) else None
    rejected = status is not None and 400 <= status < 500 and status != 429
    kind = ModelRejected if rejected else ModelUnavailable
    return kind(type(exc).__name__, _describe(exc), cause, status)


def _describe(exc: anthropic.APIError) -> str:
    """`HTTP <status>: <the server's own reason>` (`server_reason`)."""
    if not isinstance(exc, anthropic.APIStatusError):
        return str(exc) or type(exc).__name__
    return f"HTTP {exc.status_code}: {server_reason(exc)[:500]}"
