"""Recovery at start takes time in proportion to recent traffic (issue 27):
with many sessions last spoken to long ago and one recent message left
unanswered, `Runtime.recover` makes a few statements, however many old
sessions there are, and answers the recent one."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.storage.sql import Conn
from bot.types import Inbound
from tests.engines import Counting, postgres_schema
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import make_config, running

OLD_SESSIONS = 300


def _old_sessions(conn: Conn, ts: float) -> None:
    """`OLD_SESSIONS` sessions, each one message left unanswered long ago."""
    rows = [(f"test:old{i}", ts) for i in range(OLD_SESSIONS)]
    with conn.transaction():
        conn.executemany(
            "INSERT INTO history (session, generation, role, kind, content, tokens, ts) "
            "VALUES (?, 0, 'user', 'message', 'old news', 2, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO reply_addresses (session, inbound) VALUES (?, '{}')",
            [(session,) for session, _ in rows],
        )


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_recovery_reads_recent_rows_only_and_answers_the_recent_one(
    tmp_path: Path, engine: str
) -> None:
    with contextlib.ExitStack() as stack:
        extra = (
            f"store: {{url: '{stack.enter_context(postgres_schema())}'}}\n"
            if engine != "sqlite"
            else ""
        )
        async with FakeAnthropic() as fake:
            config = make_config(tmp_path, fake.url, extra)
            async with running(config) as (runtime, platform):
                await runtime.db.run(lambda c: _old_sessions(c, time.time() - 86400))
                ann = Inbound("test", "ann", "ann", "Ann", "are you there?", True, message_id="m1")
                route = runtime.router.route(ann)
                await runtime.history.bind(route.session, (route.soul, route.scope))
                await runtime.history.append_message(
                    route.session, 0, "are you there?", "m1", ann.address()
                )
                count = [0]
                real_run = runtime.db.run

                def counted(fn: Callable[[Conn], Any]) -> Any:
                    return real_run(lambda c: fn(Counting(c, count)))

                runtime.db.run = counted  # type: ignore[method-assign]
                recovered = await runtime.recover()
                runtime.db.run = real_run  # type: ignore[method-assign]
                [reply] = await platform.replies(1)
    assert recovered == 1
    assert count[0] < 20, count  # the search, and the recent session's load: not one per session
    assert reply.chat_id == "ann" and reply.text.endswith("are you there?")
