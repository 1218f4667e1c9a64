"""The lease of a conversation (bot/cluster/leases.py), on both engines: one
owner at a time, until it releases it or it expires; a run holding its
instance's lock takes back what an earlier run of that instance left."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from bot.cluster.leases import Leases
from bot.storage.db import Database
from tests.kit import capture_logs, wait_until

LEASE_S = 60.0


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_one_owner_at_a_time_until_released(db: Database) -> None:
    clock = Clock()
    first, second = Leases(db, "a", LEASE_S, clock), Leases(db, "b", LEASE_S, clock)
    assert await first.claim("s1")
    assert await first.claim("s1")  # renewed
    assert not await second.claim("s1")
    assert await second.claim("s2")  # another conversation
    await second.release("s1")  # not its own: nothing changes
    assert not await second.claim("s1")
    await first.release("s1")
    assert await second.claim("s1")


async def test_a_lease_not_renewed_expires(db: Database) -> None:
    clock = Clock()
    crashed, other = Leases(db, "a", LEASE_S, clock), Leases(db, "b", LEASE_S, clock)
    assert await crashed.claim("s1")
    clock.now += LEASE_S - 1
    assert await crashed.claim("s1")  # renewed: another lease_s from now
    clock.now += LEASE_S - 1
    assert not await other.claim("s1")
    clock.now += 2
    assert await other.claim("s1")
    assert not await crashed.claim("s1")


async def test_a_restart_releases_its_earlier_runs_leases_only(db: Database) -> None:
    clock = Clock()
    earlier, other = Leases(db, "a", LEASE_S, clock), Leases(db, "b", LEASE_S, clock)
    assert await earlier.claim("s1") and await other.claim("s2")
    restarted = Leases(db, "a", LEASE_S, clock)  # the same instance, a new run
    assert not await restarted.claim("s1")
    assert await restarted.release_earlier() == 1
    assert await restarted.claim("s1")
    assert not await restarted.claim("s2")


async def test_a_turn_waits_for_the_lease_another_process_holds(db: Database) -> None:
    holder, waiter = Leases(db, "a", LEASE_S), Leases(db, "b", LEASE_S)
    assert await holder.claim("s1")
    with capture_logs() as logs:
        waiting = asyncio.create_task(waiter.acquire("s1"), name="acquire")
        await wait_until(lambda: any(e["event"] == "sessions.lease_wait" for e in logs))
    assert not waiting.done()
    await holder.release("s1")
    await asyncio.wait_for(waiting, 10)
    assert not await holder.claim("s1")
