"""Scale benchmark: one `soulbot run` process holding all 4 shards of a Discord
bot, then two processes holding 2 shards each, both on one PostgreSQL store,
against the fake gateway (in this process) and the fake model (a process of
its own, `--latency` per call); then a rolling restart; then the start's
recovery at 100,000 sessions.

Each run gets a burst of `--messages` guild messages, each in a channel of its
own (so each is a session's one turn), over 100 guilds, 25 on each shard, from
a different author each (no rate limit applies). It measures, from the fake
gateway's side:
- throughput: messages answered / (last reply - first message);
- lost and doubled: messages with no reply, or more than one, after the
  processes have stopped (whatever they would send has been sent by then);
- p50 and p99 overhead: each message's time to its reply, minus the model's latency;
- CPU a turn, from the burst's first message to its last reply (Linux's /proc):
  the daemons', their PostgreSQL backends' (found by the connections'
  `application_name`), the fake model's, this process's (the fake gateway and
  REST API), and the rest of the machine's (the kernel, PostgreSQL's own
  processes, other work on the machine); and the cores each daemon kept busy on
  average (a Python process tops out near 1.0);
- the connections the fake Discord was asked on (their client ports).

The daemons, the database and the fakes share the machine, whose speed drifts
from one minute to the next (a shared VM), so the two configurations take turns
for `--rounds` rounds, and a configuration is reported by its run of median
throughput. The CPU ratio is the median of the rounds' two-process CPU a turn
over their one-process CPU a turn (the daemons'): a second process must not make
a turn dearer. Throughput is printed but has no target: on two cores shared by
the daemons, PostgreSQL and the fakes, a second process has no core of its own
to add (docs/performance.md).

The rolling restart: a two-process run in which the second process (shards 2
and 3) is stopped gracefully (SIGTERM) half-way through the burst, its turns
running, and started again. Discord delivers a shard's messages to no process
between its process's stop and its restart's READY (a fresh IDENTIFY replays
nothing; the fake does the same), so while it is down the burst goes on to the
first process's shards only, and the second's part comes once it is back.

Recovery: bench/recovery.py's measurement (the start's search for unanswered
messages) at `--sessions` sessions, on SQLite and on this PostgreSQL server.

The targets: the daemons' CPU a turn with two processes at most 1.1 times one
process's; 0 lost and 0 doubled in every run, the rolling restart's included;
recovery at most 1 s on both engines. Prints one JSON line; exit status 1 when a
target is missed. Without a PostgreSQL server to run on, one line on stderr says
so, and the exit status is 0. The defaults take about 5 minutes on a 2-core machine
(each start signs in 5 s per shard; the recovery fills 100,000 sessions twice).

    .venv/bin/python bench/scale.py [--messages 600] [--latency 0.05] [--rounds 2]
        [--sessions 100000] [--store postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import recovery
from bench.common import finish
from tests.daemons import RunningDaemon, daemon_env
from tests.engines import SERVER, scratch_schema
from tests.fakes.discord_fake import FakeDiscord, guild_id_on_shard
from tests.fakes.discord_sessions import shard_of
from tests.fakes.process import FakeProcess
from tests.kit import example_souls

COUNT = 4  # shards
GUILDS_PER_SHARD = 25
TARGET_CPU_RATIO = 1.1  # two processes' CPU a turn over one's, at most
TARGET_RECOVERY_S = recovery.TARGET_S
STOP_S = 10.0  # a daemon's whole stop: the burst's replies are all sent before it begins
TICKS = os.sysconf("SC_CLK_TCK")  # /proc's CPU times are in these
SPLITS = {"one_process": [[0, 1, 2, 3]], "two_processes": [[0, 1], [2, 3]]}


def guilds(messages: int) -> dict[int, list[int]]:
    """Guild id -> its channel ids, GUILDS_PER_SHARD guilds on each shard, a
    channel for each of `messages`."""
    ids = [guild_id_on_shard(shard, COUNT, n) for n in range(GUILDS_PER_SHARD)
           for shard in range(COUNT)]  # fmt: skip
    found: dict[int, list[int]] = {guild: [] for guild in ids}
    for i in range(messages):
        found[ids[i % len(ids)]].append(10_000 + i)
    return found


def config(folder: Path, name: str, shards: list[int], store: str, fake: FakeDiscord) -> Path:
    path = folder / f"{name}.yaml"
    discord = {
        "token": "${DISCORD_TOKEN}", "api_base_url": fake.api_base_url,
        "gateway_url": fake.gateway_url, "guilds": "always", "streaming": False,
        "shard_count": COUNT, "shard_ids": shards,
    }  # fmt: skip
    body = {
        "default_soul": "wren", "instance": name, "store": {"url": store}, "log_level": "info",
        "model": {"max_retries": 0, "max_concurrency": 512},
        "limits": {"messages_per_minute": None}, "adapters": {"discord": discord},
        "shutdown": {"deadline_s": STOP_S},
    }  # fmt: skip
    path.write_text(json.dumps(body))
    return path


def cpu_s(pid: int | None = None) -> float:
    """The CPU seconds (user and system) process `pid` has used (0 once it is
    gone), or with None the whole machine's, on all its cores."""
    if pid is None:
        times = [int(t) for t in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return (sum(times) - times[3] - times[4]) / TICKS  # not idle, not waiting on the disk
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def backends(server: str, application: str) -> list[int]:
    """The process ids of the PostgreSQL backends serving connections named `application`."""
    with psycopg.connect(server, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application,)
        ).fetchall()
    return [int(pid) for (pid,) in rows]


