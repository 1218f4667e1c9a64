"""The lock of a soul's SOUL.md across the processes of a shared store.

On one host SoulFile's file lock keeps the writers of SOUL.md apart. Processes
on several hosts that share a workspaces folder need not share its flock (a
network file system's locks may not reach another host), so on a shared store
(PostgreSQL, `Database.shared`) every SOUL.md write (a reflection and its fold,
`/soul rollback`, `/soul epoch`, `soulbot soul ...`) also holds a session
advisory lock of the store named for the soul (`soul\\0<id>`), around the whole
read-edit-replace:

- in one process the writers of a soul take turns on an asyncio.Lock first (an
  advisory lock is granted again to the same connection, so it would not keep
  them apart, and a re-take after a lost connection would look like a hold);
- the store's lock is tried every RETRY_S for up to WAIT_S; past that the write
  does not happen (SoulWriteStopped);
- SoulFile calls the `check` the hold yields (from its worker thread, through the
  event loop) right before it writes: when the lock went with a lost connection,
  or the store does not answer, the write does not happen (SoulWriteStopped),
  even when no one holds the lock now: another host may have written in between,
  and the text edited is stale. The caller logs one line.

On SQLite (one host, one daemon) nothing is taken, and `check` does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

from bot.cluster.locks import holds_lock, try_lock, unlock
from bot.errors import SoulWriteStopped, StoreUnavailable
from bot.storage.db import Database

WAIT_S = 30.0  # how long a write waits for another process's hold (SoulFile's file lock too)
RETRY_S = 0.5  # how long a try waits before the next, while another process holds it
CHECK_S = 30.0  # how long `check` waits for the store's answer

Check = Callable[[], None]
LOST = (
    "its lock went with the store's lost connection, so another process may have "
    "written it meanwhile"
)


def unchecked() -> None:
    """The `check` of a write no other host can interleave with."""


class SoulLocks:
    """The locks of the souls' SOUL.md files, for the processes of one store."""

    def __init__(self, db: Database, clock: Callable[[], float] = time.monotonic) -> None:
        self._db = db
        self._clock = clock
        self._turns: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def hold(self, soul: str) -> AsyncIterator[Check]:
        """Hold the lock of `soul`'s SOUL.md for the block; yields the `check`
        SoulFile calls before it writes. Raises SoulWriteStopped when another
        process holds it past WAIT_S (the block does not run)."""
        if not self._db.shared:
            yield unchecked
            return
        name = f"soul\0{soul}"
        async with self._turns.setdefault(soul, asyncio.Lock()):
            deadline = self._clock() + WAIT_S
            while not await try_lock(self._db, name):
                if self._clock() >= deadline:
                    raise SoulWriteStopped(soul, f"another process held its lock for {WAIT_S:g} s")
                await asyncio.sleep(RETRY_S)
            try:
                yield self._check(soul, name, asyncio.get_running_loop())
            finally:
                with contextlib.suppress(StoreUnavailable):  # the lock went with the connection
                    await unlock(self._db, name)

    def _check(self, soul: str, name: str, loop: asyncio.AbstractEventLoop) -> Check:
        def check() -> None:
            """From a worker thread: raise SoulWriteStopped unless this process
            holds the lock still."""
            future = asyncio.run_coroutine_threadsafe(holds_lock(self._db, name), loop)
            try:
                held = future.result(timeout=CHECK_S)
            except (StoreUnavailable, TimeoutError) as exc:
                future.cancel()
                reason = f"the store did not say whether this process holds its lock ({exc})"
                raise SoulWriteStopped(soul, reason) from exc
            if not held:
                raise SoulWriteStopped(soul, LOST)

        return check
