"""soulbot against another server of the Messages API behind `model.base_url`
(Ollama, vLLM, LiteLLM's proxy: docs/model-servers.md), played by the fake's
compat mode: no cache figures, cache_control ignored, its own error bodies, and
tools refused (a 400) or ignored (text answered)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from bot import prompts
from bot.app.daemon import Daemon
from bot.app.runtime import Runtime
from bot.errors import BudgetExceeded, ModelRejected, ToolsUnsupported
from bot.model.usage import PARTIAL, UNKNOWN, CallContext, usage_table
from bot.soul.registry import SoulRegistry
from tests.app.test_metrics import scrape
from tests.chat.test_reflect import (
    CONSOLE,
    LONG,
    SOUL,
    Model,
    save_soul,
    slow_idle,
    soul_config,
    soul_text,
)
from tests.fakes.anthropic_fake import Compat, FakeAnthropic
from tests.fakes.librarian import librarian
from tests.kit import RecordingPlatform, capture_logs, make_config, running, wait_until
from tests.memory.test_compile import SCOPE, traces

USAGE = (
    'SELECT soul, "user", source, input_tokens, output_tokens, cache_creation_input_tokens,'
    " cache_read_input_tokens FROM usage ORDER BY id"
)
PER_USER = 100_000


def events(logs: list[Any], name: str) -> list[Any]:
    return [e for e in logs if e["event"] == name]


async def test_a_daemon_turn_against_a_server_that_refuses_tools(tmp_path: Path) -> None:
    """Chat works (a turn whose tools are refused is asked again without them,
    and later turns offer none), budgets are charged, and the cache figures are
    unknown in the ledger, the log lines and the metrics."""
    extra = f'metrics: {{listen: "127.0.0.1:0"}}\nbudget: {{daily_tokens_per_user: {PER_USER}}}\n'
    async with FakeAnthropic(compat=Compat(tools="refuse")) as fake:
        config = make_config(tmp_path, fake.url, extra)
        registry = SoulRegistry(config.workspaces)
        registry.reload_all()
        platform = RecordingPlatform()
        runtime = await Runtime.open(config, registry, [platform])
        daemon = Daemon(runtime)
        with capture_logs() as logs:
            serving = asyncio.create_task(daemon.serve())
            await wait_until(lambda: platform.started)
            await platform.say("hello, are you there?")
            await platform.replies(1)
            await platform.say("and now?")
            sent = await platform.replies(2)
            assert daemon.metrics is not None
            samples = await asyncio.to_thread(scrape, daemon.metrics.port)
            rows = await runtime.db.run(lambda c: c.execute(USAGE).fetchall())
            soul, user = rows[0][0], rows[0][1]
            ctx = CallContext(soul, f"user:{user}", user, user, "turn")
            charged = sum(row[3] + row[4] for row in rows)
            await runtime.ledger.check(ctx, PER_USER - charged)
            with pytest.raises(BudgetExceeded) as refused:
                await runtime.ledger.check(ctx, PER_USER - charged + 1)
            daemon.request_stop()
            assert await asyncio.wait_for(serving, 30) == 0
    assert [m.text.rsplit("\n", 1)[-1] for m in sent] == ["hello, are you there?", "and now?"]
    assert all(m.text.startswith("echo: ") for m in sent)
    turns = [r for r in fake.requests if "tool_choice" not in r]  # not the compile at stop
    assert ["tools" in r for r in turns] == [True, False, False]
    [tools_refused] = events(logs, "llm.tools_refused")
    assert tools_refused["error"] == "HTTP 400: tools are not supported"
    assert "tool calling" in tools_refused["effect"]
    assert len(rows) == 2 and all(r[3] > 0 and r[5:] == (None, None) for r in rows)
    assert refused.value.used == charged  # every input and output token, no cache token
    for line in [*events(logs, "llm.usage"), *events(logs, "turn.completed")]:
        assert line["cache_read_input_tokens"] is None
        assert line["cache_creation_input_tokens"] is None
    kinds = {
        dict(labels)["kind"]
        for (name, labels), _ in samples.items()
        if name == "soulbot_model_tokens_total"
    }
    assert kinds == {"input", "output"}  # no cache series: unknown, not 0


async def test_the_usage_report_shows_the_cache_as_unknown(tmp_path: Path) -> None:
    async with FakeAnthropic(compat=Compat(tools="ignore")) as fake:
        config = make_config(tmp_path, fake.url, "admins: {telegram: [1]}\n")
        async with running(config, "telegram") as (runtime, platform):
            await platform.say("remember the owl", user="1")
            await platform.replies(1)
            await platform.say("/soul usage 1", user="1")
            chat = (await platform.replies(2))[-1].text
            report = await runtime.db.run(
                lambda c: usage_table(c, days=1, by="soul", now=time.time())
            )
    lark = next(line for line in report.splitlines() if line.startswith("lark "))
    assert lark.split()[4:7] == [UNKNOWN] * 3  # cache write, cache read, cache hit
    assert "Cache figures of 1 call(s) are unknown: their model server reported none." in report
    # On Telegram, the compact form: the hit share unknown, and a line that says why.
    lark = next(line for line in chat.splitlines() if line.startswith("lark "))
    assert lark.split()[-1] == "?"
    assert prompts.USAGE_COMPACT_UNKNOWN.format(unknown="?", mark=PARTIAL) in chat


async def test_a_compile_against_a_server_that_refuses_tools_keeps_its_traces(
    tmp_path: Path,
) -> None:
    async with (
        FakeAnthropic(compat=Compat(tools="refuse")) as fake,
        running(make_config(tmp_path, fake.url)) as (runtime, platform),
    ):
        wiki = runtime.memory.wiki("lark", SCOPE)
        assert wiki is not None
        await runtime.memory.store.add(traces("I moved to Lisbon", "My cat is Miso"))
        with capture_logs() as before_any_turn, pytest.raises(ModelRejected):
            await runtime.memory.compile_one("lark", SCOPE)
        await platform.say("are you still there?")  # chat goes on, and finds out
        assert (await platform.replies(1))[0].text.endswith("\nare you still there?")
        with capture_logs() as logs, pytest.raises(ToolsUnsupported):
            await runtime.memory.compile_one("lark", SCOPE)
        assert wiki.watermark() == 0 and wiki.list_pages() == []  # nothing taken up
        fake.configure(compat=False)  # a server with tool calling: the same traces compile
        fake.responder = librarian
        result = await runtime.memory.compile_one("lark", SCOPE)
    [unknown] = before_any_turn  # one line each time, with the server's reason
    assert unknown["event"] == "wiki.compile_failed" and unknown["error_class"] == "ModelRejected"
    assert unknown["error"] == "BadRequestError: HTTP 400: tools are not supported"
    [known] = logs
    assert known["event"] == "wiki.compile_failed" and known["error_class"] == "ToolsUnsupported"
    assert known["error"].startswith(
        "BadRequestError: the model server refused a request with the tool file_notes"
        " (HTTP 400: tools are not supported); it does not do tool calling"
    )
    assert "docs/model-servers.md" in known["error"]
    assert result.traces == 2 and result.conflicts == ()
    ann = wiki.read_page("entities/ann")
    assert ann is not None and "Lisbon" in ann.body and "Miso" in ann.body


async def test_a_heartbeat_against_a_server_that_refuses_tools_asks_again_later(
    tmp_path: Path,
) -> None:
    async with FakeAnthropic(compat=Compat(tools="refuse")) as fake:
        model = Model(fake)
        model.reflections.append(save_soul("Ann told me about her basil and her lemon tree."))
        config = slow_idle(soul_config(tmp_path, fake.url))
        async with running(config, CONSOLE) as (runtime, platform):
            await platform.say(LONG, user="ann")
            await platform.replies(1)
            with capture_logs() as logs:
                await runtime.reflector.flush()
            assert soul_text(tmp_path) == SOUL
            [failed] = events(logs, "heartbeat.failed")
            assert "refused a request with the tool save_soul" in failed["error"]
            assert "tool calling" in failed["error"]
            assert [e["event"] for e in logs] == ["heartbeat.failed"]
            await platform.say("and the roses?", user="ann")  # chat goes on
            assert (await platform.replies(2))[-1].text.endswith("\nand the roses?")
            fake.configure(compat=False)  # the conversation waited: it is reflected now
            await runtime.reflector.flush()
    assert "Ann told me about her basil and her lemon tree." in soul_text(tmp_path)
    assert "repotting" in str(model.heartbeat_calls[0]["messages"])


async def test_a_server_that_ignores_tools_loses_no_fact(tmp_path: Path) -> None:
    """Tools ignored, text answered: the turn works, the compile files every note
    on the default page (a conflict says so), the heartbeat writes nothing."""
    async with FakeAnthropic(compat=Compat(tools="ignore")) as fake:
        model = Model(fake)
        config = slow_idle(soul_config(tmp_path, fake.url, ""))
        async with running(config, CONSOLE) as (runtime, platform):
            await runtime.memory.store.add(traces("I moved to Lisbon", "My cat is Miso"))
            wiki = runtime.memory.wiki("lark", SCOPE)
            assert wiki is not None
            result = await runtime.memory.compile_one("lark", SCOPE)
            await platform.say(LONG, user="ann")
            await platform.replies(1)
            with capture_logs() as logs:
                await runtime.reflector.flush()
    assert any("the model filed no notes" in c for c in result.conflicts)
    notes = wiki.read_page("concepts/notes")
    assert notes is not None and "Lisbon" in notes.body and "Miso" in notes.body
    assert soul_text(tmp_path) == SOUL and len(model.heartbeat_calls) == 1
    [rejected] = events(logs, "heartbeat.rejected")
    assert "without calling save_soul" in rejected["reason"]
