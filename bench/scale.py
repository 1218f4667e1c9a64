"""Scale benchmark: one `soulbot run` process holding all 4 shards of a Discord
bot, then two processes holding 2 shards each, both on one PostgreSQL store,
against the fake gateway (in this process) and the fake model (a process of
its own, `--latency` per call).

Each run gets a burst of `--messages` guild messages, each in a channel of its
own (so each is a session's one turn: messages that come while a turn runs are
answered together), over 100 guilds, 25 on each shard, from a different author
each (no rate limit applies). It measures, from the fake gateway's side:
- throughput: messages answered / (last reply - first message);
- lost and doubled: messages with no reply, or more than one, after the
  processes have stopped (whatever they would send has been sent by then);
- p99 overhead: each message's time to its reply, minus the model's latency;
- CPU a turn, from the burst's first message to its last reply (Linux's /proc):
  the daemons', the fake model's, this process's (the fake gateway and REST
  API), and the rest of the machine's (PostgreSQL, the kernel, anything else);
  and the cores each daemon kept busy on average (a Python process tops out
  near 1.0; less means it waited, mostly on its database thread);
- the connections the fake Discord was asked on (their client ports).

The daemons, the database and the fakes share the machine, whose speed drifts
by a fifth from one minute to the next (a shared VM), so one run says little:
the two configurations take turns for `--rounds` rounds, a round's speedup is
its two-process throughput over its one-process throughput (measured one
after the other), and the speedup is the median of the rounds'. Each configuration
is reported by its run of median throughput, and every run's throughput is
listed. The stop's memory compile (a wiki for each of the burst's channels) is
not measured: `shutdown.deadline_s` cuts it short, so a round takes about a
minute.

The targets: a speedup of at least 1.5, 0 lost, 0 doubled in any run. Prints
one JSON line; exit status 1 when a target is missed. Without a PostgreSQL
server to run on, one line on stderr says so, and the exit status is 0.

    .venv/bin/python bench/scale.py [--messages 2000] [--latency 0.05] [--rounds 5]
        [--store postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import finish
from tests.daemons import RunningDaemon, daemon_env
from tests.engines import SERVER, scratch_schema
from tests.fakes.discord_fake import FakeDiscord, guild_id_on_shard
from tests.fakes.process import FakeProcess
from tests.kit import example_souls

COUNT = 4  # shards
GUILDS_PER_SHARD = 25
TARGET_SPEEDUP = 1.5
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
    """The CPU seconds (user and system) process `pid` has used, or with None
    the whole machine's, on all its cores."""
    if pid is None:
        times = [int(t) for t in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return (sum(times) - times[3] - times[4]) / TICKS  # not idle, not waiting on the disk
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def cpu_now(daemons: list[RunningDaemon], model: FakeProcess) -> dict[str, float]:
    """The CPU seconds used so far, by who uses them."""
    used = {"daemons": sum(cpu_s(d.pid) for d in daemons), "model": cpu_s(model.pid),
            "harness": cpu_s(os.getpid())}  # fmt: skip
    return used | {"rest": cpu_s() - sum(used.values())}


async def one_run(split: list[list[int]], args: argparse.Namespace, model: FakeProcess,
                  folder: Path) -> dict[str, Any]:  # fmt: skip
    """Serve a burst with the processes holding the shards `split`."""
    example_souls(folder)
    channels = guilds(args.messages)
    with scratch_schema(args.store) as store:
        async with FakeDiscord() as fake:
            for guild, ids in channels.items():
                fake.add_guild(guild, channels=ids, members=[])
            env = daemon_env(model.url, DISCORD_TOKEN="TEST.DISCORD.TOKEN")
            daemons = [
                RunningDaemon(folder, config(folder, f"p{i}", shards, store, fake), env)
                for i, shards in enumerate(split)
            ]
            try:
                await asyncio.gather(*(d.start(timeout=120) for d in daemons))
                pushed: dict[int, float] = {}
                answered: dict[int, float] = {}
                pairs = [(guild, channel) for guild, ids in channels.items() for channel in ids]
                started, cpu_before = time.monotonic(), cpu_now(daemons, model)
                for i, (guild, channel) in enumerate(pairs):
                    message = fake.push_message(channel, f"message {i}", author_id=100_000 + i,
                                                author_name=f"u{i}", guild_id=guild)  # fmt: skip
                    pushed[message] = time.monotonic()
                seen = 0
                while seen < args.messages:
                    sent = await fake.wait_sent(seen + 1, timeout=300)
                    now = time.monotonic()
                    for reply in sent[seen:]:
                        if reply.reply_to is not None:
                            answered.setdefault(reply.reply_to, now)
                    seen = len(sent)
                wall = max(answered.values()) - started
                cpu = {k: v - cpu_before[k] for k, v in cpu_now(daemons, model).items()}
            finally:
                for daemon in daemons:
                    await daemon.stop(timeout=300)
            replies = [s.reply_to for s in fake.sent]
            connections = len({r.port for r in fake.requests})
    latencies = sorted((answered[m] - pushed[m] - args.latency) * 1000 for m in answered)
    return {
        "processes": len(split),
        "turns_per_s": round(len(answered) / wall, 1),
        "lost": sum(1 for m in pushed if m not in answered),
        "doubled": sum(1 for m in pushed if replies.count(m) > 1),
        "p50_overhead_ms": round(latencies[len(latencies) // 2], 1),
        "p99_overhead_ms": round(latencies[int(0.99 * (len(latencies) - 1))], 1),
        "cpu_ms_per_turn": {k: round(v * 1000 / len(answered), 2) for k, v in cpu.items()},
        "cores_per_daemon": round(cpu["daemons"] / wall / len(split), 2),
        "discord_connections": connections,
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SPLITS}
    with FakeProcess(latency_s=args.latency) as model:
        for _ in range(args.rounds):
            for name, split in SPLITS.items():
                with tempfile.TemporaryDirectory(prefix="soulbot-scale-") as tmp:
                    runs[name].append(await one_run(split, args, model, Path(tmp) / name))
    medians = {name: median_run(found) for name, found in runs.items()}
    speedups = [
        round(two["turns_per_s"] / one["turns_per_s"], 2)
        for one, two in zip(runs["one_process"], runs["two_processes"], strict=True)
    ]
    return {
        "bench": "scale",
        "messages": args.messages,
        "model_latency_s": args.latency,
        "rounds": args.rounds,
        **medians,
        "runs_turns_per_s": {
            name: [r["turns_per_s"] for r in found] for name, found in runs.items()
        },
        "round_speedups": speedups,
        "lost_or_doubled": sum(r["lost"] + r["doubled"] for found in runs.values() for r in found),
        "speedup": statistics.median(speedups),
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median throughput (the lower middle one of an even count)."""
    return sorted(runs, key=lambda r: r["turns_per_s"])[(len(runs) - 1) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=5, help="runs of each configuration")
    parser.add_argument("--store", default=SERVER, help="the PostgreSQL server (a new schema)")
    args = parser.parse_args()
    try:
        psycopg.connect(args.store, connect_timeout=3).close()
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0]
        print(f"scale: skipped: no PostgreSQL to run on ({reason}); --store URL", file=sys.stderr)
        return 0
    result = asyncio.run(measure(args))
    ok = {
        "speedup": result["speedup"] >= TARGET_SPEEDUP,
        "lost_or_doubled": not result["lost_or_doubled"],
    }
    return finish(result, {"speedup_min": TARGET_SPEEDUP, "lost_or_doubled": 0}, ok)


if __name__ == "__main__":
    raise SystemExit(main())
