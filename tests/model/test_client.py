"""The model client against the fake Messages API, through the real SDK."""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

import pytest

from bot.config.load import parse_config
from bot.config.schema import BudgetConfig, ModelConfig
from bot.errors import (
    BudgetExceeded,
    ConfigError,
    ModelError,
    ModelRejected,
    ModelUnavailable,
    ToolsUnsupported,
)
from bot.model.client import ModelClient
from bot.model.usage import CallContext, Ledger
from bot.storage.db import Database
from bot.types import Tool
from tests.fakes.anthropic_fake import Compat, FakeAnthropic
from tests.kit import capture_logs

CTX = CallContext("lark", "user:test:1", "test:1", "test:1", "turn")
SYSTEM = [{"type": "text", "text": "You are Lark."}]
HELLO = [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


def model_config(url: str, **overrides: Any) -> ModelConfig:
    settings = {"base_url": url, "api_key": "k", "max_retries": 0, **overrides}
    return parse_config(json.dumps({"model": settings}), "t", {}).model


def client(
    db: Database, url: str, budget: BudgetConfig | None = None, **overrides: Any
) -> ModelClient:
    ledger = Ledger(db, budget=budget or BudgetConfig(daily_tokens_per_soul=None,
                                                       daily_tokens_per_user=None))  # fmt: skip
    return ModelClient(model_config(url, **overrides), ledger)


async def ledger_rows(db: Database) -> list[tuple[Any, ...]]:
    return await db.run(
        lambda c: c.execute("SELECT source, input_tokens, output_tokens FROM usage").fetchall()
    )


async def test_a_text_answer_and_its_usage(fake: FakeAnthropic, db: Database) -> None:
    model = client(db, fake.url)
    reply = await model.complete(CTX, SYSTEM, HELLO)
    await model.close()
    assert reply.text == "echo: hello"
    assert reply.calls == 1
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
    assert fake.requests[0]["system"] == SYSTEM
    assert fake.requests[0]["model"] == "claude-sonnet-4-6"
    assert await ledger_rows(db) == [("turn", reply.usage.input_tokens, reply.usage.output_tokens)]


async def test_the_tool_loop(fake: FakeAnthropic, db: Database) -> None:
    seen: list[dict[str, Any]] = []

    async def lookup(args: dict[str, Any]) -> str:
        seen.append(args)
        return "Bob lives in Lisbon"

    tool = Tool("lookup", "Look a fact up", {"type": "object"}, lookup)
    fake.script_tool_use("lookup", {"who": "bob"}, text="Let me check.")
    fake.script_text("Bob lives in Lisbon, I recall.")
    model = client(db, fake.url)
    reply = await model.complete(CTX, SYSTEM, HELLO, [tool])
    await model.close()
    assert reply.text == "Bob lives in Lisbon, I recall."
    assert reply.calls == 2
    assert seen == [{"who": "bob"}]
    second = fake.requests[1]
    assert second["tools"][0]["name"] == "lookup"
    assert second["messages"][1]["role"] == "assistant"
    result = second["messages"][2]["content"][0]
    assert result["type"] == "tool_result" and result["content"] == "Bob lives in Lisbon"
    assert len(await ledger_rows(db)) == 2  # every call is a ledger row
    assert HELLO == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]


async def test_the_last_round_may_not_call_a_tool(fake: FakeAnthropic, db: Database) -> None:
    async def noop(args: dict[str, Any]) -> str:
        return "ok"

    tool = Tool("noop", "Nothing", {"type": "object"}, noop)
    fake.script_tool_use("noop", {})
    fake.script_tool_use("noop", {})
    model = client(db, fake.url, tool_rounds=3)
    reply = await model.complete(CTX, SYSTEM, HELLO, [tool])
    await model.close()
    assert reply.calls == 3
    assert [r.get("tool_choice") for r in fake.requests] == [None, None, {"type": "none"}]


