"""The Anthropic fake, driven by the real anthropic SDK."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import aiohttp
import anthropic
import pytest
from anthropic import AsyncAnthropic

from tests.fakes.anthropic_fake import (
    Compat,
    FakeAnthropic,
    Reply,
    canonical,
    image_tokens,
    images,
    tokens,
)

MODEL = "claude-test-1"
REPO = Path(__file__).resolve().parents[2]
BIG = "You are a soul. " * 300  # ~4800 chars: ~1200 tokens, above the 1024 minimum

pytestmark = pytest.mark.timeout(20)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as f:
        yield f


def client(fake: FakeAnthropic, **kw: Any) -> AsyncAnthropic:
    kw.setdefault("max_retries", 0)
    return AsyncAnthropic(api_key="test-key", base_url=fake.url, **kw)


def cached_system(text: str = BIG, **cc: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral", **cc}}]


async def ask(c: AsyncAnthropic, content: Any = "hi", **kw: Any) -> anthropic.types.Message:
    messages = kw.pop("messages", [{"role": "user", "content": content}])
    msg: anthropic.types.Message = await c.messages.create(
        model=MODEL, max_tokens=100, messages=messages, **kw
    )
    return msg


async def test_text_reply_and_usage(fake: FakeAnthropic) -> None:
    msg = await ask(client(fake), "hello there")
    assert msg.model == MODEL and msg.role == "assistant" and msg.stop_reason == "end_turn"
    assert msg.stop_sequence is None and msg.id.startswith("msg_")
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == "echo: hello there"  # type: ignore[union-attr]
    block = canonical({"type": "text", "text": "hello there"})
    assert msg.usage.input_tokens == tokens(block)
    assert msg.usage.output_tokens == tokens("echo: hello there")
    assert msg.usage.cache_creation_input_tokens == 0
    assert msg.usage.cache_read_input_tokens == 0


async def test_default_reply_joins_text_blocks(fake: FakeAnthropic) -> None:
    blocks = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    msg = await ask(client(fake), blocks)
    assert msg.content[0].text == "echo: a\nb"  # type: ignore[union-attr]


async def test_tool_use_round_trip(fake: FakeAnthropic) -> None:
    c = client(fake)
    tools = [{"name": "recall", "description": "d", "input_schema": {"type": "object"}}]
    fake.script_tool_use("recall", {"query": "cats"}, text="Let me look.")
    msg = await ask(c, "what do I like?", tools=tools)
    assert msg.stop_reason == "tool_use"
    text, use = msg.content
    assert isinstance(text, anthropic.types.TextBlock) and text.text == "Let me look."
    assert isinstance(use, anthropic.types.ToolUseBlock)
    assert use.name == "recall" and use.input == {"query": "cats"} and use.id.startswith("toolu_")
    assert msg.usage.output_tokens == tokens("Let me look." + canonical({"query": "cats"}))
    messages = [
        {"role": "user", "content": "what do I like?"},
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "cats"}],
        },
    ]
    second = await ask(c, messages=messages, tools=tools)
    assert second.stop_reason == "end_turn"
    assert second.content[0].text == "echo: tool results received"  # type: ignore[union-attr]
    assert fake.requests[1]["messages"][2]["content"][0]["tool_use_id"] == use.id


async def test_scripted_tool_id_and_script_order(fake: FakeAnthropic) -> None:
    c = client(fake)
    fake.script_tool_use("t", {}, tool_id="toolu_1")
    fake.script_text("second")
    first = await ask(c)
    assert first.content[0].id == "toolu_1"  # type: ignore[union-attr]
    assert [b.type for b in first.content] == ["tool_use"]
    assert (await ask(c)).content[0].text == "second"  # type: ignore[union-attr]
    assert (await ask(c, "x")).content[0].text == "echo: x"  # type: ignore[union-attr]


async def test_responder_is_used_when_the_script_is_empty(fake: FakeAnthropic) -> None:
    fake.responder = lambda body: Reply.of_text(f"{len(body['messages'])} messages")
    fake.script_text("scripted")
    c = client(fake)
    assert (await ask(c)).content[0].text == "scripted"  # type: ignore[union-attr]
    assert (await ask(c)).content[0].text == "1 messages"  # type: ignore[union-attr]
    fake.responder = lambda body: None
    assert (await ask(c, "y")).content[0].text == "echo: y"  # type: ignore[union-attr]


async def test_rate_limit_error(fake: FakeAnthropic) -> None:
    fake.script_error(429, "rate_limit_error", "slow down", retry_after=7)
    with pytest.raises(anthropic.RateLimitError) as info:
        await ask(client(fake))
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "7"
    assert info.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
    }


async def test_rate_limit_retry_after_then_success(fake: FakeAnthropic) -> None:
    fake.script_error(429, "rate_limit_error", "slow down", retry_after=0.3)
    fake.script_text("ok now")
    started = time.monotonic()
    msg = await ask(client(fake, max_retries=1))
    assert msg.content[0].text == "ok now"  # type: ignore[union-attr]
    assert time.monotonic() - started >= 0.3  # the SDK honoured retry-after
    assert len(fake.requests) == 2


@pytest.mark.parametrize(
    ("status", "error_type", "exc"),
    [
        (500, "api_error", anthropic.InternalServerError),
        (529, "overloaded_error", anthropic.OverloadedError),
        (400, "invalid_request_error", anthropic.BadRequestError),
    ],
)
async def test_status_errors(
    fake: FakeAnthropic, status: int, error_type: str, exc: type[anthropic.APIStatusError]
) -> None:
    fake.script_error(status, error_type, "boom")
    with pytest.raises(exc) as info:
        await ask(client(fake))
    assert type(info.value) is exc and info.value.status_code == status
    assert (await ask(client(fake), "after")).content[0].text == "echo: after"  # type: ignore[union-attr]


async def test_overloaded_is_an_internal_server_error(fake: FakeAnthropic) -> None:
    fake.script_error(529, "overloaded_error", "busy")
    with pytest.raises(anthropic.InternalServerError) as info:
        await ask(client(fake))
    assert isinstance(info.value, anthropic.OverloadedError)


async def test_hang_times_out(fake: FakeAnthropic) -> None:
    fake.script_hang(30)
    with pytest.raises(anthropic.APITimeoutError):
        await ask(client(fake, timeout=0.5))
    assert len(fake.requests) == 1


async def test_latency(fake: FakeAnthropic) -> None:
    fake.latency_s = 0.3
    started = time.monotonic()
    await ask(client(fake))
    assert time.monotonic() - started >= 0.3
    fake.latency_s = 5
    with pytest.raises(anthropic.APITimeoutError):
        await ask(client(fake, timeout=0.3))


async def test_outage_switch_and_fail_until() -> None:
    clock = Clock()
    async with FakeAnthropic(clock=clock) as fake:
        c = client(fake)
        fake.down = True
        with pytest.raises(anthropic.OverloadedError):
            await ask(c)
        fake.down = False
        await ask(c)
        fake.fail_until(clock.now + 10, status=500)
        assert fake.down
        with pytest.raises(anthropic.InternalServerError):
            await ask(c)
        clock.now += 10
        assert not fake.down
        await ask(c)


async def test_request_log(fake: FakeAnthropic) -> None:
    c = client(fake)
    await ask(c, "one", system="be brief")
    await ask(c, "two", stop_sequences=["END"])
    assert [r["messages"][-1]["content"] for r in fake.requests] == ["one", "two"]
    assert fake.requests[0]["system"] == "be brief" and fake.requests[1]["stop_sequences"] == [
        "END"
    ]
    assert all(r["model"] == MODEL and r["max_tokens"] == 100 for r in fake.requests)
    for rec in fake.log:
        assert json.loads(rec.raw) == rec.body
        assert rec.headers["Authorization"] == "Bearer test-key"
        assert rec.headers["anthropic-version"]
    fake.reset()
    assert fake.requests == []


async def test_auth(fake: FakeAnthropic) -> None:
    async with aiohttp.ClientSession() as s:
        body = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
        async with s.post(fake.url + "/v1/messages", json=body) as r:
            assert r.status == 401
            assert (await r.json())["error"]["type"] == "authentication_error"
            assert (await r.json())["type"] == "error"
        async with s.post(fake.url + "/v1/messages", json=body, headers={"x-api-key": "k"}) as r:
            assert r.status == 200
    with pytest.raises(anthropic.AuthenticationError):
        await ask(client(fake), extra_headers={"Authorization": anthropic.omit})
    assert "Authorization" not in fake.log[-1].headers


async def test_cache_write_then_read(fake: FakeAnthropic) -> None:
    c = client(fake)
    first = await ask(c, "one", system=cached_system())
    second = await ask(c, "two", system=cached_system())
    creation = first.usage.cache_creation_input_tokens
    assert creation is not None and creation >= 1024
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == creation
    assert second.usage.cache_creation_input_tokens == 0
    assert (
        first.usage.input_tokens
        == second.usage.input_tokens
        == tokens(canonical({"type": "text", "text": "one"}))
    )
    # The SDK writes the body's keys as max_tokens, messages, model, system, tools:
    # the system block's bytes follow the messages, so compare from "system" on.
    raw0, raw1 = fake.log[0].raw, fake.log[1].raw
    start, end = raw0.index(b'"system"'), raw0.index(b'"cache_control"')
    assert raw0.index(b'"messages"') < start
    assert raw1[raw1.index(b'"system"') :][: end - start] == raw0[start:end]


async def test_small_prompt_caches_nothing(fake: FakeAnthropic) -> None:
    c = client(fake)
    for _ in range(2):
        msg = await ask(c, system=cached_system("short"))
        assert msg.usage.cache_creation_input_tokens == 0
        assert msg.usage.cache_read_input_tokens == 0
        assert msg.usage.input_tokens > 0


async def test_ttl_expiry_and_refresh() -> None:
    clock = Clock()
    async with FakeAnthropic(clock=clock) as fake:
        c = client(fake)
        first = await ask(c, system=cached_system())
        written = first.usage.cache_creation_input_tokens
        clock.now += 299  # a hit refreshes the 5-minute TTL
        assert (await ask(c, system=cached_system())).usage.cache_read_input_tokens == written
        clock.now += 299
        assert (await ask(c, system=cached_system())).usage.cache_read_input_tokens == written
        clock.now += 301
        again = await ask(c, system=cached_system())
        assert again.usage.cache_read_input_tokens == 0
        assert again.usage.cache_creation_input_tokens == written
        # a one-hour entry survives 30 minutes
        await ask(c, system=cached_system(BIG + "!", ttl="1h"))
        clock.now += 1800
        late = await ask(c, system=cached_system(BIG + "!", ttl="1h"))
        assert (late.usage.cache_read_input_tokens or 0) > 0


async def test_growing_conversation_reads_the_previous_prefix(fake: FakeAnthropic) -> None:
    c = client(fake)
    cc = {"type": "ephemeral"}
    turn1 = [{"role": "user", "content": [{"type": "text", "text": "u1", "cache_control": cc}]}]
    first = await ask(c, messages=turn1, system=cached_system())
    turn2 = [
        {"role": "user", "content": [{"type": "text", "text": "u1"}]},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": [{"type": "text", "text": "u2", "cache_control": cc}]},
    ]
    second = await ask(c, messages=turn2, system=cached_system())
    prefix1 = (first.usage.cache_creation_input_tokens or 0) + first.usage.input_tokens
    assert second.usage.cache_read_input_tokens == prefix1  # found by the 20-block lookback
    total2 = sum(
        tokens(canonical(b))
        for b in [
            {"type": "text", "text": BIG},
            {"type": "text", "text": "u1"},
            {"type": "text", "text": "a1"},
            {"type": "text", "text": "u2"},
        ]
    )
    assert second.usage.cache_creation_input_tokens == total2 - prefix1
    assert second.usage.input_tokens == 0
    # with lookback off only the system breakpoint hits
    fake.configure(lookback_blocks=0)
    turn3 = [*turn2[:2], {"role": "user", "content": "u2"}, {"role": "assistant", "content": "x"}]
    turn3.append({"role": "user", "content": [{"type": "text", "text": "u3", "cache_control": cc}]})
    third = await ask(c, messages=turn3, system=cached_system())
    assert third.usage.cache_read_input_tokens == tokens(canonical({"type": "text", "text": BIG}))


async def test_tools_are_part_of_the_prefix(fake: FakeAnthropic) -> None:
    c = client(fake)
    tool = {"name": "t", "description": BIG, "input_schema": {"type": "object"}}
    cached_tool = {**tool, "cache_control": {"type": "ephemeral"}}
    first = await ask(c, tools=[cached_tool])
    assert first.usage.cache_creation_input_tokens == tokens(canonical(tool))
    other = await ask(c, tools=[{**cached_tool, "name": "u"}])
    assert other.usage.cache_read_input_tokens == 0
    other_model = await c.messages.create(
        model="claude-other",
        max_tokens=5,
        messages=[{"role": "user", "content": "x"}],
        tools=[cached_tool],  # type: ignore[list-item]
    )
    assert other_model.usage.cache_read_input_tokens == 0


async def test_request_level_cache_control_marks_the_last_block(fake: FakeAnthropic) -> None:
    c = client(fake)
    first = await ask(c, BIG, cache_control={"type": "ephemeral"})
    whole = tokens(canonical({"type": "text", "text": BIG}))
    assert first.usage.cache_creation_input_tokens == whole
    second = await ask(c, BIG, cache_control={"type": "ephemeral"})
    assert second.usage.cache_read_input_tokens == whole


async def test_five_breakpoints_is_a_400(fake: FakeAnthropic) -> None:
    system = [
        {"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
        for i in range(5)
    ]
    fake.script_text("not consumed")
    with pytest.raises(anthropic.BadRequestError) as info:
        await ask(client(fake), system=system)
    assert "maximum of 4" in info.value.body["error"]["message"]  # type: ignore[index]
    ok = await ask(client(fake), system=system[:4])
    assert ok.content[0].text == "not consumed"  # type: ignore[union-attr]


@pytest.mark.timeout(30)
@contextlib.asynccontextmanager
async def standalone(*args: str) -> AsyncIterator[str]:
    """``python -m tests.fakes.anthropic_fake --port 0 *args`` as a process of its
    own: its URL; at the end it must exit 0 on SIGTERM (killed if the test failed)."""
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.fakes.anthropic_fake", "--port", "0", *args,
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode()
        assert line.startswith("PORT ")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_standalone_process() -> None:
    async with standalone("--latency", "0.0") as url:
        c = AsyncAnthropic(api_key="test-key", base_url=url, max_retries=0)
        msg = await c.messages.create(
            model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "ping"}]
        )
        assert msg.content[0].text == "echo: ping"  # type: ignore[union-attr]
        async with aiohttp.ClientSession() as s:
            script = [
                {"kind": "error", "status": 529, "error_type": "overloaded_error", "message": "x"},
                {"kind": "text", "text": "hi"},
            ]
            async with s.post(url + "/_fake/script", json=script) as r:
                assert r.status == 200
            with pytest.raises(anthropic.OverloadedError):
                await c.messages.create(
                    model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "a"}]
                )
            again = await c.messages.create(
                model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "b"}]
            )
            assert again.content[0].text == "hi"  # type: ignore[union-attr]
            async with s.post(url + "/_fake/config", json={"down": True, "down_status": 500}) as r:
                assert r.status == 200
            with pytest.raises(anthropic.InternalServerError):
                await c.messages.create(
                    model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "c"}]
                )
            async with s.post(url + "/_fake/config", json={"bogus": 1}) as r:
                assert r.status == 400
            async with s.get(url + "/_fake/requests") as r:
                bodies = await r.json()
            assert [b["messages"][0]["content"] for b in bodies] == ["ping", "a", "b", "c"]
            async with s.post(url + "/_fake/reset") as r:
                assert r.status == 200
            async with s.get(url + "/_fake/requests") as r:
                assert await r.json() == []
            # streaming, and a stream failing mid-way, over the process
            async with s.post(url + "/_fake/config", json={"stream_chunk_chars": 2}) as r:
                assert r.status == 200
            failing = [{"kind": "stream_error", "text": "abcdef", "after_chars": 3}]
            async with s.post(url + "/_fake/script", json=failing) as r:
                assert r.status == 200
            hi: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]
            async with c.messages.stream(model=MODEL, max_tokens=5, messages=hi) as stream:
                with pytest.raises(anthropic.APIStatusError):
                    await stream.get_final_message()
            async with c.messages.stream(model=MODEL, max_tokens=5, messages=hi) as stream:
                assert [t async for t in stream.text_stream] == ["ec", "ho", ": ", "hi"]
        await c.close()


async def test_control_endpoints_in_process(fake: FakeAnthropic) -> None:
    assert Reply.from_json({"kind": "hang", "seconds": 5}) == Reply.of_hang(5)
    assert Reply.from_json({"kind": "error", "status": 429}).error_type == "rate_limit_error"
    with pytest.raises(ValueError):
        Reply.from_json({"kind": "nope"})
    async with aiohttp.ClientSession() as s:
        bad = [{"kind": "text", "text": "queued?"}, {"kind": "tool_use"}]
        async with s.post(fake.url + "/_fake/script", json=bad) as r:
            assert r.status == 400
        script = [
            {"kind": "tool_use", "name": "t", "input": {"a": 1}, "tool_id": "toolu_x"},
            {"kind": "hang", "seconds": 0.01},
        ]
        async with s.post(fake.url + "/_fake/script", json=script) as r:
            assert (await r.json())["queued"] == 2  # the bad list queued nothing
        async with s.post(fake.url + "/_fake/config", json={"latency_s": 0.01}) as r:
            assert r.status == 200 and fake.latency_s == 0.01
    c = client(fake)
    assert (await ask(c)).content[0].id == "toolu_x"  # type: ignore[union-attr]
    assert (await ask(c, "late")).content[0].text == "echo: late"  # type: ignore[union-attr]


async def test_an_answer_past_max_tokens_is_cut_with_its_stop_reason() -> None:
    async with FakeAnthropic() as fake:
        fake.script_text("x" * 400)  # 100 tokens
        client = anthropic.AsyncAnthropic(api_key="k", base_url=fake.url, max_retries=0)
        hi = [{"role": "user", "content": "hi"}]
        cut = await client.messages.create(model=MODEL, max_tokens=10, messages=hi)
        fake.script_text("short")
        whole = await client.messages.create(model=MODEL, max_tokens=10, messages=hi)
        await client.close()
    assert cut.stop_reason == "max_tokens" and cut.content[0].text == "x" * 40
    assert cut.usage.output_tokens == 10
    assert whole.stop_reason == "end_turn" and whole.content[0].text == "short"


async def test_a_scripted_stop_reason_reaches_the_sdk() -> None:
    async with FakeAnthropic() as fake:
        fake.script(Reply.of_text("I can't help with that.", stop_reason="refusal"))
        fake.script(Reply.from_json({"kind": "text", "text": "x", "stop_reason": "refusal"}))
        client = anthropic.AsyncAnthropic(api_key="k", base_url=fake.url, max_retries=0)
        hi = [{"role": "user", "content": "hi"}]
        first = await client.messages.create(model=MODEL, max_tokens=100, messages=hi)
        second = await client.messages.create(model=MODEL, max_tokens=100, messages=hi)
        await client.close()
    assert first.stop_reason == second.stop_reason == "refusal"
    assert first.content[0].text == "I can't help with that."  # type: ignore[union-attr]


# -- streaming -------------------------------------------------------------------------
HI: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]


async def streamed(c: AsyncAnthropic, **kw: Any) -> anthropic.types.Message:
    """The final message of ``client.messages.stream``."""
    kw.setdefault("messages", HI)
    kw.setdefault("max_tokens", 100)
    async with c.messages.stream(model=MODEL, **kw) as stream:
        return await stream.get_final_message()


async def raw_events(c: AsyncAnthropic, **kw: Any) -> list[Any]:
    """The events of ``create(..., stream=True)`` (the SDK drops pings)."""
    kw.setdefault("messages", HI)
    stream = await c.messages.create(model=MODEL, max_tokens=100, stream=True, **kw)
    return [event async for event in stream]


def same(a: anthropic.types.Message, b: anthropic.types.Message) -> None:
    assert a.model_dump(exclude={"id"}) == b.model_dump(exclude={"id"})


@pytest.mark.parametrize(
    "reply",
    [
        Reply.of_text("A longer answer, streamed in several pieces."),
        Reply.of_text("No.", stop_reason="refusal"),
        Reply.of_text(""),
        Reply.of_tool_use("recall", {"query": "cats", "n": 3, "é": [1]}, "toolu_1", "Look."),
        Reply.of_tool_use("noop", {}, "toolu_2"),
    ],
)
async def test_a_stream_gives_the_non_streamed_message(fake: FakeAnthropic, reply: Reply) -> None:
    c = client(fake)
    fake.script(reply, reply)
    plain = await ask(c)
    same(await streamed(c), plain)
    assert fake.requests[1]["stream"] is True and "stream" not in fake.requests[0]


async def test_the_event_sequence(fake: FakeAnthropic) -> None:
    text = "abcdefghijklmnopqrst"  # 20 characters: deltas of 8, 8 and 4
    fake.script_tool_use("t", {"q": "cats"}, "toolu_1", text=text)
    events = await raw_events(client(fake))
    assert [e.type for e in events] == [
        "message_start",
        *["content_block_start", *["content_block_delta"] * 3, "content_block_stop"],
        *["content_block_start", *["content_block_delta"] * 2, "content_block_stop"],
        "message_delta",
        "message_stop",
    ]
    start = events[0].message
    assert start.content == [] and start.stop_reason is None and start.role == "assistant"
    assert start.usage.input_tokens == tokens(canonical({"type": "text", "text": "hi"}))
    assert start.usage.cache_read_input_tokens == start.usage.cache_creation_input_tokens == 0
    assert events[1].content_block.model_dump() == {"type": "text", "text": "", "citations": None}
    assert [e.delta.text for e in events[2:5]] == ["abcdefgh", "ijklmnop", "qrst"]
    assert [e.index for e in events[1:6]] == [0] * 5
    opened = events[6].content_block
    assert (opened.type, opened.id, opened.name, opened.input) == ("tool_use", "toolu_1", "t", {})
    partial = [e.delta for e in events[7:9]]
    assert {d.type for d in partial} == {"input_json_delta"}
    assert "".join(d.partial_json for d in partial) == json.dumps({"q": "cats"})
    assert [e.index for e in events[6:10]] == [1] * 4
    delta = events[10]
    assert (delta.delta.stop_reason, delta.delta.stop_sequence) == ("tool_use", None)
    assert delta.usage.output_tokens == tokens(text + canonical({"q": "cats"}))


async def test_the_wire_format(fake: FakeAnthropic) -> None:
    fake.script_text("hello")
    body = {"model": MODEL, "max_tokens": 5, "messages": HI, "stream": True}
    async with (
        aiohttp.ClientSession() as s,
        s.post(fake.url + "/v1/messages", json=body, headers={"x-api-key": "k"}) as r,
    ):
        assert r.status == 200 and r.content_type == "text/event-stream"
        wire = (await r.read()).decode()
    frames = wire.split("\n\n")
    assert frames.pop() == ""  # every event ends with a blank line
    types = []
    for frame in frames:
        event, data = frame.split("\n")
        assert event.startswith("event: ") and data.startswith("data: ")
        types.append(event.removeprefix("event: "))
        assert json.loads(data.removeprefix("data: "))["type"] == types[-1]
    assert types == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


async def test_stream_chunk_chars_is_configurable(fake: FakeAnthropic) -> None:
    c = client(fake)
    fake.configure(stream_chunk_chars=3)
    fake.script_text("abcdefg")
    assert [e.delta.text for e in await raw_events(c) if e.type == "content_block_delta"] == [
        "abc",
        "def",
        "g",
    ]
    async with aiohttp.ClientSession() as s:
        async with s.post(fake.url + "/_fake/config", json={"stream_chunk_chars": 0}) as r:
            assert r.status == 400
        async with s.post(fake.url + "/_fake/config", json={"stream_chunk_chars": 100}) as r:
            assert r.status == 200
    fake.script_text("abcdefg")
    assert len([e for e in await raw_events(c) if e.type == "content_block_delta"]) == 1


async def test_a_streamed_answer_past_max_tokens_is_cut(fake: FakeAnthropic) -> None:
    c = client(fake)
    fake.script_text("x" * 400)  # 100 tokens
    fake.script_text("x" * 400)
    plain = await c.messages.create(model=MODEL, max_tokens=10, messages=HI)
    cut = await streamed(c, max_tokens=10)
    same(cut, plain)
    assert cut.stop_reason == "max_tokens" and cut.content[0].text == "x" * 40  # type: ignore[union-attr]
    assert cut.usage.output_tokens == 10


async def test_stream_delay_paces_the_deltas() -> None:
    async with FakeAnthropic() as fake:
        fake.configure(stream_delay_s=0.2, stream_chunk_chars=4)
        fake.script_text("abcdefghijkl")  # three deltas, two delays
        started = time.monotonic()
        msg = await streamed(client(fake))
        assert time.monotonic() - started >= 0.4
        assert msg.content[0].text == "abcdefghijkl"  # type: ignore[union-attr]


async def test_a_slow_stream_arrives_piece_by_piece_and_stop_does_not_wait() -> None:
    fake = FakeAnthropic()
    await fake.start()
    fake.configure(stream_delay_s=60, stream_chunk_chars=4)
    fake.script_text("abcdefghijkl")
    c = client(fake)
    try:
        async with c.messages.stream(model=MODEL, max_tokens=100, messages=HI) as stream:
            texts = aiter(stream.text_stream)
            assert await anext(texts) == "abcd"  # delivered while the rest waits a minute
            await asyncio.wait_for(fake.stop(), 5)  # wakes the delay: the rest follows at once
            assert [t async for t in texts] == ["efgh", "ijkl"]
    finally:
        await fake.stop()
        await c.close()


async def test_errors_come_before_any_event() -> None:
    clock = Clock()
    async with FakeAnthropic(clock=clock) as fake:
        c = client(fake)
        fake.script_error(429, "rate_limit_error", "slow down", retry_after=7)
        with pytest.raises(anthropic.RateLimitError) as info:
            await streamed(c)
        assert info.value.response.headers["content-type"] == "application/json"
        fake.down = True
        with pytest.raises(anthropic.OverloadedError):
            await raw_events(c)
        fake.down = False
        with pytest.raises(anthropic.BadRequestError):
            await streamed(c, messages=[])
        with pytest.raises(anthropic.AuthenticationError):
            await streamed(c, extra_headers={"Authorization": anthropic.omit})
        assert len(fake.requests) == 4
        assert (await streamed(c)).content[0].text == "echo: hi"  # type: ignore[union-attr]


async def test_a_stream_that_fails_mid_way(fake: FakeAnthropic) -> None:
    c = client(fake)
    fake.script(Reply.of_stream_error("hello world, and more", 11))  # deltas: 8 + 3 chars
    seen: list[Any] = []
    stream = await c.messages.create(model=MODEL, max_tokens=100, messages=HI, stream=True)
    with pytest.raises(anthropic.APIStatusError) as info:
        async for event in stream:
            seen.append(event)
    assert type(info.value) is anthropic.APIStatusError and info.value.status_code == 200
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert info.value.body == error
    assert [e.type for e in seen] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
    ]
    assert "".join(e.delta.text for e in seen[2:]) == "hello world"
    # the helper stream raises the same from get_final_message, keeping what came
    fake.script(Reply.from_json({"kind": "stream_error", "text": "hello", "after_chars": 2}))
    async with c.messages.stream(model=MODEL, max_tokens=100, messages=HI) as helper:
        with pytest.raises(anthropic.APIStatusError):
            await helper.get_final_message()
        assert helper.current_message_snapshot.content[0].text == "he"  # type: ignore[union-attr]


async def test_a_stream_error_reply_not_streamed_is_an_http_error(fake: FakeAnthropic) -> None:
    c = client(fake)
    fake.script(Reply.of_stream_error("hello", 2))
    with pytest.raises(anthropic.OverloadedError) as info:
        await ask(c)
    assert info.value.status_code == 529
    fake.script(Reply.of_stream_error("hello", 2, "api_error", "boom"))
    with pytest.raises(anthropic.InternalServerError) as failed:
        await ask(c)
    assert failed.value.status_code == 500
    assert failed.value.body == {"type": "error", "error": {"type": "api_error", "message": "boom"}}


async def test_streams_cache_and_log_like_plain_requests(fake: FakeAnthropic) -> None:
    c = client(fake)
    first = await streamed(c, system=cached_system())
    written = first.usage.cache_creation_input_tokens
    assert written is not None and written >= 1024
    second = await ask(c, system=cached_system())
    assert second.usage.cache_read_input_tokens == written
    # a stream failing mid-way has read and written the cache like a success
    fake.script(Reply.of_stream_error("partial", 3))
    with pytest.raises(anthropic.APIStatusError):
        await streamed(c, system=cached_system(BIG + "!"))
    third = await streamed(c, system=cached_system(BIG + "!"))
    assert third.usage.cache_read_input_tokens == tokens(
        canonical({"type": "text", "text": BIG + "!"})
    )
    assert [r.get("stream") for r in fake.requests] == [True, None, True, True]
    assert all(json.loads(r.raw) == r.body for r in fake.log)


# -- images ----------------------------------------------------------------------------
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(100))


def image(data: bytes = PNG, media_type: str = "image/png", *, cached: bool = False) -> Any:
    return b64_image(base64.b64encode(data).decode(), media_type, cached=cached)


def b64_image(data: str, media_type: str = "image/png", *, cached: bool = False) -> Any:
    block = {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {**block, "cache_control": {"type": "ephemeral"}} if cached else block


async def test_images_are_counted_echoed_and_readable(fake: FakeAnthropic) -> None:
    c = client(fake)
    gif = b"GIF89a" + bytes(3000)
    two = [image(), {"type": "text", "text": "look"}, image(gif, "image/gif")]
    msg = await ask(c, two)
    assert msg.content[0].text == "echo: look [2 images]"  # type: ignore[union-attr]
    assert images(fake.requests[0]) == [("image/png", PNG), ("image/gif", gif)]
    expected = (
        image_tokens(two[0]["source"]["data"])
        + tokens(canonical({"type": "text", "text": "look"}))
        + image_tokens(two[2]["source"]["data"])
    )
    assert msg.usage.input_tokens == expected
    assert image_tokens(two[2]["source"]["data"]) == 5  # 4008 base64 characters
    assert (await ask(c, [image()])).content[0].text == "echo: [1 image]"  # type: ignore[union-attr]
    assert images(fake.requests[1]) == [("image/png", PNG)] and images({"messages": HI}) == []


def test_image_tokens_are_capped() -> None:
    assert image_tokens("") == 0 and image_tokens("A" * 1000) == 1 and image_tokens("A" * 1001) == 2
    assert image_tokens("A" * 5 * 1024 * 1024) == 1600


async def test_an_image_is_part_of_the_cache_key() -> None:
    async with FakeAnthropic(min_cache_tokens=1) as fake:
        c = client(fake)
        first = await ask(c, [image(cached=True)])
        assert first.usage.cache_creation_input_tokens == image_tokens(image()["source"]["data"])
        again = await ask(c, [image(cached=True)])
        assert again.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
        other = await ask(c, [image(PNG[:8] + PNG[:7:-1], cached=True)])  # other bytes
        assert other.usage.cache_read_input_tokens == 0


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            image(media_type="image/bmp"),
            "messages.0.content.1.image.source.base64.media_type: Input should be"
            " 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
        ),
        (b64_image("@@"), "messages.0.content.1.image.source.base64: invalid base64 data"),
        (b64_image("abc"), "messages.0.content.1.image.source.base64: invalid base64 data"),
        (
            image(b"#!/bin/sh\necho hi\n"),
            "messages.0.content.1.image.source.base64.data:"
            " Image does not match the provided media type image/png",
        ),
        (
            image(b"\xff\xd8\xff\xe0" + bytes(100)),
            "messages.0.content.1.image.source.base64.data:"
            " Image does not match the provided media type image/png",
        ),
        (
            image(b"RIFF\x00\x00\x00\x00WAVE", "image/webp"),
            "messages.0.content.1.image.source.base64.data:"
            " Image does not match the provided media type image/webp",
        ),
        (
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            "messages.0.content.1.image.source: the fake takes only base64 images, not 'url'",
        ),
    ],
)
async def test_a_bad_image_is_a_400(fake: FakeAnthropic, block: Any, message: str) -> None:
    fake.script_text("not consumed")
    with pytest.raises(anthropic.BadRequestError) as info:
        await ask(client(fake), [{"type": "text", "text": "see"}, block])
    assert info.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
    }
    assert (await ask(client(fake))).content[0].text == "not consumed"  # type: ignore[union-attr]


async def test_an_image_over_5_mb_is_a_400(fake: FakeAnthropic) -> None:
    big = 5 * 1024 * 1024 + 4
    block = b64_image("A" * big)
    messages = [HI[0], {"role": "assistant", "content": "ok"}, {"role": "user", "content": [block]}]
    with pytest.raises(anthropic.BadRequestError) as info:
        await ask(client(fake), messages=messages)
    assert info.value.body["error"]["message"] == (  # type: ignore[index]
        f"messages.2.content.0.image.source.base64: image exceeds 5 MB maximum:"
        f" {big} bytes > 5242880 bytes"
    )
    largest = PNG + bytes(5 * 1024 * 1024 * 3 // 4 - len(PNG))
    assert len(image(largest)["source"]["data"]) == 5 * 1024 * 1024
    msg = await ask(client(fake), [image(largest)])
    assert msg.usage.input_tokens == 1600


async def test_more_than_100_images_is_a_400(fake: FakeAnthropic) -> None:
    c = client(fake)
    many = [
        {"role": "user", "content": [image()] * 60},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [image()] * 41},
    ]
    with pytest.raises(anthropic.BadRequestError) as info:
        await ask(c, messages=many)
    # The fake's own error body, as the SDK hands it over (not the SDK's wording of it).
    assert info.value.status_code == 400
    assert info.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert info.value.body["error"]["message"].endswith("Found 101.")  # type: ignore[index]
    msg = await ask(c, [image()] * 100)
    assert msg.content[0].text == "echo: [100 images]"  # type: ignore[union-attr]


async def test_a_body_over_32_mb_is_a_413(fake: FakeAnthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as info:
        await ask(client(fake), "x" * (32 * 1024 * 1024))
    assert info.value.status_code == 413
    assert info.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
    assert fake.requests == []


# -- another server (Ollama, vLLM, LiteLLM's proxy): Compat ------------------------------

TOOL = {"name": "lookup", "description": "Look up", "input_schema": {"type": "object"}}
FORCED = {"tools": [TOOL], "tool_choice": {"type": "tool", "name": "lookup"}}


async def raw_post(
    fake: FakeAnthropic, body: dict[str, Any], key: str = "k"
) -> tuple[int, str, bytes]:
    """Status, content type and body of one POST /v1/messages, past the SDK."""
    async with (
        aiohttp.ClientSession() as s,
        s.post(fake.url + "/v1/messages", json=body, headers={"x-api-key": key}) as r,
    ):
        return r.status, r.content_type, await r.read()


async def test_compat_usage_has_no_cache_fields_and_cache_control_is_ignored() -> None:
    async with FakeAnthropic(compat=Compat()) as fake:
        c = client(fake)
        first = await ask(c, system=cached_system())
        second = await ask(c, system=cached_system())
        five = [{"type": "text", "text": str(i), "cache_control": {"type": "ephemeral"}}
                for i in range(5)]  # fmt: skip
        await ask(c, system=five)  # no breakpoint limit either
        status, _, raw = await raw_post(fake, {"model": MODEL, "max_tokens": 5, "messages": HI})
        streamed_usage = (await streamed(c, system=cached_system())).usage
    whole = tokens(canonical({"type": "text", "text": BIG})) + tokens(
        canonical({"type": "text", "text": "hi"})
    )
    for usage in (first.usage, second.usage, streamed_usage):
        assert usage.input_tokens == whole
        assert usage.cache_creation_input_tokens is None and usage.cache_read_input_tokens is None
    assert status == 200 and set(json.loads(raw)["usage"]) == {"input_tokens", "output_tokens"}


@pytest.mark.parametrize(
    ("shape", "content_type", "body"),
    [
        ("openai", "application/json",
         {"error": {"message": "scripted error", "type": "rate_limit_error", "code": "429"}}),
        ("detail", "application/json", {"detail": "scripted error"}),
        ("text", "text/plain", "scripted error"),
    ],
)  # fmt: skip
async def test_compat_errors_have_the_servers_shape(
    shape: Literal["openai", "detail", "text"], content_type: str, body: Any
) -> None:
    async with FakeAnthropic(compat=Compat(errors=shape)) as fake:
        fake.script_error(429)
        status, got_type, raw = await raw_post(fake, {"model": MODEL, "max_tokens": 5,
                                                      "messages": HI})  # fmt: skip
        assert (status, got_type) == (429, content_type)
        assert (raw.decode() if shape == "text" else json.loads(raw)) == body
        fake.script_error(529)
        with pytest.raises(anthropic.APIStatusError) as caught:  # the SDK goes by the status
            await ask(client(fake))
        assert caught.value.status_code == 529 and "scripted error" in str(caught.value.body)
        status, got_type, _ = await raw_post(fake, {}, key="")  # every error: auth too
        assert (status, got_type) == (401, content_type)


async def test_compat_refuses_tools_with_a_400_before_taking_a_reply() -> None:
    async with FakeAnthropic(compat=Compat(tools="refuse")) as fake:
        c = client(fake)
        fake.script_text("kept for the next request")
        with pytest.raises(anthropic.BadRequestError) as caught:
            await ask(c, **FORCED)
        refused = {"message": "tools are not supported", "type": "invalid_request_error"}
        assert caught.value.body == {"error": {**refused, "code": "400"}}
        with pytest.raises(anthropic.BadRequestError):  # a stream too, before any event
            await streamed(c, tools=[TOOL])
        assert (await ask(c)).content[0].text == "kept for the next request"  # type: ignore[union-attr]
        assert len(fake.requests) == 3


async def test_compat_ignoring_tools_answers_text_when_a_tool_is_forced() -> None:
    async with FakeAnthropic(compat=Compat(tools="ignore")) as fake:
        c = client(fake)
        fake.script_tool_use("lookup", {"q": "cats"}, text="Cats are lovely.")
        fake.script_tool_use("lookup", {"q": "dogs"})
        fake.responder = lambda body: Reply.of_tool_use("lookup", {"q": "birds"})
        answers = [await ask(c, "dogs?", **FORCED) for _ in range(2)]
        answers.append(await streamed(c, **FORCED))
    for message in answers:
        assert message.stop_reason == "end_turn" and [b.type for b in message.content] == ["text"]
    texts = [m.content[0].text for m in answers]  # type: ignore[union-attr]
    assert texts == ["Cats are lovely.", "echo: dogs?", "echo: hi"]


async def test_compat_is_configured_over_http(fake: FakeAnthropic) -> None:
    async with aiohttp.ClientSession() as s:
        for setting, status in (({"tools": "sometimes"}, 400), ({"bogus": 1}, 400),
                                ({"tools": "ignore", "errors": "detail"}, 200)):  # fmt: skip
            async with s.post(fake.url + "/_fake/config", json={"compat": setting}) as r:
                assert r.status == status, setting
        assert fake.compat == Compat("ignore", "detail")
        fake.reset()
        assert fake.compat == Compat("ignore", "detail")  # a setting, kept
        async with s.post(fake.url + "/_fake/config", json={"compat": True}) as r:
            assert r.status == 200 and fake.compat == Compat()
        async with s.post(fake.url + "/_fake/config", json={"compat": False}) as r:
            assert r.status == 200 and fake.compat is None
    assert (await ask(client(fake))).usage.cache_read_input_tokens == 0


async def test_standalone_compat_process() -> None:
    async with standalone("--compat", "ignore", "--compat-errors", "detail") as url:
        c = AsyncAnthropic(api_key="test-key", base_url=url, max_retries=0)
        msg = await ask(c, "ping", **FORCED)
        assert msg.content[0].text == "echo: ping" and msg.usage.cache_read_input_tokens is None  # type: ignore[union-attr]
        with pytest.raises(anthropic.BadRequestError) as caught:
            await c.messages.create(model=MODEL, max_tokens=5, messages=[])
        assert caught.value.body == {"detail": "messages: at least one message is required"}
        await c.close()
