"""A stalled store fails loudly and briefly (issue 27): a chat turn that waits
on a lock another PostgreSQL session holds fails at `store.lock_timeout_s`
(the person gets the apology, the message is kept), `soulbot health` and the
metrics say the store is stalled while the call waits, and once the lock is
gone the next message is answered together with the kept one."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from bot import prompts
from bot.app.daemon import Daemon
from bot.app.health import check_health, write_health
from bot.app.metrics import Metrics
from bot.config.schema import Config
from bot.storage.postgres import Timeouts
from tests.engines import postgres_schema
from tests.fakes.anthropic_fake import FakeAnthropic
from tests.kit import make_config, running, user_texts, wait_until

LOCK_S = 1.5


def _config(tmp_path: Path, model_url: str, store_url: str) -> Config:
    extra = f"store: {{url: '{store_url}', lock_timeout_s: {LOCK_S}}}\n"
    return make_config(tmp_path, model_url, extra)


async def test_a_locked_history_fails_the_turn_in_time_and_its_message_is_kept(
    tmp_path: Path,
) -> None:
    with postgres_schema() as url:
        async with (
            FakeAnthropic() as fake,
            running(_config(tmp_path, fake.url, url)) as (runtime, platform),
        ):
            await platform.say("hello there")
            await platform.replies(1)
            metrics = Metrics({}, [], runtime.db.waiting_s)
            health = tmp_path / "health.json"
            with psycopg.connect(url) as other:  # a transaction, open until the block ends
                other.execute("LOCK TABLE history IN ACCESS EXCLUSIVE MODE")
                started = time.monotonic()
                await platform.say("are you there?")
                await wait_until(lambda: runtime.db.waiting_s() > 0.3, within=LOCK_S)
                write_health(health, Daemon(runtime).status())
                with pytest.raises(RuntimeError, match="store stalled"):
                    check_health(health, stalled_after_s=0.2)
                age = metrics.registry.get_sample_value("soulbot_store_oldest_call_age_seconds")
                assert age is not None and age > 0.3
                apology = (await platform.replies(2, within=LOCK_S + 5))[1]
                failed_after = time.monotonic() - started
            assert runtime.db.waiting_s() == 0.0
            write_health(health, Daemon(runtime).status())
            assert check_health(health, stalled_after_s=0.2).startswith("ok: pid ")
            await platform.say("and now?")
            answer = (await platform.replies(3))[2]
            prompt = user_texts(fake.requests[-1])
    assert apology.text == prompts.APOLOGY
    assert apology.cause is not None and "LockNotAvailable" in apology.cause
    assert failed_after < LOCK_S + 3  # the lock's timeout, not the lock's holder, ends the wait
    assert len(fake.requests) == 2  # the failed message had no turn of its own
    assert "are you there?" in "\n".join(prompt) and "and now?" in "\n".join(prompt)
    assert answer.text.endswith("and now?")


def test_the_limits_reach_libpq_before_the_urls_own_options() -> None:
    params = Timeouts(connect_s=3, statement_s=2.5, lock_s=None, keepalive_s=30).params(
        "postgresql://u@h/db?options=-csearch_path%3Dx"
    )
    assert params["options"] == "-c statement_timeout=2500 -csearch_path=x"
    assert params["connect_timeout"] == 3
    assert (params["keepalives"], params["keepalives_idle"], params["keepalives_interval"]) == (
        1, 30, 10,
    )  # fmt: skip
