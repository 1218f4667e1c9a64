"""Prometheus metrics of `soulbot run`, served at `/metrics` when `metrics.listen` is set.

Most are counted from the structlog events the code logs anyway: `Metrics` is a
structlog processor (bot/app/logs.py's `observing`, at every log level), so the
chat path calls nothing of this module. The label `soul` is the soul's id.

    soulbot_turns_total{soul, outcome}       turn.completed (completed), turn.failed
                                             (failed), budget.refused of a chat
                                             budget: soul, user, admin (refused)
    soulbot_turn_latency_seconds{soul}       turn.completed's latency_ms: from the
                                             first message's arrival to the reply's end
    soulbot_model_calls_total{soul, source, model}         llm.usage, one a call
    soulbot_model_tokens_total{soul, source, model, kind}  llm.usage; kind: input,
                                             output, cache_read, cache_write; a cache
                                             figure the model server did not report
                                             (None: docs/model-servers.md) adds nothing,
                                             and a model that never reports one has no
                                             cache_read or cache_write series (unknown,
                                             not 0)
    soulbot_model_cost_usd_total{soul, source, model}      llm.usage's cost_usd
    soulbot_budget_refusals_total{soul, kind}              budget.refused
    soulbot_compiles_total{soul, outcome}    wiki.compiled (ok, or conflict when a page
                                             waits), wiki.compile_failed (failed),
                                             wiki.compile_busy (busy)

The rest are read at each scrape (on the server's thread: reads only):

    soulbot_adapter_connected{adapter}                     1 or 0 (`Adapter.connected`)
    soulbot_adapter_last_event_timestamp_seconds{adapter}  `Adapter.last_seen`;
                                             no sample when None (the terminal)
    soulbot_sessions_live                    sessions in memory
    soulbot_store_oldest_call_age_seconds    how long the oldest store call queued or
                                             running has waited (`Database.waiting_s`;
                                             0 when none waits): every chat waits behind it

and prometheus_client's `process_*` (memory, CPU, open files). The cache hit share
has no metric of its own: it is derived from the token counters, cache_read over
input + cache_read + cache_write, as `soulbot usage` computes it.

`serving_metrics` is what the daemon opens: nothing without `metrics.listen`; else
the HTTP server on a thread of its own (prometheus_client's `start_http_server`),
shut down at exit. A bind that fails is logged (`metrics.error`) and the daemon
serves without metrics, as it does without an adapter that cannot start.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, MutableMapping, Sized
from typing import Any

import structlog
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from structlog.contextvars import get_contextvars

from adapters.base import Adapter
from bot.app.logs import observing
from bot.config.schema import split_listen

log = structlog.get_logger(__name__)

LATENCY_BUCKETS_S = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)
CHAT_BUDGETS = frozenset({"soul", "user", "admin"})  # a refusal of one of these refuses a turn
_TOKENS = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cache_read": "cache_read_input_tokens",
    "cache_write": "cache_creation_input_tokens",
}


def _number(event: Mapping[str, Any], key: str) -> float:
    """`event[key]` as a number; 0.0 when it is missing or not one."""
    value = event.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


class _Adapters(Collector):
    """The adapters' state, read when scraped."""

    def __init__(self, adapters: Mapping[str, Adapter]) -> None:
        self._adapters = adapters

    def collect(self) -> Iterator[Metric]:
        connected = GaugeMetricFamily(
            "soulbot_adapter_connected",
            "1 while the adapter's connection is up as far as its library knows.",
            labels=["adapter"],
        )
        seen = GaugeMetricFamily(
            "soulbot_adapter_last_event_timestamp_seconds",
            "When the adapter last heard from its platform (unix time).",
            labels=["adapter"],
        )
        for name, adapter in list(self._adapters.items()):
            connected.add_metric([name], 1.0 if adapter.connected() else 0.0)
            if (last := adapter.last_seen()) is not None:
                seen.add_metric([name], last)
        yield connected
        yield seen


