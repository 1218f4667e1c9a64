"""Soak benchmark: a month of traffic on one runtime, in a few minutes, to show
that nothing grows without bound.

30 simulated days (`--days`) of at least 100,000 messages (`--messages`) over
1,000 sessions (`--sessions`, DMs; each day a rotating `--active` of them talk),
through the real router, sessions, agent, memory, heartbeat and SDK, against the
fake Anthropic server (tests/fakes/anthropic_fake.py) in another process. Its
responder answers as a model would, in bounded sizes: a reply of one line, a
compaction summary, a compiled page of the newest facts, a heartbeat reflection.
A warm-up day (day 0, not counted: `--warmup` messages from every session in one
burst, enough to fill its history budget and compact it) makes day 1 a day like
the others: its sessions have a full history to load, a summary, older traces to
recall, a compiled wiki and a self page. What changes from day 1 to day 30 is
then only what the month has added. Each day:

- morning: the day's sessions talk, all at once, each sending its messages in
  bursts (three or four back to back: a person writing in pieces; the first is
  answered alone, the others together) and its next burst when the reply to
  the last arrived (a closed loop at full speed); every tenth message of a
  person carries a photo (16 kB, kept: `media.keep`), and half the people (odd
  numbers) have their replies streamed; then a paced
  probe (`--probe` messages at `--rate` per second, one per session of the day)
  measures the latency overhead per turn as bench/turns.py does (reply time -
  inbound time - the turn's `model_ms`);
- evening: the clock moves past `heartbeat.idle_minutes` and the heartbeat
  reflects on every conversation of the day (a self page per scope);
- night: the clock moves to 03:00 and the nightly compile runs
  (`memory.compile_all`, as the daemon's scheduler does), then retention
  (`retention.run`, every window `--retention` days: 7); the idle sessions leave
  memory (`evict_idle`, as the manager's sweep does);
- then RSS (after a full collection: what is held, not garbage waiting), the
  database's size (with its WAL), its pages in use (dbstat) and its row counts,
  and the kept images' size are taken.

The overhead per turn that the target holds is the daemon process's CPU time
per turn over the day's traffic (its threads included; the model is another
process): what a turn costs, whatever the wait behind other turns, which is what
a latency figure mostly holds under a closed loop and on a shared machine. The
history budget is 600 tokens, so every session compacts on its first day and
every few turns, and compacted rows pile up behind the live ones; delivered ids
are pruned past their 7-day window. The clock: before soulbot is imported,
`time.time` is replaced by the month's clock (real time plus an offset the bench
moves), so every part's `clock=time.time` default (ledger, history, memory,
scopes, heartbeat, compile) lives in the simulated month; the event loop's clock
stays real.

The store's size (`store_mb`) is what retention bounds: the database's pages in
use by every table but the memory's, and the kept images. The memory (`memory_mb`:
traces, their text index, folds) is the soul's memory, kept for ever by design,
and reported beside it, as is the file (`db_mb`), which grows by the memory alone
once deleted rows free pages for the new ones.

Target: CPU per turn and RSS at the month's end within 20% of its start, and the
store's size within 20% of the first days after the retention window (days 8-10
against 28-30), each end the median of `--ends` days (3: days 1-3 against 28-30): one day's CPU per
turn moves by a quarter from one day to the next on a shared VM, and a single
day at each end made the target a coin toss; a median of three still shows a
growth that lasts (it holds every later day, not one). Prints one JSON line;
exit status 1 when a target is missed.

    .venv/bin/python bench/soak.py [--days 30] [--sessions 1000] [--messages 100000]
                                   [--retention 7]
"""

# ruff: noqa: E402 (the clock is replaced before soulbot is imported)
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class SimClock:
    """The wall clock of the simulated month: real time plus an offset."""

    def __init__(self) -> None:
        self._real = time.time
        self.offset = 0.0

    def __call__(self) -> float:
        return self._real() + self.offset

    def set(self, when: float) -> None:
        """Move the clock to `when` (it goes on with real time from there)."""
        self.offset = when - self._real()


CLOCK = SimClock()
if __name__ == "__main__" and "--serve-fake" not in sys.argv:
    time.time = CLOCK

