"""The lock of one wiki (a soul's scope) across every process of a store, and
the erase epoch it guards.

Everything that writes a wiki or erases what it was built from takes the lock:
the compile, `/memory drop`, `/forget` and the heartbeat's self notes. One API
(`WikiLock`), two implementations, by the store's engine:

- SQLite (`FileWikiLock`): the processes of one host share the file, and an
  flock under `data_dir/locks/` (outside the scope's folder, which `/forget`
  removes), through filelock. The kernel drops it when its process dies.
- PostgreSQL (`AdvisoryWikiLock`): a session advisory lock on the process's one
  connection, so processes on other hosts are excluded too. The server drops it
  when that connection ends, a reconnect included: `keep` finds that out
  (pg_locks) and takes the lock again, or raises WikiLockLost to stop the work.

The lock is per process: in one process the callers take turns on an
asyncio.Lock first (bot/memory/service.py), as a PostgreSQL session's advisory
lock is granted again to the same session.

The erase epoch (`memory_erasures`) counts the erasures of a scope: `/forget`
and `/memory drop` bump it in the transaction that erases the traces. A compile
reads it once it holds the lock and checks it again, with the lock, before each
write (`Memory._guard`): should it have moved (only when the lock was lost in
between), the compile throws away what it prepared and starts over from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from pathlib import Path

import structlog
from filelock import FileLock, Timeout

from bot.cluster.locks import holds_lock, try_lock, unlock
from bot.errors import WikiLockLost
from bot.storage.db import Database

log = structlog.get_logger(__name__)

# How long a try waits before the next, while a lock is wanted and another
# process holds it.
RETRY_S = 0.5


def wiki_lock_path(data_dir: Path, soul: str, scope: str) -> Path:
    """The file whose flock says a process holds this wiki (on SQLite)."""
    key = hashlib.sha256(f"{soul}\0{scope}".encode()).hexdigest()[:32]
    return data_dir / "locks" / f"compile-{key}.lock"


class WikiLock(ABC):
    """The lock of the wiki of `soul` and `scope` across processes. Not
    re-entrant, and not for two holders in one process (see the module)."""

    def __init__(self, soul: str, scope: str) -> None:
        self.soul, self.scope = soul, scope

    @abstractmethod
    async def try_take(self) -> bool:
        """Take the lock without waiting: whether it was taken."""

    @abstractmethod
    async def held(self) -> bool:
        """Whether this process still holds the lock it took."""

    @abstractmethod
    async def give_back(self) -> None:
        """Give the lock back (nothing when it is not held)."""

    async def keep(self) -> None:
        """Make sure the lock is still held before a write: when it was lost
        (a reconnect to the server), take it again. Raises WikiLockLost when
        another process holds it now."""
        if await self.held():
            return
        if not await self.try_take():
            raise WikiLockLost(self.soul, self.scope)
        log.warning("wiki.lock_retaken", soul=self.soul, scope=self.scope,
                    reason="the store's connection was lost, and the lock with it")  # fmt: skip

    @contextlib.asynccontextmanager
    async def hold(self, wait_s: float = 0.0) -> AsyncIterator[bool]:
        """Hold the lock for the block, trying for up to `wait_s` (every
        RETRY_S); yields whether it was taken (the block runs either way)."""
        deadline = time.monotonic() + wait_s
        while not await self.try_take():
            if time.monotonic() >= deadline:
                yield False
                return
            await asyncio.sleep(RETRY_S)
        try:
            yield True
        finally:
            await self.give_back()


class FileWikiLock(WikiLock):
    """An flock on `wiki_lock_path` (SQLite: the processes of one host)."""

    def __init__(self, data_dir: Path, soul: str, scope: str) -> None:
        super().__init__(soul, scope)
        self._path = wiki_lock_path(data_dir, soul, scope)
        self._lock: FileLock | None = None

    async def try_take(self) -> bool:
        self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = FileLock(self._path, mode=0o600, thread_local=False)
        try:
            lock.acquire(timeout=0)  # one flock(2) call: it never waits
        except Timeout:
            return False
        self._lock = lock
        return True

    async def held(self) -> bool:
        """A file's lock lasts as long as its open file: while taken, held."""
        return self._lock is not None

    async def give_back(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()


class AdvisoryWikiLock(WikiLock):
    """A PostgreSQL session advisory lock on the store's connection. Its key
    is of the schema's name too: advisory locks are the database's, and two
    soulbots may keep their tables in two schemas of one database."""

    def __init__(self, db: Database, soul: str, scope: str) -> None:
        super().__init__(soul, scope)
        self._db = db

    def _name(self) -> str:
        return f"wiki\0{self.soul}\0{self.scope}"

    async def try_take(self) -> bool:
        return await try_lock(self._db, self._name())

    async def held(self) -> bool:
        return await holds_lock(self._db, self._name())

    async def give_back(self) -> None:
        """Unlock it; a lost connection took the lock with it already."""
        await unlock(self._db, self._name())


def wiki_lock(db: Database, data_dir: Path, soul: str, scope: str) -> WikiLock:
    """The lock of a wiki for the store's engine (see the module)."""
    if db.shared:
        return AdvisoryWikiLock(db, soul, scope)
    return FileWikiLock(data_dir, soul, scope)