class Metrics:
    """soulbot's metrics, in a registry of their own; call it as a structlog
    processor (it returns the event unchanged and never raises)."""

    def __init__(
        self,
        adapters: Mapping[str, Adapter],
        sessions: Sized,
        store_wait: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns = Counter("soulbot_turns", "Turns, by how they ended.",
                             ["soul", "outcome"], registry=r)  # fmt: skip
        self.latency = Histogram(
            "soulbot_turn_latency_seconds",
            "Seconds from a turn's first message to the end of its reply.",
            ["soul"], buckets=LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.calls = Counter("soulbot_model_calls", "Model calls.",
                             ["soul", "source", "model"], registry=r)  # fmt: skip
        self.tokens = Counter("soulbot_model_tokens", "Tokens of model calls, by kind.",
                              ["soul", "source", "model", "kind"], registry=r)  # fmt: skip
        self.cost = Counter("soulbot_model_cost_usd", "US dollars of model calls (the ledger's).",
                            ["soul", "source", "model"], registry=r)  # fmt: skip
        self.refusals = Counter("soulbot_budget_refusals", "Model calls a daily budget refused.",
                                ["soul", "kind"], registry=r)  # fmt: skip
        self.compiles = Counter("soulbot_compiles", "Memory wiki compiles, by outcome.",
                                ["soul", "outcome"], registry=r)  # fmt: skip
        live = Gauge("soulbot_sessions_live", "Sessions in memory.", registry=r)
        live.set_function(lambda: len(sessions))
        wait = Gauge("soulbot_store_oldest_call_age_seconds",
                     "Seconds the oldest store call waiting has waited.", registry=r)  # fmt: skip
        wait.set_function(store_wait)
        r.register(_Adapters(adapters))
        ProcessCollector(registry=r)
        self._on: dict[str, Callable[[Mapping[str, Any]], None]] = {
            "turn.completed": self._completed,
            "turn.failed": lambda e: self.turns.labels(self._soul(e), "failed").inc(),
            "llm.usage": self._usage,
            "budget.refused": self._refused,
            "wiki.compiled": lambda e: self.compiles.labels(
                self._soul(e), "conflict" if e.get("conflicts") else "ok"
            ).inc(),
            "wiki.compile_failed": lambda e: self.compiles.labels(self._soul(e), "failed").inc(),
            "wiki.compile_busy": lambda e: self.compiles.labels(self._soul(e), "busy").inc(),
        }

    def __call__(
        self, logger: Any, method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        name = event.get("event")
        count = self._on.get(name) if isinstance(name, str) else None
        if count is not None:
            with contextlib.suppress(Exception):  # a metric never costs a log line
                count(event)
        return event

    @staticmethod
    def _soul(event: Mapping[str, Any]) -> str:
        """The event's soul, or the one bound to the context (a session's, a compile's)."""
        soul = event.get("soul") or get_contextvars().get("soul")
        return str(soul) if soul else ""

    def _completed(self, event: Mapping[str, Any]) -> None:
        soul = self._soul(event)
        self.turns.labels(soul, "completed").inc()
        self.latency.labels(soul).observe(_number(event, "latency_ms") / 1000)

    def _usage(self, event: Mapping[str, Any]) -> None:
        labels = (self._soul(event), str(event.get("source", "")), str(event.get("model", "")))
        self.calls.labels(*labels).inc()
        for kind, key in _TOKENS.items():
            if event.get(key) is not None:  # a cache figure the server did not report: no sample
                self.tokens.labels(*labels, kind).inc(_number(event, key))
        self.cost.labels(*labels).inc(_number(event, "cost_usd"))

    def _refused(self, event: Mapping[str, Any]) -> None:
        soul, kind = self._soul(event), str(event.get("kind", ""))
        self.refusals.labels(soul, kind).inc()
        if kind in CHAT_BUDGETS:  # chat budgets are checked only for turns' calls
            self.turns.labels(soul, "refused").inc()


class MetricsServer:
    """The `/metrics` endpoint of `registry` on `listen` (`host:port`; port 0: a
    free one), served on a thread from construction until `close`. Raises OSError
    when it cannot listen there."""

    def __init__(self, listen: str, registry: CollectorRegistry) -> None:
        self.host, port = split_listen(listen)
        self._server, self._thread = start_http_server(port, self.host, registry)
        self.port: int = self._server.server_port

    def close(self) -> None:
        """Stop serving and release the port (blocks up to half a second)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@contextlib.asynccontextmanager
async def serving_metrics(
    listen: str | None,
    adapters: Mapping[str, Adapter],
    sessions: Sized,
    store_wait: Callable[[], float] = lambda: 0.0,
) -> AsyncIterator[MetricsServer | None]:
    """The metrics served on `listen` and counted from the log while open; None
    when `listen` is None or the port cannot be had (`metrics.error`)."""
    if listen is None:
        yield None
        return
    metrics = Metrics(adapters, sessions, store_wait)
    try:
        server = MetricsServer(listen, metrics.registry)
    except OSError as exc:
        log.error("metrics.error", listen=listen, error=f"{type(exc).__name__}: {exc}")
        yield None
        return
    log.info("metrics.serving", host=server.host, port=server.port, path="/metrics")
    try:
        with observing(metrics):
            yield server
    finally:
        await asyncio.to_thread(server.close)
