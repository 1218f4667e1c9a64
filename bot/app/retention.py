"""Retention: the nightly deletes of records no turn reads any more (`retention:`).

What would otherwise only grow, each kept for its own number of days (`null`: for
ever):

- history rows no turn loads (`history_days`): compacted rows and older summaries,
  and every row of a generation `/reset` or a new binding left behind. Live rows
  (`bot.chat.history.LIVE`, of the session's current generation) stay, whatever
  their age, and a row that is not live never becomes live again;
- usage rows (model calls' and voice's) of UTC days before the last `usage_days`
  (today included), and on
  PostgreSQL the budget totals of those days: budgets read today's only, and
  `soulbot usage --days N` shows the whole of N days for N up to `usage_days`;
- images `media.keep` saved under `data_dir/media/` (`media_days`, by the file's
  time, which is the clock's when it was kept) and the session folders they leave
  empty once those are as old;
- reply addresses of sessions whose newest history row is older than
  `reply_address_days` (the address only serves a restart's recovery, which looks
  back minutes).

Every delete is a statement of at most `BATCH_ROWS` rows (history: of a span of
`ID_SPAN` ids walked in order), each its own call on the store's one thread, so
the turns queued behind it wait for one batch, never for the whole night's work.
Retention only removes more than `/forget` already erased. Several processes
sharing a PostgreSQL store: the run takes a store-wide lock and a process that
finds it taken skips the night; were two to run at once, each delete names only
rows past the window that no writer touches any more, so the second finds them
gone (deletes nothing) and neither fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import structlog

from bot.chat.history import LIVE
from bot.config.schema import RetentionConfig
from bot.model.usage import utc_day
from bot.storage.db import Database
from bot.storage.sql import Conn

log = structlog.get_logger(__name__)

DAY_S = 86_400.0
BATCH_ROWS = 500  # rows one statement deletes at most
ID_SPAN = 2_000  # history ids one batch walks (by the primary key)
LOCK = "retention"

# History rows past their window that no turn loads: not live, or of an older generation.
_DEAD_HISTORY = (
    "DELETE FROM history WHERE id >= ? AND id <= ? AND ts < ? AND (NOT "
    f"({LIVE}) OR generation < COALESCE((SELECT s.generation FROM sessions s "
    "WHERE s.session = history.session), 0))"
)


@dataclass(frozen=True)
class Pruned:
    """What one run deleted: rows of each table, and kept image files."""

    history: int = 0
    usage: int = 0
    budget_totals: int = 0
    reply_addresses: int = 0
    media_files: int = 0
    voice_usage: int = 0


def _history_span(conn: Conn, after: int, cutoff: float) -> tuple[int, int] | None:
    """Delete the dead rows of the next `ID_SPAN` ids after `after`: the last id
    walked and the rows deleted; None when no row older than `cutoff` is left."""
    row = conn.execute(
        "SELECT MAX(id), MIN(ts) FROM (SELECT id, ts FROM history WHERE id > ? "
        "ORDER BY id LIMIT ?) AS span",
        (after, ID_SPAN),
    ).fetchone()
    if row is None or row[0] is None or row[1] >= cutoff:
        return None
    last = int(row[0])
    return last, conn.execute(_DEAD_HISTORY, (after + 1, last, cutoff)).rowcount


def _usage_batch(conn: Conn, before_day: str, table: str = "usage") -> int:
    """Delete a batch of `table`'s rows (`usage` or `voice_usage`) of days before `before_day`."""
    return conn.execute(
        f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE day < ? LIMIT ?)",
        (before_day, BATCH_ROWS),
    ).rowcount


def _totals_batch(conn: Conn, before_day: str) -> int:
    return conn.execute(
        "DELETE FROM budget_totals WHERE (day, kind, who, instance) IN (SELECT day, kind, "
        "who, instance FROM budget_totals WHERE day < ? LIMIT ?)",
        (before_day, BATCH_ROWS),
    ).rowcount