import argparse
import asyncio
import contextlib
import gc
import math
import os
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from adapters.base import Deliver
from bench.common import Event, SimulatedPlatform, finish, make_config, message, tap, write_soul
from bot import prompts
from bot.app.logs import configure_logging
from bot.app.runtime import MEDIA_FOLDER, Runtime, settle_gc
from bot.config.schema import Config
from bot.errors import CompileFailed
from bot.soul.registry import SoulRegistry
from bot.storage.db import DB_NAME
from bot.types import Inbound, Media, Outbound, ReplyStream
from tests.fakes.anthropic_fake import FakeAnthropic, Reply, serve_until_signal
from tests.fakes.images import png

DAY = 86_400.0
HOUR = 3_600.0
TARGET_GROWTH = 0.20  # the month's end within this fraction of its start (CPU per turn, RSS)
ENDS = 3  # days at each end of the month whose medians the targets compare
HISTORY_BUDGET = 600  # tokens: every session compacts on its first day, and every few turns
BUDGETS = ("daily_tokens_per_soul", "daily_tokens_per_user", "daily_tokens_background")
PAGE_LINES = 12  # facts a compiled page keeps (the fake's "model" merges that far)
DAY_TIMEOUT_S = 120.0  # for one day's traffic; replies still missing then count as lost
RETENTION_DAYS = 7  # every `retention:` window: the month runs three past it and more
IMAGE_EVERY = 10  # every this many messages of a person carries a photo (`media.keep` on)
IMAGE = png(320, 240, 16_000)  # the photo's bytes: 16 kB, as a small phone photo sends

REFLECTION = {
    "reflection": "We talked about the archive and the lighthouse keepers' logbooks.",
    "memory_updates": [{"fact": "Asks about the lighthouse and its keepers", "importance": 0.7}],
    "rule_updates": [],
}
SUMMARY = "Earlier, the visitor asked about the lighthouse, its keepers and the logbooks."


# -- the fake model, in its own process ---------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def respond(fake: FakeAnthropic, body: dict[str, Any]) -> Reply | None:
    """The soak's model: bounded answers, as a real model gives (the fake's echo
    would grow pages and summaries by what they fold)."""
    fake.log.clear()  # the fake logs every request: a month of them would fill its memory
    if (body.get("tool_choice") or {}).get("name") == "save_soul":
        return Reply.of_tool_use("save_soul", REFLECTION)
    system = body.get("system")
    first = system[0].get("text") if isinstance(system, list) and system else system
    last = body["messages"][-1]
    if first == prompts.COMPACT_SYSTEM:
        return Reply.of_text(SUMMARY)
    if first == prompts.COMPILE_SYSTEM:
        facts = [ln for ln in _text_of(last.get("content")).splitlines() if ln.startswith("- [")]
        return Reply.of_text("\n".join(facts[-PAGE_LINES:]) or "Nothing new.")
    if last.get("role") == "user" and isinstance(last.get("content"), list):
        texts = [b for b in last["content"] if b.get("type") == "text"]
        if texts:  # the person's own line (the recall block and the clock come before it)
            return Reply.of_text("Marlow: " + texts[-1]["text"].splitlines()[-1][:300])
    return None


async def serve_fake() -> None:
    fake = FakeAnthropic()
    fake.responder = lambda body: respond(fake, body)
    await serve_until_signal(fake)