async def test_tool_failures_go_back_to_the_model(fake: FakeAnthropic, db: Database) -> None:
    async def broken(args: dict[str, Any]) -> str:
        raise ValueError("disk on fire")

    tool = Tool("broken", "Fails", {"type": "object"}, broken)
    fake.script_tool_use("broken", {})
    fake.script_tool_use("missing", {})
    model = client(db, fake.url)
    with capture_logs() as logs:
        await model.complete(CTX, SYSTEM, HELLO, [tool])
    await model.close()
    first = fake.requests[1]["messages"][-1]["content"][0]
    assert first["is_error"] is True and "disk on fire" in first["content"]
    second = fake.requests[2]["messages"][-1]["content"][0]
    assert second["is_error"] is True and "unknown tool 'missing'" in second["content"]
    assert any(e["event"] == "tool.failed" for e in logs)


@pytest.mark.parametrize(
    ("status", "error_class", "kind"),
    [
        (429, "RateLimitError", ModelUnavailable),
        (529, "OverloadedError", ModelUnavailable),
        (500, "InternalServerError", ModelUnavailable),
        (400, "BadRequestError", ModelRejected),
        (401, "AuthenticationError", ModelRejected),
        (413, "ContentTooLargeError", ModelRejected),
    ],
)
async def test_api_errors_become_model_errors_that_say_whether_to_retry(
    fake: FakeAnthropic, db: Database, status: int, error_class: str, kind: type[ModelError]
) -> None:
    fake.script_error(status, retry_after=0.01)
    model = client(db, fake.url)
    with pytest.raises(ModelError) as info:
        await model.complete(CTX, SYSTEM, HELLO)
    await model.close()
    assert type(info.value) is kind
    assert info.value.error_class == error_class
    assert await ledger_rows(db) == []


async def test_the_sdk_retries_first(fake: FakeAnthropic, db: Database) -> None:
    fake.script_error(429, retry_after=0.01)
    fake.script_error(529)
    model = client(db, fake.url, max_retries=2)
    reply = await model.complete(CTX, SYSTEM, HELLO)
    await model.close()
    assert reply.text == "echo: hello"
    assert len(fake.requests) == 3


@pytest.mark.timeout(20)
async def test_a_hang_is_a_timeout(fake: FakeAnthropic, db: Database) -> None:
    fake.script_hang(5)
    model = client(db, fake.url, timeout_s=0.3)
    with pytest.raises(ModelUnavailable) as info:
        await model.complete(CTX, SYSTEM, HELLO)
    await model.close()
    assert info.value.error_class == "APITimeoutError"


WHERE = "(model.base_url / ANTHROPIC_BASE_URL)"
KEY = "sk-ant-api03-the-KEY-0123456789"


@pytest.mark.parametrize(
    ("status", "message", "cause"),
    [
        (401, "invalid x-api-key", "model refused the API key (HTTP 401) at {url} " + WHERE
         + ": check model.api_key / ANTHROPIC_API_KEY"),
        (529, "busy", "model overloaded (HTTP 529) at {url} " + WHERE),
        (503, "down", "model server error (HTTP 503) at {url} " + WHERE),
        (400, f"bad request\nwith {KEY}", "model refused the request (HTTP 400): "
         "bad request with [redacted]"),
    ],
    ids=["key", "overloaded", "server", "rejected"],
)  # fmt: skip
async def test_a_failed_call_says_its_cause_in_one_line(
    fake: FakeAnthropic, db: Database, status: int, message: str, cause: str
) -> None:
    """For the operator's chat (the terminal): what failed and where, never the key."""
    fake.script_error(status, message=message)
    model = client(db, fake.url, api_key=KEY)
    with pytest.raises(ModelError) as info:
        await model.complete(CTX, SYSTEM, HELLO)
    await model.close()
    assert info.value.cause == cause.format(url=fake.url)


