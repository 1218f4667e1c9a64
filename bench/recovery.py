"""Recovery benchmark: how long the start's search for messages a crash left
unanswered (`HistoryStore.unanswered`, what `Runtime.recover` asks before the
health file is written) takes with `--sessions` sessions in the store, all but
`--recent` of them last spoken to a day ago (answered), the rest within
`sessions.recover_window_s` and unanswered; on SQLite, and on PostgreSQL when a
server answers (a new schema on it, dropped afterwards).

It reports, for each engine, the median of `--rounds` searches, the statements
one search made, and whether it found exactly the recent sessions. The target:
at most 1 s at 100,000 sessions on each engine. Prints one JSON line; exit
status 1 when a target is missed. Without a PostgreSQL server, one line on
stderr says so and only SQLite is measured.

    .venv/bin/python bench/recovery.py [--sessions 100000] [--recent 10] [--rounds 3]
        [--store postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import finish, fresh_store
from bot.chat.history import HistoryStore
from bot.storage.db import Database
from bot.storage.sql import Conn
from tests.engines import SERVER, Counting

TARGET_S = 1.0
WINDOW_S = 600.0
SERIES = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "


def fill(conn: Conn, sessions: int, recent: int, now: float) -> None:
    """`sessions` sessions, each a message and its delivered reply a day old,
    but the last `recent`: a message within the window and no reply."""
    old, new = now - 86400.0, now - 60.0
    with conn.transaction():
        conn.execute(
            SERIES + "INSERT INTO reply_addresses (session, inbound) "
            "SELECT 'bench:s' || i, '{}' FROM n",
            (sessions,),
        )
        conn.execute(
            SERIES + "INSERT INTO history (session, generation, role, kind, content, tokens, "
            "reply_to, ts, delivered) SELECT 'bench:s' || i, 0, 'user', 'message', 'hello', 1, "
            "NULL, CASE WHEN i > ? THEN ? ELSE ? END, 1 FROM n",
            (sessions, sessions - recent, new, old),
        )
        conn.execute(
            SERIES + "INSERT INTO history (session, generation, role, kind, content, tokens, "
            "reply_to, ts, delivered) SELECT 'bench:s' || i, 0, 'assistant', 'message', 'hi', 1, "
            "i, ?, 1 FROM n WHERE i <= ?",
            (sessions, old, sessions - recent),
        )
    conn.execute("ANALYZE")


async def measure(target: Path | str, args: argparse.Namespace) -> dict[str, Any]:
    db = Database(target)
    await db.open()
    try:
        now = time.time()
        await db.run(lambda c: fill(c, args.sessions, args.recent, now))
        history = HistoryStore(db)
        times: list[float] = []
        found: list[tuple[str, str]] = []
        count = [0]
        real_run = db.run

        def counted(fn: Callable[[Conn], Any]) -> Any:
            return real_run(lambda c: fn(Counting(c, count)))

        db.run = counted  # type: ignore[method-assign]
        for _ in range(args.rounds):
            start = time.perf_counter()
            found = await history.unanswered(now - WINDOW_S)
            times.append(time.perf_counter() - start)
        db.run = real_run  # type: ignore[method-assign]
        expected = {
            f"bench:s{i}" for i in range(args.sessions - args.recent + 1, args.sessions + 1)
        }
        return {
            "recovery_s": round(statistics.median(times), 4),
            "statements": count[0] // args.rounds,
            "found_right": {s for s, _ in found} == expected,
        }
    finally:
        await db.close()


async def run(args: argparse.Namespace, postgres: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"sessions": args.sessions, "recent": args.recent}
    with tempfile.TemporaryDirectory() as folder:
        with fresh_store(None, Path(folder), "recovery") as target:
            result["sqlite"] = await measure(target, args)
        if postgres:
            with fresh_store(args.store, Path(folder), "recovery") as target:
                result["postgresql"] = await measure(target, args)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--recent", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store", default=SERVER, help="the PostgreSQL server (a new schema)")
    args = parser.parse_args()
    postgres = True
    try:
        psycopg.connect(args.store, connect_timeout=3).close()
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0]
        print(f"recovery: PostgreSQL skipped ({reason}); --store URL", file=sys.stderr)
        postgres = False
    result = asyncio.run(run(args, postgres))
    engines = [e for e in ("sqlite", "postgresql") if e in result]
    ok = {f"{e}_s": result[e]["recovery_s"] <= TARGET_S for e in engines}
    ok |= {f"{e}_found": result[e]["found_right"] for e in engines}
    return finish(result, {"recovery_s_max": TARGET_S}, ok)


if __name__ == "__main__":
    raise SystemExit(main())