@contextlib.contextmanager
def fake_process() -> Iterator[str]:
    """This file with `--serve-fake` in another process; yields its URL."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-fake"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"the fake server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- the users ----------------------------------------------------------------------------


@dataclass
class SoakAdapter(SimulatedPlatform):
    """An Adapter that plays the users; a reply is matched by `reply_to`. Keeps
    counts and the current day's probe figures only (its own memory stays flat)."""

    name: str = "soak"
    messages: int = 0
    replies: int = 0
    answered: int = 0  # turns that completed (`turn.completed`)
    streamed: int = 0  # replies that came as a stream (people of odd numbers)
    images: int = 0  # messages sent with a photo
    overheads: list[float] = field(default_factory=list)  # ms, this day's probe
    _sent: dict[int, int] = field(default_factory=dict)  # messages per user so far
    _deliver: Deliver | None = None
    _waiting: dict[str, asyncio.Future[float]] = field(default_factory=dict)
    _completed: dict[str, tuple[float, int]] = field(default_factory=dict)

    async def start(self, deliver: Deliver) -> None:
        self._deliver = deliver

    async def stop(self) -> None:
        self._deliver = None

    async def close(self) -> None:
        self._deliver = None

    async def send(self, message: Outbound) -> list[str]:
        now = time.perf_counter()
        self.replies += 1
        future = self._waiting.pop(message.reply_to or "", None)
        if future is not None and not future.done():
            future.set_result(now)
        return []

    def stream(self, message: Outbound) -> ReplyStream | None:
        """Half the people (odd numbers) see their replies streamed, as a draft does."""
        return _Streamed(self) if int(message.chat_id.removeprefix("chat")) % 2 else None

    def on_turn(self, event: Event) -> None:
        """`turn.completed` is logged just before its reply is sent, in the same task."""
        self.answered += 1
        self._completed[event["session"]] = (event["model_ms"] / 1000, event["messages"])

    async def _say(self, user: int) -> tuple[str, asyncio.Future[float]]:
        """Deliver the user's next message: its id, and the future of its reply."""
        assert self._deliver is not None
        n = self._sent[user] = self._sent.get(user, 0) + 1
        chat, mid = f"chat{user}", f"m{user}-{n}"
        images = (Media("photo", "image/png", len(IMAGE), _photo),) if n % IMAGE_EVERY == 0 else ()
        self.images += bool(images)
        inbound = Inbound(self.name, chat, f"u{user}", f"User {user}", message(n, user),
                          is_dm=True, message_id=mid, images=images)  # fmt: skip
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting[mid] = future
        self.messages += 1
        await self._deliver(inbound)
        return mid, future

    async def burst(self, user: int, size: int) -> None:
        """`size` messages back to back (a person writing in pieces), then the
        wait for the reply to the last: a turn answers every message stored
        before it started and quotes the newest, so the last turn quotes the
        last message; the ones it answered with it get no reply of their own."""
        said = [await self._say(user) for _ in range(size)]
        try:
            await said[-1][1]
        finally:
            for mid, _ in said:
                self._waiting.pop(mid, None)
            self._completed.pop(f"{self.name}:chat{user}", None)

    async def converse(self, user: int, bursts: list[int]) -> None:
        for size in bursts:
            await self.burst(user, size)

    async def exchange(self, user: int) -> None:
        """One message, its reply, and the turn's overhead when it answered only it."""
        sent = time.perf_counter()
        mid, future = await self._say(user)
        try:
            replied = await future
        finally:
            self._waiting.pop(mid, None)
        model_s, answered = self._completed.pop(f"{self.name}:chat{user}", (None, 0))
        if model_s is not None and answered == 1:
            self.overheads.append((replied - sent - model_s) * 1000)

    async def probe(self, users: list[int], rate: float) -> None:
        """One message from each of `users`, at `rate` per second."""
        loop = asyncio.get_running_loop()
        start, tasks = loop.time(), []
        for k, user in enumerate(users):
            delay = start + k / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self.exchange(user)))
        await asyncio.gather(*tasks)

    def missing(self) -> int:
        """Replies still awaited (after a timeout), forgotten now."""
        waiting = len(self._waiting)
        self._waiting.clear()
        return waiting


async def _photo() -> bytes:
    return IMAGE


@dataclass
class _Streamed:
    """A reply streamed to the soak's people: its previews are dropped (the
    adapters' pace is not the core's), its end is the reply, as `send` counts it."""

    adapter: SoakAdapter

    async def update(self, text: str) -> None:
        return

    async def finish(self, message: Outbound) -> list[str]:
        self.adapter.streamed += 1
        return await self.adapter.send(message)

    async def abort(self) -> None:
        return


# -- the month ----------------------------------------------------------------------------

BURSTS = (3, 4)  # messages a person sends back to back, in turn