@pytest.mark.timeout(20)
async def test_a_timeout_and_a_closed_port_say_their_cause(
    fake: FakeAnthropic, db: Database
) -> None:
    fake.script_hang(5)
    model = client(db, fake.url, timeout_s=0.3)
    with pytest.raises(ModelUnavailable) as timed_out:
        await model.complete(CTX, SYSTEM, HELLO)
    await model.close()
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/v?key={KEY}"
    model = client(db, closed)
    with pytest.raises(ModelUnavailable) as refused:
        await model.complete(CTX, SYSTEM, HELLO)
    await model.close()
    assert timed_out.value.cause == (
        f"model timed out: no answer within 0.3s (model.timeout_s) at {fake.url} {WHERE}"
    )
    port = closed.split("/")[2]
    assert (
        refused.value.cause == f"model unreachable: connection refused at http://{port}/v {WHERE}"
    )


async def test_a_refused_call_is_not_made(fake: FakeAnthropic, db: Database) -> None:
    budget = BudgetConfig(daily_tokens_per_soul=None, daily_tokens_per_user=100)
    model = client(db, fake.url, budget)
    with capture_logs() as logs, pytest.raises(BudgetExceeded):
        await model.complete(CTX, SYSTEM, HELLO)
    await model.close()
    assert fake.requests == []
    assert [e["event"] for e in logs] == ["budget.refused"]


async def test_a_small_call_is_checked_against_the_budget_by_its_own_max_tokens(
    fake: FakeAnthropic, db: Database
) -> None:
    # Room for a 64-token gate call, not for one of model.max_tokens (1,024 here).
    budget = BudgetConfig(daily_tokens_per_soul=None, daily_tokens_per_user=400)
    model = client(db, fake.url, budget, max_tokens=1_024)
    fake.script_tool_use("decide", {"speak": False})
    tool = {"name": "decide", "input_schema": {}}
    assert await model.use_tool(CTX, SYSTEM, HELLO, tool, max_tokens=64) == {"speak": False}
    with pytest.raises(BudgetExceeded):
        await model.use_tool(CTX, SYSTEM, HELLO, tool)
    await model.close()
    assert len(fake.requests) == 1


async def test_max_concurrency_bounds_calls(fake: FakeAnthropic, db: Database) -> None:
    import asyncio

    fake.latency_s = 0.2
    model = client(db, fake.url, max_concurrency=1)
    started = time.monotonic()
    await asyncio.gather(*(model.complete(CTX, SYSTEM, HELLO) for _ in range(4)))
    await model.close()
    # Four calls of 0.2 s each, one at a time, cannot end sooner than 0.8 s.
    assert time.monotonic() - started >= 0.8


# -- the fallback model -------------------------------------------------------

FALLBACK = "claude-haiku-4-5"


async def ledger_models(db: Database) -> list[str]:
    return [m for (m,) in await db.run(lambda c: c.execute("SELECT model FROM usage").fetchall())]


@pytest.fixture
async def spare() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@pytest.mark.parametrize(
    ("status", "error_class"),
    [(529, "OverloadedError"), (429, "RateLimitError"), (500, "InternalServerError")],
)
async def test_the_fallback_answers_when_the_primary_is_unavailable(
    fake: FakeAnthropic, spare: FakeAnthropic, db: Database, status: int, error_class: str
) -> None:
    fake.fail_until(float("inf"), status)
    model = client(db, fake.url, max_retries=1, fallback=FALLBACK, fallback_base_url=spare.url)
    with capture_logs() as logs:
        reply = await model.complete(CTX, SYSTEM, HELLO)
    await model.close()
    assert reply.text == "echo: hello"
    assert len(fake.requests) == 2  # the primary's retries come first
    [sent] = spare.requests  # then the same request, once, to the fallback
    assert sent == {**fake.requests[0], "model": FALLBACK}
    [line] = [e for e in logs if e["event"] == "llm.fallback"]
    assert line == {"event": "llm.fallback", "log_level": "warning", "model": "claude-sonnet-4-6",
                    "fallback": FALLBACK, "error_class": error_class, "source": "turn"}  # fmt: skip
    assert await ledger_models(db) == [FALLBACK]
    [usage] = [e for e in logs if e["event"] == "llm.usage"]
    assert usage["model"] == FALLBACK


