"""Turns benchmark: N sessions x M messages through the real router, sessions,
agent and SDK, against the fake Anthropic server in another process (zero latency).

Two phases on one runtime:
- capacity: every session sends its next message when the reply to the previous
  one arrives, all sessions at once (a closed loop that saturates the daemon);
  throughput = turns / wall time.
- paced: messages arrive at a fixed rate (`--rate`, default the 200 turns/s
  target) spread over the same sessions (an open loop below capacity); the
  overhead per turn is measured here, since in a saturated closed loop every
  turn's latency is mostly the wait behind the other 999 sessions (Little's law:
  latency = sessions in flight / throughput), not the daemon's own work.
Overhead per turn = (time `send` got the reply - time the inbound went to
`router.handle`) - the turn's `model_ms` (the requests' own time, from its
`turn.completed` event; the wait for a `model.max_concurrency` slot counts as
overhead). Prints one JSON line; exit status 1 when a target is missed.

Replies stream, as the daemon's default does (`--no-streaming`: sent whole):
the model's answer is streamed from the fake, and the reply counts as arrived
at its first shown text (what a person sees first). The platforms' one-second
pace of edits is the adapters' (adapters/stream.py), not the core's overhead,
so the bench's stream shows each text at once.

    .venv/bin/python bench/turns.py [--sessions 1000] [--messages 5] [--rate 200]
                                    [--no-streaming] [--store postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.base import Deliver
from bench.common import (
    Event,
    SimulatedPlatform,
    emit,
    fresh_store,
    make_config,
    message,
    tap,
    write_soul,
)
from bot import prompts
from bot.app.logs import configure_logging
from bot.app.runtime import Runtime, settle_gc
from bot.config.schema import Config
from bot.soul.registry import SoulRegistry
from bot.types import Inbound, Outbound, ReplyStream
from tests.fakes.process import FakeProcess

TARGET_THROUGHPUT = 200.0  # turns/s, at least
TARGET_OVERHEAD_P99_MS = 25.0  # under
TARGET_RSS_MB = 250.0  # under
TIMEOUT_S = 110.0  # for the whole run; replies still missing then count as lost


@dataclass
class Sample:
    """One turn as the benchmark saw it (seconds, perf_counter clock)."""

    sent: float
    replied: float
    model_s: float | None  # None: no turn.completed (a failed turn)
    messages: int  # how many messages the turn answered
    index: int  # the message's place in its session (0 = first)
    paced: bool = False  # sent by the paced phase


@dataclass
class BenchAdapter(SimulatedPlatform):
    """An Adapter that plays N users; replies are matched by `reply_to`."""

    name: str = "bench"
    streaming: bool = False
    samples: list[Sample] = field(default_factory=list)
    failed: int = 0
    _deliver: Deliver | None = None
    _waiting: dict[str, asyncio.Future[tuple[float, str]]] = field(default_factory=dict)
    _whole: dict[str, asyncio.Future[str]] = field(default_factory=dict)
    _completed: dict[str, tuple[float, int]] = field(default_factory=dict)

    async def start(self, deliver: Deliver) -> None:
        self._deliver = deliver

    async def stop(self) -> None:
        self._deliver = None

    def stream(self, message: Outbound) -> ReplyStream | None:
        return _Shown(self, message.reply_to or "") if self.streaming else None

    async def send(self, message: Outbound) -> list[str]:
        self.arrived(message.reply_to or "", message.text)
        return []

    def arrived(self, reply_to: str, text: str, final: bool = True) -> None:
        """The reply to `reply_to` is shown (`final`: whole) with `text`."""
        now = time.perf_counter()
        first = self._waiting.pop(reply_to, None)
        if first is not None and not first.done():
            first.set_result((now, text))
        whole = self._whole.pop(reply_to, None) if final else None
        if whole is not None and not whole.done():
            whole.set_result(text)

    async def close(self) -> None:
        self._deliver = None

    def on_turn(self, event: Event) -> None:
        """`turn.completed` is logged just before its reply is sent, in the same task."""
        self._completed[event["session"]] = (event["model_ms"] / 1000, event["messages"])

    async def exchange(self, user: int, turn: int, paced: bool = False) -> None:
        """Send message `turn` of `user` and wait for its reply."""
        text, mid = message(turn, user), f"m{user}-{turn}"
        inbound = Inbound(self.name, f"chat{user}", f"u{user}", f"User {user}", text,
                          is_dm=True, message_id=mid)  # fmt: skip
        await self.answer(inbound, turn, paced)

    async def answer(self, inbound: Inbound, turn: int = 0, paced: bool = False) -> None:
        """Deliver `inbound` and wait for its reply; records the sample."""
        if self._deliver is None:
            return
        chat, mid = inbound.chat_id, inbound.message_id
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[float, str]] = loop.create_future()
        whole: asyncio.Future[str] = loop.create_future()
        self._waiting[mid], self._whole[mid] = future, whole
        sent = time.perf_counter()
        await self._deliver(inbound)
        replied, _ = await future
        text = await whole  # a stream shows its first text before its end
        model_s, answered = self._completed.pop(f"{self.name}:{chat}", (None, 1))
        if model_s is None or text == prompts.APOLOGY:
            self.failed += 1
        self.samples.append(Sample(sent, replied, model_s, answered, turn, paced))

    async def converse(self, user: int, messages: int) -> None:
        for turn in range(messages):
            await self.exchange(user, turn)

    async def paced(self, rate: float, total: int, sessions: int, first_turn: int) -> None:
        """`total` messages at `rate` per second, round-robin over the sessions."""
        loop = asyncio.get_running_loop()
        start, tasks = loop.time(), []
        for k in range(total):
            delay = start + k / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            user, turn = k % sessions, first_turn + k // sessions
            tasks.append(asyncio.create_task(self.exchange(user, turn, paced=True)))
        await asyncio.gather(*tasks)


@dataclass
class _Shown:
    """A streamed reply as the bench sees it: its first text is its arrival."""

    adapter: BenchAdapter
    reply_to: str

    async def update(self, text: str) -> None:
        self.adapter.arrived(self.reply_to, text, final=False)

    async def finish(self, message: Outbound) -> list[str]:
        self.adapter.arrived(self.reply_to, message.text)
        return []

    async def abort(self) -> None:
        return


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def drive(
    config: Config, sessions: int, messages: int, rate: float, paced: int, streaming: bool = False
) -> BenchAdapter:
    """Open the runtime with the bench adapter, run both phases, close."""
    registry = SoulRegistry(config.workspaces)
    registry.reload_all()
    adapter = BenchAdapter(streaming=streaming)
    tap(["turn.completed"], adapter.on_turn)
    runtime = await Runtime.open(config, registry, [adapter])
    settle_gc()  # as `soulbot run` does after start-up
    try:
        await runtime.start_adapters()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(TIMEOUT_S):
                await asyncio.gather(*(adapter.converse(i, messages) for i in range(sessions)))
                # The saturated phase leaves trace writes queued: store them first, so
                # the paced phase measures its own turns, not that backlog.
                await runtime.memory.drain(TIMEOUT_S)
                await adapter.paced(rate, paced, sessions, messages)
        await runtime.stop_adapters()
        await runtime.sessions.wait(10.0)
    finally:
        await runtime.close()
    return adapter


def summarize(
    adapter: BenchAdapter, sessions: int, messages: int, cap: int, rate: float, paced: int
) -> dict[str, Any]:
    closed = [s for s in adapter.samples if not s.paced]
    wall = max(s.replied for s in closed) - min(s.sent for s in closed) if closed else 0.0
    samples = [s for s in adapter.samples if s.paced]
    single = [s for s in samples if s.model_s is not None and s.messages == 1]
    overhead = [(s.replied - s.sent - (s.model_s or 0.0)) * 1000 for s in single]
    latency = [(s.replied - s.sent) * 1000 for s in samples]
    model = [s.model_s * 1000 for s in samples if s.model_s is not None]
    lost = sessions * messages + paced - len(adapter.samples)
    closed_overhead = [
        (s.replied - s.sent - (s.model_s or 0.0)) * 1000 for s in closed if s.model_s is not None
    ]
    figures = {
        "throughput_turns_per_s": round(len(closed) / wall, 1) if wall else 0.0,
        "overhead_ms_p99": round(percentile(overhead, 99), 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    ok = {
        "throughput_turns_per_s": figures["throughput_turns_per_s"] >= TARGET_THROUGHPUT,
        "overhead_ms_p99": figures["overhead_ms_p99"] < TARGET_OVERHEAD_P99_MS,
        "peak_rss_mb": figures["peak_rss_mb"] < TARGET_RSS_MB,
    }
    return {
        "bench": "turns",
        "sessions": sessions,
        "messages_per_session": messages,
        "max_concurrency": cap,
        "turns": len(adapter.samples),
        "failed_turns": adapter.failed,
        "lost_replies": lost,
        "capacity_turns": len(closed),
        "capacity_wall_s": round(wall, 2),
        "throughput_turns_per_s": figures["throughput_turns_per_s"],
        "capacity_overhead_ms_p50": round(percentile(closed_overhead, 50), 1),
        "paced_rate_per_s": rate,
        "paced_turns": len(samples),
        "paced_turns_single_message": len(single),
        "overhead_ms_p50": round(percentile(overhead, 50), 2),
        "overhead_ms_p99": figures["overhead_ms_p99"],
        "latency_ms_p50": round(percentile(latency, 50), 1),
        "latency_ms_p99": round(percentile(latency, 99), 1),
        "model_ms_p50": round(percentile(model, 50), 1),
        "model_ms_p99": round(percentile(model, 99), 1),
        "peak_rss_mb": figures["peak_rss_mb"],
        "target": {
            "throughput_turns_per_s_min": TARGET_THROUGHPUT,
            "overhead_ms_p99_max": TARGET_OVERHEAD_P99_MS,
            "peak_rss_mb_max": TARGET_RSS_MB,
        },
        "pass": ok,
        "all_pass": all(ok.values()) and not adapter.failed and not lost,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64, help="model.max_concurrency")
    parser.add_argument("--rate", type=float, default=TARGET_THROUGHPUT, help="paced messages/s")
    parser.add_argument("--paced", type=int, default=3000, help="messages in the paced phase")
    parser.add_argument("--no-streaming", dest="streaming", action="store_false")
    parser.add_argument(
        "--store",
        help="a PostgreSQL server (postgresql://...) to run on, a new schema; "
        "default: SQLite in a temporary folder",
    )
    args = parser.parse_args()
    configure_logging("json", "warning")
    with (
        tempfile.TemporaryDirectory(prefix="soulbot-bench-") as tmp,
        FakeProcess() as fake,
        fresh_store(args.store, Path(tmp), "soulbot") as target,
    ):
        store = {"store": {"url": target}} if isinstance(target, str) else {}
        config = make_config(Path(tmp), fake.url, args.concurrency, store)
        write_soul(config.workspaces)
        adapter = asyncio.run(
            drive(config, args.sessions, args.messages, args.rate, args.paced, args.streaming)
        )
    result = summarize(
        adapter, args.sessions, args.messages, args.concurrency, args.rate, args.paced
    )
    result["streaming"] = args.streaming
    result["store"] = "sqlite" if args.store is None else "postgresql"
    emit(result)
    return 0 if result["all_pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