def _addresses_span(conn: Conn, after: str, cutoff: float) -> tuple[str, int] | None:
    """Delete the reply addresses of idle sessions among the next `BATCH_ROWS`
    after `after`: the last session walked and the rows deleted; None at the end.
    A session that spoke since `cutoff` keeps its address, checked in the delete
    itself."""
    sessions = [
        r[0]
        for r in conn.execute(
            "SELECT session FROM reply_addresses WHERE session > ? ORDER BY session LIMIT ?",
            (after, BATCH_ROWS),
        ).fetchall()
    ]
    if not sessions:
        return None
    marks = ", ".join("?" * len(sessions))
    deleted = conn.execute(
        f"DELETE FROM reply_addresses WHERE session IN ({marks}) AND NOT EXISTS (SELECT 1 "
        "FROM history h WHERE h.session = reply_addresses.session AND h.ts >= ?)",
        (*sessions, cutoff),
    ).rowcount
    return str(sessions[-1]), deleted


def prune_media(base: Path, cutoff: float) -> int:
    """Delete the files under `base`'s session folders older than `cutoff`, and
    the folders empty and as old; the files deleted. Blocking: run it on a thread."""
    deleted = 0
    with contextlib.suppress(FileNotFoundError), os.scandir(base) as folders:
        for folder in folders:
            if not folder.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(FileNotFoundError), os.scandir(folder.path) as files:
                for file in files:
                    if file.is_file(follow_symlinks=False) and file.stat().st_mtime < cutoff:
                        with contextlib.suppress(FileNotFoundError):
                            Path(file.path).unlink()
                            deleted += 1
            if folder.stat(follow_symlinks=False).st_mtime < cutoff:
                with contextlib.suppress(OSError):  # not empty: a file kept since
                    Path(folder.path).rmdir()
    return deleted


class Retention:
    """Runs the `retention:` policy over the store and `media_dir` (None: no
    images are kept). `run` is the nightly task."""

    def __init__(
        self,
        config: RetentionConfig,
        db: Database,
        media_dir: Path | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._db = db
        self._media_dir = media_dir
        self._clock = clock

    async def run(self) -> Pruned:
        """Delete what is past its window, batch by batch; what was deleted.
        Skips the run (nothing deleted) while another process runs it. Raises
        what the store raises (a batch already done stays done)."""
        if not await self._db.try_lock(LOCK):
            log.info("retention.skipped", reason="another process is running it")
            return Pruned()
        try:
            pruned = await self._run(self._clock())
        finally:
            await self._db.unlock(LOCK)
        log.info("retention.done", **asdict(pruned))
        return pruned

    async def _run(self, now: float) -> Pruned:
        config = self._config
        history = usage = totals = addresses = media = voice = 0
        if config.history_days is not None:
            history = await self._history(now - config.history_days * DAY_S)
        if config.usage_days is not None:
            day = utc_day(now - (config.usage_days - 1) * DAY_S)
            usage = await self._batches(partial(_usage_batch, before_day=day))
            voice = await self._batches(partial(_usage_batch, before_day=day, table="voice_usage"))
            if self._db.shared:
                totals = await self._batches(partial(_totals_batch, before_day=day))
        if config.reply_address_days is not None:
            addresses = await self._addresses(now - config.reply_address_days * DAY_S)
        if config.media_days is not None and self._media_dir is not None:
            cutoff = now - config.media_days * DAY_S
            media = await asyncio.to_thread(prune_media, self._media_dir, cutoff)
        return Pruned(history, usage, totals, addresses, media, voice)

    async def _batches(self, batch: Callable[[Conn], int]) -> int:
        """Run `batch` until it deletes less than a full batch; the rows deleted."""
        total = 0
        while (deleted := await self._db.run(batch)) > 0:
            total += deleted
            if deleted < BATCH_ROWS:
                break
        return total

    async def _history(self, cutoff: float) -> int:
        total, after = 0, 0
        while span := await self._db.run(partial(_history_span, after=after, cutoff=cutoff)):
            after, deleted = span
            total += deleted
        return total

    async def _addresses(self, cutoff: float) -> int:
        total, after = 0, ""
        while span := await self._db.run(partial(_addresses_span, after=after, cutoff=cutoff)):
            after, deleted = span
            total += deleted
        return total