def bursts(messages: int, turn: int) -> list[int]:
    """`messages` cut into bursts, the pattern started at `turn`."""
    out: list[int] = []
    while messages > 0:
        out.append(min(messages, BURSTS[(len(out) + turn) % len(BURSTS)]))
        messages -= out[-1]
    return out


@dataclass(frozen=True)
class Plan:
    days: int
    sessions: int
    active: int
    messages: int
    warmup: int
    probe: int
    rate: float
    ends: int = ENDS
    retention: int = RETENTION_DAYS

    def users(self, day: int) -> list[int]:
        """The sessions that talk on `day` (a window that moves round them all)."""
        first = (day - 1) * self.active
        return [(first + i) % self.sessions for i in range(self.active)]

    def talk(self, day: int) -> list[list[int]]:
        """The bursts of each of the day's users in the closed loop (the probe adds
        one message each to the first `probe`); the days send at least `messages`."""
        per_day = math.ceil(self.messages / self.days) - self.probe
        base, extra = divmod(per_day, self.active)
        return [bursts(base + (1 if (i + day) % self.active < extra else 0), i + day)
                for i in range(self.active)]  # fmt: skip


def ends(figures: list[dict[str, Any]], key: str, days: int) -> dict[str, Any]:
    """The medians of `key` over the first and the last `days` days, and the growth."""
    n = max(1, min(days, len(figures) // 2))
    first = statistics.median(f[key] for f in figures[:n])
    last = statistics.median(f[key] for f in figures[-n:])
    growth = last / first - 1 if first else 0.0
    return {
        "days": [[f["day"] for f in figures[:n]], [f["day"] for f in figures[-n:]]],
        "first": round(first, 2),
        "last": round(last, 2),
        "growth": round(growth, 3),
    }


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def rss_mb() -> float:
    """The resident set now (not the peak), in MiB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def db_mb(config: Config) -> float:
    paths = [config.data_dir / name for name in (DB_NAME, DB_NAME + "-wal")]
    return sum(p.stat().st_size for p in paths if p.exists()) / 2**20


def media_mb(config: Config) -> float:
    files = (config.data_dir / MEDIA_FOLDER).rglob("*")
    return sum(p.stat().st_size for p in files if p.is_file()) / 2**20


async def pages_mb(runtime: Runtime) -> dict[str, float]:
    """The database's pages in use (SQLite's dbstat): the memory's (`memory*`:
    traces, their text index, folds, scopes; kept for ever, the soul's memory)
    and every other table's and index's (what retention bounds, with the rest)."""

    def sizes(conn: Any) -> dict[str, float]:
        rows = conn.execute("SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE").fetchall()
        memory = sum(size for name, size in rows if name.startswith("memory"))
        return {"memory_mb": memory / 2**20, "other_mb": (sum(r[1] for r in rows) - memory) / 2**20}

    return await runtime.db.run(sizes)


async def counts(runtime: Runtime) -> dict[str, int]:
    tables = {"seen_ids": "seen_messages", "history_rows": "history", "traces": "memory",
              "usage_rows": "usage", "reply_addresses": "reply_addresses"}  # fmt: skip

    def count(conn: Any) -> dict[str, int]:
        return {
            name: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            for name, table in tables.items()
        }

    return await runtime.db.run(count)


@dataclass
class Month:
    """What the month did; `start` is the warm-up day's midnight (UTC, the real day)."""

    start: float = field(default_factory=lambda: CLOCK() // DAY * DAY)
    warmup: dict[str, Any] = field(default_factory=dict)
    figures: list[dict[str, Any]] = field(default_factory=list)
    heartbeats: int = 0
    compiled: int = 0
    compile_failures: int = 0
    lost: int = 0
    pruned: dict[str, int] = field(default_factory=dict)  # what retention deleted, in all


async def live_one_day(
    runtime: Runtime,
    adapter: SoakAdapter,
    day: int,
    talk: dict[int, list[int]],
    probe: tuple[list[int], float],
    month: Month,
) -> dict[str, Any]:
    """Day `day` of the month (0: the warm-up): `talk` maps a user to their
    bursts, then the probe's users send one message each at its rate; the
    heartbeat and the nightly compile follow. Returns the day's figures."""
    morning = month.start + day * DAY + 9 * HOUR
    CLOCK.set(morning)
    adapter.overheads = []
    messages, replies, cpu = adapter.messages, adapter.replies, time.process_time()
    began = time.perf_counter()
    try:
        async with asyncio.timeout(DAY_TIMEOUT_S):
            await asyncio.gather(*(adapter.converse(u, b) for u, b in talk.items()))
            # The closed loop leaves trace writes queued: store them first, so the
            # probe measures its own turns, not that backlog.
            await runtime.memory.drain(DAY_TIMEOUT_S)
            await adapter.probe(*probe)
            await runtime.sessions.wait(DAY_TIMEOUT_S)
            await runtime.memory.drain(DAY_TIMEOUT_S)
    except TimeoutError:
        month.lost += adapter.missing()
    turns = adapter.replies - replies
    cpu_ms = (time.process_time() - cpu) * 1000 / max(1, turns)
    talked = time.perf_counter()
    CLOCK.set(morning + 12 * HOUR)  # every conversation of the day is long idle
    month.heartbeats += runtime.reflector.sweep()
    await runtime.reflector.wait()
    reflected = time.perf_counter()
    CLOCK.set(month.start + (day + 1) * DAY + 3 * HOUR)  # the nightly compile
    try:
        month.compiled += len(await runtime.memory.compile_all())
    except CompileFailed as exc:
        month.compiled += len(exc.results)
        month.compile_failures += len(exc.failures)
    compiled = time.perf_counter()
    pruned = await runtime.retention.run()  # after the compile, as the daemon's nightly run
    for key, value in asdict(pruned).items():
        month.pruned[key] = month.pruned.get(key, 0) + value
    retained = time.perf_counter()
    runtime.sessions.evict_idle(0)  # idle all night: out of memory, back from SQLite
    gc.collect()
    pages = await pages_mb(runtime)
    kept = pages["other_mb"] + (media := media_mb(runtime.config))
    return {
        "day": day,
        "cpu_ms_per_turn": round(cpu_ms, 2),
        "latency_overhead_ms_p50": round(percentile(adapter.overheads, 50), 2),
        "latency_overhead_ms_p99": round(percentile(adapter.overheads, 99), 2),
        "rss_mb": round(rss_mb(), 1),
        "db_mb": round(db_mb(runtime.config), 1),
        "media_mb": round(media, 1),
        "memory_mb": round(pages["memory_mb"], 1),
        "store_mb": round(kept, 1),
        "messages": adapter.messages - messages,
        "turns": turns,
        **await counts(runtime),
        "live_sessions": len(runtime.sessions),
        "seconds": {"talk": round(talked - began, 1), "heartbeat": round(reflected - talked, 1),
                    "compile": round(compiled - reflected, 1),
                    "retention": round(retained - compiled, 1)},
    }  # fmt: skip


async def drive(config: Config, plan: Plan) -> tuple[Month, SoakAdapter]:
    registry = SoulRegistry(config.workspaces)
    registry.reload_all()
    adapter = SoakAdapter()
    tap(["turn.completed"], adapter.on_turn)
    runtime = await Runtime.open(config, registry, [adapter])
    settle_gc()  # as `soulbot run` does after start-up
    month = Month()
    try:
        await runtime.start_adapters()
        everyone = {u: [plan.warmup] for u in range(plan.sessions)}  # one burst: two turns
        month.warmup = await live_one_day(runtime, adapter, 0, everyone, ([], 1.0), month)
        for day in range(1, plan.days + 1):
            users = plan.users(day)
            talk = dict(zip(users, plan.talk(day), strict=True))
            probe = (users[: plan.probe], plan.rate)
            month.figures.append(await live_one_day(runtime, adapter, day, talk, probe, month))
        await runtime.stop_adapters()
    finally:
        await runtime.close()
    return month, adapter


def report(plan: Plan, month: Month, adapter: SoakAdapter, wall: float) -> int:
    """Print the JSON line; the exit status."""
    first, last = month.figures[0], month.figures[-1]
    cpu, rss = (ends(month.figures, key, plan.ends) for key in ("cpu_ms_per_turn", "rss_mb"))
    # The store from the first day after the retention window: what it keeps is full then.
    after = month.figures[plan.retention :]
    store, db, memory = (ends(after, key, plan.ends) for key in ("store_mb", "db_mb", "memory_mb"))
    failed = adapter.replies - adapter.answered  # replies that were no model answer
    ok = {
        "cpu_ms_per_turn": cpu["growth"] <= TARGET_GROWTH,
        "rss_mb": rss["growth"] <= TARGET_GROWTH,
        "store_mb": store["growth"] <= TARGET_GROWTH,
        "no_lost_or_failed_turns": not month.lost and not failed,
        "no_failed_compiles": not month.compile_failures,
    }
    keys = ("cpu_ms_per_turn", "latency_overhead_ms_p50", "rss_mb", "db_mb", "store_mb",
            "media_mb", "memory_mb", "history_rows", "usage_rows", "reply_addresses")  # fmt: skip
    result = {
        "bench": "soak",
        "days": plan.days,
        "sessions": plan.sessions,
        "active_per_day": plan.active,
        "messages": adapter.messages - month.warmup["messages"],
        "turns": adapter.replies - month.warmup["turns"],
        "warmup": {k: month.warmup[k] for k in ("messages", "turns", "rss_mb", "db_mb")},
        "images": adapter.images,
        "streamed_replies": adapter.streamed,
        "retention_days": plan.retention,
        "pruned": month.pruned,
        "failed_turns": failed,
        "lost_replies": month.lost,
        "heartbeats": month.heartbeats,
        "wikis_compiled": month.compiled,
        "compile_failures": month.compile_failures,
        "wall_s": round(wall, 1),
        "cpu_ms_per_turn": cpu,
        "rss_mb": rss,
        "store_mb": store,
        "db_mb": db,
        "memory_mb": memory,
        "day_1": first,
        f"day_{plan.days}": last,
        "by_day": {key: [f[key] for f in month.figures] for key in keys},
    }
    target = {"cpu_ms_per_turn_growth_max": TARGET_GROWTH, "rss_mb_growth_max": TARGET_GROWTH,
              "store_mb_growth_max": TARGET_GROWTH}  # fmt: skip
    return finish(result, target, ok)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--active", type=int, default=100, help="sessions that talk each day")
    parser.add_argument("--messages", type=int, default=100_000, help="at least, in the month")
    parser.add_argument("--warmup", type=int, default=24, help="messages of each session, day 0")
    parser.add_argument("--probe", type=int, default=50, help="paced messages a day")
    parser.add_argument("--rate", type=float, default=100.0, help="the probe's messages/s")
    parser.add_argument("--ends", type=int, default=ENDS,
                        help="days at each end whose medians the targets compare")  # fmt: skip
    parser.add_argument("--retention", type=int, default=RETENTION_DAYS,
                        help="days of every retention window")  # fmt: skip
    parser.add_argument("--serve-fake", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        asyncio.run(serve_fake())
        return 0
    if not 0 < args.probe <= args.active <= args.sessions:
        parser.error("expected 0 < --probe <= --active <= --sessions")
    if not 0 < args.retention < args.days:
        parser.error("expected 0 < --retention < --days")
    plan = Plan(args.days, args.sessions, args.active, args.messages, args.warmup, args.probe,
                args.rate, args.ends, args.retention)  # fmt: skip
    configure_logging("json", "warning")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="soulbot-soak-") as tmp, fake_process() as url:
        extra = {
            "memory": {"history_token_budget": HISTORY_BUDGET},
            # The simulated people write a day's messages in seconds: the per-person
            # limit counts them but never holds one back. Background work is not capped.
            "limits": {"messages_per_minute": 1_000_000},
            "budget": {key: None for key in BUDGETS},
            "media": {"keep": True},
            "retention": {key: args.retention for key in ("history_days", "usage_days",
                                                           "media_days", "reply_address_days")},
        }  # fmt: skip
        config = make_config(Path(tmp), url, max_concurrency=64, extra=extra)
        write_soul(config.workspaces, heartbeat=True)
        month, adapter = asyncio.run(drive(config, plan))
    return report(plan, month, adapter, time.perf_counter() - started)


if __name__ == "__main__":
    raise SystemExit(main())
