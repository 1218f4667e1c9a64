"""The start-up check of the processes on one shared store (bot/cluster/topology.py):
two `Database` objects on one PostgreSQL schema stand for two processes."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from bot.cluster.topology import STALE_S, Process, Topology
from bot.config.load import parse_config
from bot.errors import TopologyConflict
from bot.storage.db import Database
from tests.engines import postgres_schema
from tests.kit import example_souls
from tests.run_cli import soulbot

A = Process("a", "h", 123, "/srv/soulbot", False, False, None, None)
B = replace(A, instance="b", pid=456)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def refused(db: Database, me: Process, clock: Clock | None = None) -> str:
    """The line `me` is refused with on `db`."""
    with pytest.raises(TopologyConflict) as refusal:
        await Topology(db, me, clock or Clock()).join()
    return str(refusal.value)


async def test_telegram_runs_in_one_process(two: tuple[Database, Database]) -> None:
    first = Topology(two[0], replace(A, telegram=True))
    await first.join()
    try:
        line = await refused(two[1], replace(B, telegram=True))
    finally:
        await first.leave()
    assert line.startswith(
        "telegram: instance a (host h, pid 123) already polls Telegram on this store"
    )


async def test_the_processes_agree_on_shard_count(two: tuple[Database, Database]) -> None:
    first = Topology(two[0], replace(B, discord=True, shard_count=2, shard_ids=(0,)))
    await first.join()
    try:
        line = await refused(two[1], replace(A, discord=True, shard_count=4, shard_ids=(2,)))
    finally:
        await first.leave()
    assert line.startswith("discord: shard_count 4 here, 2 in instance b (host h, pid 456)")


async def test_a_shard_is_held_by_one_process(two: tuple[Database, Database]) -> None:
    first = Topology(two[0], replace(B, discord=True, shard_count=4, shard_ids=(0, 1)))
    await first.join()
    try:
        line = await refused(two[1], replace(A, discord=True, shard_count=4, shard_ids=(1, 2)))
        unsharded = await refused(two[1], replace(B, instance="c", discord=True))
    finally:
        await first.leave()
    assert line.startswith("discord: shard 1 is instance b (host h, pid 456)'s too")
    assert unsharded.startswith("discord: shard_count unset here, 4 in instance b")


async def test_the_processes_share_one_data_dir(two: tuple[Database, Database]) -> None:
    first = Topology(two[0], replace(B, data_dir="/y"))
    await first.join()
    try:
        line = await refused(two[1], replace(A, data_dir="/x"))
    finally:
        await first.leave()
    assert line == (
        "data_dir: /x here, /y in instance b (host h, pid 456): processes on one store "
        "share one data_dir"
    )


async def test_a_compatible_pair_starts_and_a_clean_stop_leaves(
    two: tuple[Database, Database],
) -> None:
    halves = [
        replace(A, telegram=True, discord=True, shard_count=4, shard_ids=(0, 1)),
        replace(B, discord=True, shard_count=4, shard_ids=(2, 3)),
    ]
    both = [Topology(db, me) for db, me in zip(two, halves, strict=True)]
    for topology in both:
        await topology.join()
    rows = await two[0].run(
        lambda conn: conn.execute("SELECT instance FROM processes ORDER BY instance").fetchall()
    )
    assert [row[0] for row in rows] == ["a", "b"]
    await both[0].leave()
    await both[0].leave()  # idempotent
    later = Topology(two[0], replace(A, instance="c", telegram=True))  # a's Telegram is free
    await later.join()
    await later.leave()
    await both[1].leave()
    assert await two[0].run(lambda conn: conn.execute("SELECT * FROM processes").fetchall()) == []


async def test_a_stale_row_blocks_no_one(two: tuple[Database, Database]) -> None:
    clock = Clock()
    dead = Topology(two[0], replace(A, telegram=True), clock)
    await dead.join()  # killed: never refreshed, never left
    clock.now += STALE_S + 1
    alive = Topology(two[1], replace(B, telegram=True), clock)
    await alive.join()
    await alive.leave()
    await dead.leave()


async def test_a_refreshed_row_stays_live(two: tuple[Database, Database]) -> None:
    clock = Clock()
    first = Topology(two[0], replace(A, telegram=True), clock)
    await first.join()
    clock.now += STALE_S - 1
    await first.refresh()  # the daemon's every REFRESH_S
    clock.now += STALE_S - 1  # past the first write's staleness, within the refresh's
    try:
        line = await refused(two[1], replace(B, telegram=True), clock)
    finally:
        await first.leave()
    assert line.startswith("telegram: instance a")


async def test_a_dead_run_of_the_same_instance_is_replaced(
    two: tuple[Database, Database],
) -> None:
    dead = Topology(two[0], replace(A, telegram=True))
    await dead.join()  # killed: its row is left behind
    again = Topology(two[1], replace(A, pid=789, telegram=True, data_dir="/elsewhere"))
    await again.join()
    rows = await two[0].run(
        lambda conn: conn.execute("SELECT instance, pid, data_dir FROM processes").fetchall()
    )
    assert [tuple(row) for row in rows] == [("a", 789, "/elsewhere")]
    await again.leave()
    await dead.leave()


def test_a_process_is_what_its_config_sets_up(tmp_path: Path) -> None:
    text = (
        f"data_dir: {tmp_path}\ninstance: shards-2-3\nstore: {{url: 'postgresql://h/db'}}\n"
        "adapters:\n"
        "  telegram: {token: 't'}\n"
        "  discord: {token: 'd', shard_count: 4, shard_ids: [2, 3]}\n"
    )
    me = Process.of(parse_config(text, "t", {}))
    assert (me.instance, me.data_dir, me.telegram, me.discord) == (
        "shards-2-3",
        str(tmp_path),
        True,
        True,
    )
    assert (me.shard_count, me.shard_ids, me.shards()) == (4, (2, 3), {2, 3})


async def test_soulbot_run_stops_on_a_conflict_before_it_serves(tmp_path: Path) -> None:
    """`soulbot run` of a second Telegram process on the store exits 2 with the
    one line, and leaves the store as it found it."""
    example_souls(tmp_path)
    with postgres_schema() as url:
        db = Database(url)
        await db.open()
        try:
            data_dir = str((tmp_path / "data").absolute())
            first = Topology(db, replace(A, telegram=True, data_dir=data_dir))
            await first.join()
            config = {
                "default_soul": "wren", "instance": "b", "store": {"url": url},
                "adapters": {"telegram": {"token": "123:TEST"}},
            }  # fmt: skip
            (tmp_path / "b.yaml").write_text(json.dumps(config))
            done = await asyncio.to_thread(soulbot, "run", "--config", "b.yaml", cwd=tmp_path)
            rows = await db.run(
                lambda conn: conn.execute("SELECT instance FROM processes").fetchall()
            )
            await first.leave()
        finally:
            await db.close()
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: telegram: instance a (host h, pid 123) already polls Telegram on this "
        "store; set adapters.telegram.token in one process only"
    )
    assert [row[0] for row in rows] == ["a"]


async def test_soulbot_check_says_what_run_would_beside_a_live_process(tmp_path: Path) -> None:
    """`soulbot check` of a second Telegram process lists `run`'s refusal among
    its errors, and registers nothing; on a store not made yet it makes no table."""
    example_souls(tmp_path)
    config = {
        "default_soul": "wren", "instance": "b",
        "adapters": {"telegram": {"token": "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw4"}},
    }  # fmt: skip
    with postgres_schema() as fresh:
        (tmp_path / "b.yaml").write_text(json.dumps(config | {"store": {"url": fresh}}))
        untouched = await asyncio.to_thread(soulbot, "check", "--config", "b.yaml", cwd=tmp_path)
        with psycopg.connect(fresh) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
            ).fetchone()
    with postgres_schema() as url:
        db = Database(url)
        await db.open()
        try:
            data_dir = str((tmp_path / "data").absolute())
            first = Topology(db, replace(A, telegram=True, data_dir=data_dir))
            await first.join()
            (tmp_path / "b.yaml").write_text(json.dumps(config | {"store": {"url": url}}))
            done = await asyncio.to_thread(soulbot, "check", "--config", "b.yaml", cwd=tmp_path)
            rows = await db.run(
                lambda conn: conn.execute("SELECT instance FROM processes").fetchall()
            )
            await first.leave()
        finally:
            await db.close()
    assert untouched.returncode == 0, untouched.stdout + untouched.stderr
    assert tables == (0,)
    assert done.returncode == 1
    errors = done.stdout.split("\nerrors:\n", 1)[1].splitlines()
    assert errors == [
        "  - telegram: instance a (host h, pid 123) already polls Telegram on this "
        "store; set adapters.telegram.token in one process only"
    ]
    assert [row[0] for row in rows] == ["a"]