async def test_the_fallback_at_the_same_base_url(fake: FakeAnthropic, db: Database) -> None:
    fake.script_error(529)
    model = client(db, fake.url, fallback=FALLBACK)
    reply = await model.complete(CTX, SYSTEM, HELLO)
    await model.close()
    assert reply.text == "echo: hello"
    assert [r["model"] for r in fake.requests] == ["claude-sonnet-4-6", FALLBACK]
    assert await ledger_models(db) == [FALLBACK]


async def test_when_the_fallback_fails_too_the_primarys_error_is_raised(
    fake: FakeAnthropic, spare: FakeAnthropic, db: Database
) -> None:
    fake.script_error(529)
    spare.script_error(529)
    spare.script_text("never asked: the fallback is not retried")
    model = client(db, fake.url, max_retries=0, fallback=FALLBACK, fallback_base_url=spare.url)
    with capture_logs() as logs, pytest.raises(ModelUnavailable) as info:
        await model.complete(CTX, SYSTEM, HELLO)
    await model.close()
    assert info.value.error_class == "OverloadedError"
    assert isinstance(info.value.__cause__, ModelUnavailable)
    assert len(spare.requests) == 1
    events = [(e["event"], e["error_class"]) for e in logs if e["event"].startswith("llm.")]
    assert events == [
        ("llm.fallback", "OverloadedError"),
        ("llm.fallback_failed", "OverloadedError"),
    ]
    assert await ledger_rows(db) == []


async def test_a_rejected_request_does_not_fall_back(
    fake: FakeAnthropic, spare: FakeAnthropic, db: Database
) -> None:
    fake.script_error(400)
    model = client(db, fake.url, fallback=FALLBACK, fallback_base_url=spare.url)
    with pytest.raises(ModelRejected):
        await model.complete(CTX, SYSTEM, HELLO)
    await model.close()
    assert spare.requests == []


async def test_each_round_asks_the_primary_first(
    fake: FakeAnthropic, spare: FakeAnthropic, db: Database
) -> None:
    async def noop(args: dict[str, Any]) -> str:
        return "ok"

    fake.script_error(529)
    spare.script_tool_use("noop", {})
    model = client(db, fake.url, fallback=FALLBACK, fallback_base_url=spare.url)
    reply = await model.complete(CTX, SYSTEM, HELLO, [Tool("noop", "Nothing", {}, noop)])
    await model.close()
    assert reply.calls == 2 and reply.text == "echo: tool results received"
    assert len(fake.requests) == 2 and len(spare.requests) == 1
    assert await ledger_models(db) == [FALLBACK, "claude-sonnet-4-6"]


async def test_close_closes_the_fallbacks_client(spare: FakeAnthropic, db: Database) -> None:
    model = client(db, "http://127.0.0.1:9", fallback=FALLBACK, fallback_base_url=spare.url)
    clients = [model._client, model._fallback_client]
    assert clients[0] is not clients[1]
    await model.close()
    assert all(c.is_closed() for c in clients)


def test_a_fallback_base_url_needs_a_fallback_model() -> None:
    with pytest.raises(ConfigError, match=r"model\.fallback_base_url: expected `model\.fallback`"):
        model_config("http://127.0.0.1:9", fallback_base_url="http://127.0.0.1:8")
    assert model_config("http://127.0.0.1:9", fallback="").fallback is None


