"""The lock of a soul's SOUL.md across the processes of a shared store
(bot/soul/soullock.py): one holder at a time, a bounded wait, and a write that
lost it with its connection does not happen."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

from bot.errors import SoulWriteStopped, StoreUnavailable
from bot.soul import soullock
from bot.soul.heartbeat import Reflection, merge
from bot.soul.soulfile import SoulFile
from bot.soul.soullock import SoulLocks, unchecked
from bot.storage.db import Database
from tests.engines import SERVER
from tests.soul.test_heartbeat import SOUL

WITHIN = 10.0


def soul_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "workspaces" / "twinkle"
    folder.mkdir(parents=True)
    (folder / "SOUL.md").write_text(SOUL)
    return folder


def reflect(text: str, now: datetime) -> str:
    return merge(text, Reflection("About Miso.", (), ()), now)[0]


class Ticking:
    """A clock that moves a minute at each look: a wait never lasts."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 60.0
        return self.now


async def test_one_process_holds_a_soul_at_a_time(two: tuple[Database, Database]) -> None:
    first, second = two
    here, there = SoulLocks(first), SoulLocks(second, clock=Ticking())
    async with here.hold("twinkle") as check:
        await asyncio.to_thread(check)  # held: the write may go on
        with pytest.raises(SoulWriteStopped, match="another process held its lock"):
            async with there.hold("twinkle"):
                pytest.fail("the block ran without the lock")
        async with there.hold("wren"):  # another soul's is free
            pass
    async with there.hold("twinkle") as check:  # given back
        await asyncio.to_thread(check)


async def test_a_holder_waits_for_the_other_process(
    two: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(soullock, "RETRY_S", 0.01)
    first, second = two
    here, there = SoulLocks(first), SoulLocks(second)
    order: list[str] = []

    async def write(locks: SoulLocks, name: str, inside: asyncio.Event) -> None:
        async with locks.hold("twinkle"):
            inside.set()
            order.append(f"{name} in")
            await asyncio.sleep(0.05)
            order.append(f"{name} out")

    first_inside, second_inside = asyncio.Event(), asyncio.Event()
    holding = asyncio.create_task(write(here, "a", first_inside))
    await asyncio.wait_for(first_inside.wait(), WITHIN)
    await asyncio.wait_for(asyncio.gather(holding, write(there, "b", second_inside)), WITHIN)
    assert order == ["a in", "a out", "b in", "b out"]


async def test_a_write_whose_lock_went_with_its_connection_does_not_happen(
    tmp_path: Path, two: tuple[Database, Database]
) -> None:
    """The connection is cut between the read and the write: the server drops
    the lock with it. Even though no one took it since, the write stops (the
    text it edited may be stale) and SOUL.md is as it was."""
    first, _ = two
    folder = soul_folder(tmp_path)
    pid = await first.run(lambda c: c.execute("SELECT pg_backend_pid()").fetchone()[0])
    loop = asyncio.get_running_loop()

    def cut_then_reflect(text: str, now: datetime) -> str:
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        meets = asyncio.run_coroutine_threadsafe(first.run(lambda c: c.execute("SELECT 1")), loop)
        with pytest.raises(StoreUnavailable):  # the store's next call meets the cut
            meets.result(WITHIN)
        return reflect(text, now)

    with pytest.raises(SoulWriteStopped) as stopped:
        async with SoulLocks(first).hold("twinkle") as check:
            await asyncio.to_thread(SoulFile(folder).update, cut_then_reflect, check)
    assert str(stopped.value) == f"twinkle: SOUL.md was not written: {soullock.LOST}"
    assert (folder / "SOUL.md").read_text() == SOUL
    assert not (folder / "memory" / ".meta" / "backups").exists()
    async with SoulLocks(first).hold("twinkle") as check:  # the next write, on a new connection
        assert await asyncio.to_thread(SoulFile(folder).update, reflect, check) is not None


async def test_sqlite_takes_nothing(sqlite_db: Database) -> None:
    locks = SoulLocks(sqlite_db)
    async with locks.hold("twinkle") as check, locks.hold("twinkle") as again:
        assert check is unchecked and again is unchecked


async def test_a_store_that_does_not_answer_stops_the_write(
    tmp_path: Path, two: tuple[Database, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _ = two
    folder = soul_folder(tmp_path)

    async def fails(db: Database, name: str) -> bool:
        raise StoreUnavailable("postgresql://test", "canceling statement due to statement timeout")

    with pytest.raises(SoulWriteStopped, match="the store did not say"):
        async with SoulLocks(first).hold("twinkle") as check:
            monkeypatch.setattr(soullock, "holds_lock", fails)
            await asyncio.to_thread(SoulFile(folder).update, reflect, check)
    assert (folder / "SOUL.md").read_text() == SOUL
