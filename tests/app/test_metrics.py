"""The Prometheus metrics: counted from the log, served by the daemon when
`metrics.listen` is set, and nowhere when it is not."""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.request
from pathlib import Path

import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families
from structlog.contextvars import bound_contextvars

from bot.app.daemon import Daemon
from bot.app.metrics import Metrics, serving_metrics
from bot.app.runtime import Runtime
from bot.soul.registry import SoulRegistry
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import RecordingPlatform, capture_logs, make_config, wait_until

log = structlog.get_logger(__name__)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of http://127.0.0.1:`port`/metrics, by name and sorted labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_the_processor_counts_turns_tokens_refusals_and_compiles() -> None:
    platform = RecordingPlatform("telegram")
    platform.heard = 1_700_000_000.0
    metrics = Metrics({"telegram": platform}, ["a session", "another"])
    sample = metrics.registry.get_sample_value

    def emit(**event: object) -> None:
        assert metrics(None, "info", dict(event)) == event  # the event passes unchanged

    with bound_contextvars(soul="lark"):  # as a session's worker binds it
        emit(event="turn.completed", latency_ms=1500.0, input_tokens=3)
        emit(event="turn.failed", error_class="overloaded")
        emit(event="wiki.compiled", conflicts=[])
        emit(event="wiki.compiled", conflicts=["people/ann"])
        emit(event="wiki.compile_failed", error_class="OSError")
    emit(event="llm.usage", soul="lark", source="turn", model="m", input_tokens=10,
         output_tokens=20, cache_creation_input_tokens=1000, cache_read_input_tokens=3000,
         cost_usd=0.5)  # fmt: skip
    emit(event="budget.refused", kind="user", soul="lark")
    emit(event="budget.refused", kind="background", soul="lark")
    emit(event="wiki.compile_busy", soul="wren")
    emit(event="turn.completed", latency_ms="not a number")  # counted, never raised
    emit(event="something.else", soul="lark")

    assert sample("soulbot_turns_total", {"soul": "lark", "outcome": "completed"}) == 1
    assert sample("soulbot_turns_total", {"soul": "lark", "outcome": "failed"}) == 1
    assert sample("soulbot_turns_total", {"soul": "lark", "outcome": "refused"}) == 1
    assert sample("soulbot_turns_total", {"soul": "", "outcome": "completed"}) == 1
    assert sample("soulbot_turn_latency_seconds_sum", {"soul": "lark"}) == 1.5
    assert sample("soulbot_turn_latency_seconds_bucket", {"soul": "lark", "le": "2.0"}) == 1
    assert sample("soulbot_turn_latency_seconds_bucket", {"soul": "lark", "le": "1.0"}) == 0
    usage = {"soul": "lark", "source": "turn", "model": "m"}
    assert sample("soulbot_model_calls_total", usage) == 1
    tokens = {
        kind: sample("soulbot_model_tokens_total", {**usage, "kind": kind})
        for kind in ("input", "output", "cache_read", "cache_write")
    }
    assert tokens == {"input": 10, "output": 20, "cache_read": 3000, "cache_write": 1000}
    assert sample("soulbot_model_cost_usd_total", usage) == 0.5
    assert sample("soulbot_budget_refusals_total", {"soul": "lark", "kind": "user"}) == 1
    assert sample("soulbot_budget_refusals_total", {"soul": "lark", "kind": "background"}) == 1
    outcomes = [("lark", "ok"), ("lark", "conflict"), ("lark", "failed"), ("wren", "busy")]
    compiles = {
        outcome: sample("soulbot_compiles_total", {"soul": soul, "outcome": outcome})
        for soul, outcome in outcomes
    }
    assert compiles == {"ok": 1, "conflict": 1, "failed": 1, "busy": 1}
    assert sample("soulbot_sessions_live") == 2
    assert sample("soulbot_adapter_connected", {"adapter": "telegram"}) == 0  # not started
    assert sample(
        "soulbot_adapter_last_event_timestamp_seconds", {"adapter": "telegram"}
    ) == pytest.approx(1_700_000_000.0)


async def test_the_daemon_serves_a_turn_its_tokens_and_its_latency(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url, 'metrics: {listen: "127.0.0.1:0"}\n')
        registry = SoulRegistry(config.workspaces)
        registry.reload_all()
        platform = RecordingPlatform()
        runtime = await Runtime.open(config, registry, [platform])
        daemon = Daemon(runtime)
        serving = asyncio.create_task(daemon.serve())
        await wait_until(lambda: platform.started)
        assert daemon.metrics is not None
        port = daemon.metrics.port
        platform.heard = 1_700_000_123.0
        await platform.say("hello, are you counting?")
        await platform.replies(1)
        samples = await asyncio.to_thread(scrape, port)
        daemon.request_stop()
        assert await asyncio.wait_for(serving, 30) == 0

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("soulbot_turns_total", soul="lark", outcome="completed") == 1
    assert value("soulbot_turn_latency_seconds_count", soul="lark") == 1
    assert value("soulbot_turn_latency_seconds_sum", soul="lark") > 0
    chat = {"soul": "lark", "source": "turn", "model": config.model.name}
    assert value("soulbot_model_calls_total", **chat) == 1
    assert value("soulbot_model_tokens_total", **chat, kind="input") > 0
    assert value("soulbot_model_tokens_total", **chat, kind="output") > 0
    # The soul is over the fake's 1,024 tokens: the first turn writes the cache.
    assert value("soulbot_model_tokens_total", **chat, kind="cache_write") > 0
    assert value("soulbot_model_tokens_total", **chat, kind="cache_read") == 0
    assert value("soulbot_sessions_live") == 1
    assert value("soulbot_adapter_connected", adapter="test") == 1
    assert value("soulbot_adapter_last_event_timestamp_seconds", adapter="test") == 1_700_000_123
    assert daemon.metrics is None
    with pytest.raises(OSError):  # stopped with the daemon: the port is closed
        await asyncio.to_thread(scrape, port)


async def test_without_metrics_listen_nothing_listens(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        config = make_config(tmp_path, fake.url)
        assert config.metrics.listen is None
        registry = SoulRegistry(config.workspaces)
        registry.reload_all()
        platform = RecordingPlatform()
        runtime = await Runtime.open(config, registry, [platform])
        daemon = Daemon(runtime)
        before = set(threading.enumerate())
        serving = asyncio.create_task(daemon.serve())
        await wait_until(lambda: platform.started)
        await platform.say("hello")
        await platform.replies(1)
        assert daemon.metrics is None
        started = {t.name for t in set(threading.enumerate()) - before}
        assert not [name for name in started if "serve_forever" in name]
        daemon.request_stop()
        assert await asyncio.wait_for(serving, 30) == 0


async def test_a_port_in_use_is_logged_and_the_rest_serves() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with capture_logs() as logs:
            async with serving_metrics(f"127.0.0.1:{port}", {}, []) as server:
                assert server is None
    [error] = [e for e in logs if e["event"] == "metrics.error"]
    assert error["listen"] == f"127.0.0.1:{port}"
    assert error["log_level"] == "error"


async def test_a_line_logged_while_serving_is_scraped_and_the_port_closes_after() -> None:
    async with serving_metrics("127.0.0.1:0", {}, []) as server:
        assert server is not None
        port = server.port
        with bound_contextvars(soul="lark"):
            log.info("turn.completed", latency_ms=250.0)
        samples = await asyncio.to_thread(scrape, port)
    assert samples[("soulbot_turns_total", (("outcome", "completed"), ("soul", "lark")))] == 1
    with pytest.raises(OSError):
        await asyncio.to_thread(scrape, port)