async def test_a_streamed_turn_is_the_same_turn_told_as_it_goes(
    fake: FakeAnthropic, db: Database
) -> None:
    async def lookup(args: dict[str, Any]) -> str:
        return f"{args['who']} lives in Lisbon"

    tool = Tool("lookup", "Look a fact up", {"type": "object"}, lookup)
    fake.configure(stream_chunk_chars=4)
    replies = []
    for streamed in (False, True):
        fake.script_tool_use("lookup", {"who": "bob", "deep": {"n": [1, 2]}}, text="Let me check.")
        fake.script_text("Bob lives in Lisbon, I recall.")
        told: list[str] = []

        async def tell(text: str, told: list[str] = told) -> None:
            told.append(text)

        model = client(db, fake.url)
        replies.append(await model.complete(CTX, SYSTEM, HELLO, [tool],
                                            on_text=tell if streamed else None))  # fmt: skip
        await model.close()
    plain, streamed_reply = replies
    timeless = dataclasses.replace(streamed_reply, model_ms=plain.model_ms, queue_ms=plain.queue_ms)
    assert timeless == plain  # text, usage, rounds, stop reason
    assert [r.get("stream") for r in fake.requests] == [None, None, True, True]

    def round_of(request: dict[str, Any]) -> str:  # the tool round, its ids aside
        return re.sub(r"toolu_fake_\d+", "id", json.dumps(request["messages"]))

    assert round_of(fake.requests[3]) == round_of(fake.requests[1])
    assert told[0] == "Let " and "Let me check." in told  # the tool round's words, as they came
    assert told[-1] == "Bob lives in Lisbon, I recall."  # then the answer's, from empty again


async def test_a_streamed_answer_cut_or_broken_is_told_as_it_is(
    fake: FakeAnthropic, db: Database
) -> None:
    from tests.fakes.anthropic_fake import Reply

    async def tell(text: str) -> None:
        return None

    model = client(db, fake.url, max_tokens=5)
    fake.script_text("a long answer that will not fit in five tokens at all")
    cut = await model.complete(CTX, SYSTEM, HELLO, on_text=tell)
    fake.script(Reply.of_stream_error("It was going well until", after_chars=10))
    with pytest.raises(ModelUnavailable) as broken:
        await model.complete(CTX, SYSTEM, HELLO, on_text=tell)
    await model.close()
    assert cut.cut and cut.text and len(cut.text) < 30
    assert "Overloaded" in str(broken.value)


# -- another server of the Messages API (docs/model-servers.md) ---------------------------


async def nothing(args: dict[str, Any]) -> str:
    return ""


LOOKUP = Tool("lookup", "Look a fact up", {"type": "object"}, nothing)
FORCED_LOOKUP = {"name": "lookup", "description": "Look up", "input_schema": {"type": "object"}}


@pytest.mark.parametrize("shape", ["openai", "detail", "text"])
async def test_another_servers_error_says_its_reason(
    db: Database, shape: Literal["openai", "detail", "text"]
) -> None:
    async with FakeAnthropic(compat=Compat(errors=shape)) as server:
        server.script_error(404, message="model 'llama3' not found, try pulling it first")
        model = client(db, server.url)
        with pytest.raises(ModelRejected) as info:
            await model.complete(CTX, SYSTEM, HELLO)
        await model.close()
    said = "NotFoundError: HTTP 404: model 'llama3' not found, try pulling it first"
    assert str(info.value) == said and info.value.status == 404


async def test_usage_without_cache_figures_is_unknown_streamed_or_not(db: Database) -> None:
    async def tell(text: str) -> None:
        return None

    async with FakeAnthropic(compat=Compat()) as server:
        model = client(db, server.url)
        replies = [await model.complete(CTX, SYSTEM, HELLO, on_text=tell),
                   await model.complete(CTX, SYSTEM, HELLO)]  # fmt: skip
        await model.close()
    for reply in replies:
        assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
        assert reply.usage.cache_creation_input_tokens is None
        assert reply.usage.cache_read_input_tokens is None
    rows = await db.run(
        lambda c: c.execute(
            "SELECT cache_creation_input_tokens, cache_read_input_tokens FROM usage"
        ).fetchall()
    )
    assert [tuple(row) for row in rows] == [(None, None), (None, None)]