def cpu_now(daemons: list[RunningDaemon], postgres: list[int], model: FakeProcess
            ) -> dict[str, float]:  # fmt: skip
    """The CPU seconds used so far, by who uses them."""
    used = {"daemons": sum(cpu_s(d.pid) for d in daemons),
            "postgres": sum(cpu_s(pid) for pid in postgres), "model": cpu_s(model.pid),
            "harness": cpu_s(os.getpid())}  # fmt: skip
    return used | {"rest": cpu_s() - sum(used.values())}


async def replies(fake: FakeDiscord, pushed: dict[int, float], answered: dict[int, float]) -> None:
    """Wait until every message `pushed` has a reply, noting when each came."""
    seen = 0
    while not set(pushed) <= set(answered):
        sent = await fake.wait_sent(seen + 1, timeout=300)
        now = time.monotonic()
        for reply in sent[seen:]:
            if reply.reply_to is not None:
                answered.setdefault(reply.reply_to, now)
        seen = len(sent)


async def one_run(split: list[list[int]], args: argparse.Namespace, model: FakeProcess,
                  folder: Path, restart: bool = False) -> dict[str, Any]:  # fmt: skip
    """Serve a burst with the processes holding the shards `split`; with
    `restart`, the last process is stopped half-way and started again."""
    example_souls(folder)
    channels = guilds(args.messages)
    application = f"soulbot-scale-{secrets.token_hex(4)}"
    with scratch_schema(args.store) as schema:
        store = f"{schema}&application_name={application}"
        async with FakeDiscord() as fake:
            for guild, ids in channels.items():
                fake.add_guild(guild, channels=ids, members=[])
            env = daemon_env(model.url, DISCORD_TOKEN="TEST.DISCORD.TOKEN")
            configs = [config(folder, f"p{i}", shards, store, fake)
                       for i, shards in enumerate(split)]  # fmt: skip
            daemons = [RunningDaemon(folder, path, env) for path in configs]
            try:
                await asyncio.gather(*(d.start(timeout=120) for d in daemons))
                pushed: dict[int, float] = {}
                answered: dict[int, float] = {}
                pairs = [(guild, channel) for guild, ids in channels.items() for channel in ids]
                postgres = backends(args.store, application)
                started = time.monotonic()
                cpu_before = cpu_now(daemons, postgres, model)

                def push(i: int, guild: int, channel: int) -> None:
                    message = fake.push_message(channel, f"message {i}", author_id=100_000 + i,
                                                author_name=f"u{i}", guild_id=guild)  # fmt: skip
                    pushed[message] = time.monotonic()

                half = len(pairs) // 2 if restart else len(pairs)
                for i, (guild, channel) in enumerate(pairs[:half]):
                    push(i, guild, channel)
                if restart:
                    await restart_during(daemons, list(enumerate(pairs))[half:], split[-1], push,
                                         RunningDaemon(folder, configs[-1], env))  # fmt: skip
                await replies(fake, pushed, answered)
                wall = max(answered.values()) - started
                cpu = {k: v - cpu_before[k]
                       for k, v in cpu_now(daemons, postgres, model).items()}  # fmt: skip
            finally:
                for daemon in daemons:
                    await daemon.stop(timeout=300)
            sent = [s.reply_to for s in fake.sent]
            connections = len({r.port for r in fake.requests})
    latencies = sorted((answered[m] - pushed[m] - args.latency) * 1000 for m in answered)
    return {
        "processes": len(split),
        "turns_per_s": round(len(answered) / wall, 1),
        "lost": sum(1 for m in pushed if m not in sent),
        "doubled": sum(1 for m in pushed if sent.count(m) > 1),
        "p50_overhead_ms": round(latencies[len(latencies) // 2], 1),
        "p99_overhead_ms": round(latencies[int(0.99 * (len(latencies) - 1))], 1),
        "cpu_ms_per_turn": {k: round(v * 1000 / len(answered), 2) for k, v in cpu.items()},
        "cores_per_daemon": round(cpu["daemons"] / wall / len(split), 2),
        "discord_connections": connections,
    }


async def restart_during(daemons: list[RunningDaemon], rest: list[tuple[int, tuple[int, int]]],
                         shards: list[int], push: Callable[[int, int, int], None],
                         again: RunningDaemon) -> None:  # fmt: skip
    """Stop the last of `daemons` (holding `shards`) while its turns of the
    burst's first half run, push the rest of the burst (i, (guild, channel))
    meanwhile, but the messages of its shards once it is back, and start it
    again (`again`: the same config) in its place."""
    stopping = daemons[-1]
    await stopping.wait_for("turn.started")
    done = asyncio.create_task(stopping.stop(timeout=300))
    await stopping.wait_for("daemon.stopping")
    later = []
    for i, (guild, channel) in rest:
        if shard_of(guild, COUNT) in shards:
            later.append((i, guild, channel))
        else:
            push(i, guild, channel)
    if await done:
        raise RuntimeError("the restarted process's stop failed")
    daemons[-1] = again
    await again.start(timeout=120)
    for i, guild, channel in later:
        push(i, guild, channel)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SPLITS}
    with FakeProcess(latency_s=args.latency) as model:
        for _ in range(args.rounds):
            for name, split in SPLITS.items():
                with tempfile.TemporaryDirectory(prefix="soulbot-scale-") as tmp:
                    runs[name].append(await one_run(split, args, model, Path(tmp) / name))
        with tempfile.TemporaryDirectory(prefix="soulbot-scale-") as tmp:
            rolling = await one_run(SPLITS["two_processes"], args, model, Path(tmp) / "rolling",
                                    restart=True)  # fmt: skip
    for key in ("cpu_ms_per_turn", "cores_per_daemon"):  # its stopped process's are gone
        del rolling[key]
    medians = {name: median_run(found) for name, found in runs.items()}
    ratios = [
        round(two["cpu_ms_per_turn"]["daemons"] / one["cpu_ms_per_turn"]["daemons"], 2)
        for one, two in zip(runs["one_process"], runs["two_processes"], strict=True)
    ]
    speedups = [
        round(two["turns_per_s"] / one["turns_per_s"], 2)
        for one, two in zip(runs["one_process"], runs["two_processes"], strict=True)
    ]
    found = await recovery.run(
        argparse.Namespace(sessions=args.sessions, recent=10, rounds=3, store=args.store), True
    )
    return {
        "bench": "scale",
        "messages": args.messages,
        "model_latency_s": args.latency,
        "rounds": args.rounds,
        **medians,
        "runs_turns_per_s": {name: [r["turns_per_s"] for r in rs] for name, rs in runs.items()},
        "runs_daemon_cpu_ms_per_turn": {
            name: [r["cpu_ms_per_turn"]["daemons"] for r in rs] for name, rs in runs.items()
        },
        "round_cpu_ratios": ratios,
        "cpu_ratio": statistics.median(ratios),
        "round_speedups": speedups,
        "speedup": statistics.median(speedups),
        "rolling_restart": rolling,
        "lost_or_doubled": sum(
            r["lost"] + r["doubled"] for r in [rolling, *(r for rs in runs.values() for r in rs)]
        ),
        "recovery": found,
        "machine_load_1min": round(os.getloadavg()[0], 2),
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median throughput (the lower middle one of an even count)."""
    return sorted(runs, key=lambda r: r["turns_per_s"])[(len(runs) - 1) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each configuration")
    parser.add_argument("--sessions", type=int, default=100_000, help="for the recovery")
    parser.add_argument("--store", default=SERVER, help="the PostgreSQL server (a new schema)")
    args = parser.parse_args()
    try:
        psycopg.connect(args.store, connect_timeout=3).close()
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0]
        print(f"scale: skipped: no PostgreSQL to run on ({reason}); --store URL", file=sys.stderr)
        return 0
    result = asyncio.run(measure(args))
    engines = ("sqlite", "postgresql")
    ok = {
        "cpu_ratio": result["cpu_ratio"] <= TARGET_CPU_RATIO,
        "lost_or_doubled": not result["lost_or_doubled"],
    }
    ok |= {f"recovery_{e}": result["recovery"][e]["recovery_s"] <= TARGET_RECOVERY_S
           and result["recovery"][e]["found_right"] for e in engines}  # fmt: skip
    target = {"cpu_ratio_max": TARGET_CPU_RATIO, "lost_or_doubled": 0,
              "recovery_s_max": TARGET_RECOVERY_S}  # fmt: skip
    return finish(result, target, ok)


if __name__ == "__main__":
    raise SystemExit(main())