async def test_tools_a_server_refuses_are_offered_no_more(db: Database) -> None:
    async with FakeAnthropic(compat=Compat(tools="refuse")) as server:
        model = client(db, server.url)
        with capture_logs() as logs:
            first = await model.complete(CTX, SYSTEM, HELLO, [LOOKUP])
            second = await model.complete(CTX, SYSTEM, HELLO, [LOOKUP])
            with pytest.raises(ToolsUnsupported) as forced:
                await model.use_tool(CTX, SYSTEM, HELLO, FORCED_LOOKUP)
        await model.close()
    assert first.text == second.text == "echo: hello" and first.calls == 1
    assert ["tools" in r for r in server.requests] == [True, False, False, True]
    assert [e["event"] for e in logs] == ["llm.usage", "llm.tools_refused", "llm.usage"]
    assert "refused a request with the tool lookup (HTTP 400: tools are not supported)" in str(
        forced.value
    )
    assert len(await ledger_rows(db)) == 2  # the refused requests cost nothing


async def test_a_400_for_another_reason_is_not_taken_for_refused_tools(
    fake: FakeAnthropic, db: Database
) -> None:
    fake.script_error(400, message="prompt is too long")
    model = client(db, fake.url)
    with capture_logs() as logs, pytest.raises(ModelRejected) as info:
        await model.complete(CTX, SYSTEM, HELLO, [LOOKUP])
    await model.complete(CTX, SYSTEM, HELLO, [LOOKUP])
    fake.script_error(400, message="prompt is too long")
    with pytest.raises(ModelRejected) as forced:
        await model.use_tool(CTX, SYSTEM, HELLO, FORCED_LOOKUP)
    await model.close()
    assert str(info.value) == "BadRequestError: HTTP 400: prompt is too long"
    assert type(forced.value) is ModelRejected  # not ToolsUnsupported
    # Not sent again without its tools (it would be refused again), and still offered.
    assert ["tools" in r for r in fake.requests] == [True, True, True]
    assert not [e for e in logs if e["event"] == "llm.tools_refused"]


async def test_model_text_leaves_the_client_as_text_every_store_takes(
    fake: FakeAnthropic, db: Database
) -> None:
    """A NUL (PostgreSQL's `text` refuses it) or a lone surrogate (no UTF-8 encodes it)
    in an answer never reaches the history, the traces or a platform."""
    odd = "a\x00b\ud800c\udc00"
    fake.configure(stream_chunk_chars=3)
    told: list[str] = []

    async def tell(text: str) -> None:
        told.append(text)

    model = client(db, fake.url)
    fake.script_text(odd)
    plain = await model.complete(CTX, SYSTEM, HELLO)
    fake.script_text(odd)
    streamed = await model.complete(CTX, SYSTEM, HELLO, on_text=tell)
    fake.script_tool_use("file_notes", {"pages": [{"id": "concepts/x", "summary": odd}]})
    filed = await model.use_tool(CTX, SYSTEM, HELLO, {"name": "file_notes", "input_schema": {}})
    await model.close()
    assert plain.text == streamed.text == told[-1] == "ab\ufffdc\ufffd"
    assert filed == {"pages": [{"id": "concepts/x", "summary": "ab\ufffdc\ufffd"}]}
    for text in [*told, json.dumps(filed, ensure_ascii=False)]:
        assert "\x00" not in text and text.encode("utf-8")


async def test_a_stream_cut_mid_way_is_billed_so_it_is_in_the_ledger(
    fake: FakeAnthropic, db: Database
) -> None:
    from tests.fakes.anthropic_fake import Reply

    async def tell(text: str) -> None:
        return None

    model = client(db, fake.url)
    whole = await model.complete(CTX, SYSTEM, HELLO)
    fake.script(Reply.of_stream_error("It was going well until it was not", after_chars=16))
    with pytest.raises(ModelUnavailable):
        await model.complete(CTX, SYSTEM, HELLO, on_text=tell)
    await model.close()
    # The input as message_start gave it; the output, the 16 characters streamed (4 tokens).
    assert await ledger_rows(db) == [
        ("turn", whole.usage.input_tokens, whole.usage.output_tokens),
        ("turn", whole.usage.input_tokens, 4),
    ]
