"""The README's heartbeat walk-through against the demo model (`make fake`): a
conversation in the shared scope writes a real, checked entry into SOUL.md, at
no cost; and a model that answers without calling save_soul is told apart."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from bot.config.schema import Config, HeartbeatConfig
from bot.errors import Rejected
from bot.model.usage import usage_table
from bot.soul.heartbeat import entries_of, validate
from bot.soul.regions import MEMORY, META, HeartbeatParams, meta_fields, parse_regions
from tests.fakes.anthropic_fake import FakeAnthropic, Reply
from tests.fakes.demo import DEMO_MODEL, DemoAnthropic
from tests.kit import capture_logs, make_config, running

SOUL = (
    "---\nagentId: lark\nname: Lark\n---\n# SOUL.md\n\n<!-- SOUL_META -->\n- version: 1.0.0\n"
    "- update_count: 0\n\n<!-- SOUL_CORE -->\nYou are Lark, a patient listener.\n\n"
    "## Rules\n- Be kind.\n\n<!-- SOUL_MEMORY -->\n## Memory\n\n"
    "<!-- SOUL_AUTOBIOGRAPHY -->\n## Autobiography\n"
)
LONG = (
    "I spent the whole weekend repotting my basil and the tomato seedlings on the balcony, "
    "then I moved the lemon tree inside because the nights are getting cold"
)
NO_CALL = "the model answered without calling save_soul (or its call was cut at max_tokens)"


def shared_console(tmp_path: Path, url: str) -> Config:
    """The README's set-up: the console's conversation is the shared scope, and
    only a flush (Ctrl-D) ends it."""
    folder = tmp_path / "workspaces" / "lark"
    folder.mkdir(parents=True)
    (folder / "SOUL.md").write_text(SOUL)
    config = make_config(tmp_path, url, "memory: {scope: shared}\n")
    return config.model_copy(update={"heartbeat": HeartbeatConfig(idle_minutes=300)})


def soul_text(tmp_path: Path) -> str:
    return (tmp_path / "workspaces" / "lark" / "SOUL.md").read_text()


@pytest.fixture
def logs() -> Iterator[list[MutableMapping[str, Any]]]:
    with capture_logs() as captured:
        yield captured


async def test_a_heartbeat_against_the_demo_model_writes_soul_md_for_free(
    tmp_path: Path, logs: list[MutableMapping[str, Any]]
) -> None:
    async with (
        DemoAnthropic() as fake,
        running(shared_console(tmp_path, fake.url), "console") as (runtime, platform),
    ):
        await platform.say(LONG, user="ann")
        await platform.replies(1)
        await platform.say("and the roses are fine", user="ann")
        replies = await platform.replies(2)
        await runtime.reflector.flush()
        await platform.say("/soul status", user="ann")
        status = (await platform.replies(3))[-1].text
    assert [r.text for r in replies] == [
        "(demo) I heard: " + LONG,
        "(demo) I heard: and the roses are fine",
    ]
    text = soul_text(tmp_path)
    [entry] = entries_of(text)
    assert entry.endswith(
        '] In a demo conversation of 4 messages they told me "' + LONG[:97].rstrip() + '...", '
        "and I want to remember it."
    )
    regions = parse_regions(text)
    assert regions is not None
    assert '- Someone told me: "' + LONG[:147].rstrip() + '..."' in (regions.get(MEMORY) or "")
    meta = meta_fields(regions.get(META) or "")
    assert (meta["version"], meta["update_count"]) == ("1.0.1", "1")
    assert "## Rules\n- Be kind.\n\n" in text  # no rule proposed, the core as it was
    [written] = [e for e in logs if e["event"] == "heartbeat.written"]
    assert (written["target"], written["entries_added"], written["facts_added"]) == (
        "SOUL.md",
        1,
        1,
    )
    assert not [e for e in logs if e["event"] in ("heartbeat.rejected", "llm.price_unknown")]
    # Every call was the demo model's and cost nothing: the ledger, the report, /soul status.
    with sqlite3.connect(tmp_path / "data" / "soulbot.db") as conn:
        rows = conn.execute("SELECT source, model, cost_usd FROM usage").fetchall()
        report = usage_table(conn, days=1, by="model", now=time.time())
    assert {source for source, _, _ in rows} >= {"turn", "heartbeat"}
    assert {(model, cost) for _, model, cost in rows} == {(DEMO_MODEL, 0.0)}
    assert "\ndemo " in report and report.split("\n")[-3].endswith(" 0.0000")  # TOTAL
    assert "tokens, $0.0000" in status


def test_no_tool_call_is_rejected_as_such() -> None:
    # bot/model/client.py use_tool: None when the answer held no save_soul call.
    with pytest.raises(Rejected, match=r"^the model answered without calling save_soul "):
        validate(None, HeartbeatParams())


async def test_the_rejection_line_says_the_model_made_no_tool_call(
    tmp_path: Path, logs: list[MutableMapping[str, Any]]
) -> None:
    async with FakeAnthropic() as fake:
        # A model that ignores the forced tool and answers in prose.
        fake.responder = lambda body: (
            Reply.of_text("What a lovely chat about basil!")
            if (body.get("tool_choice") or {}).get("name") == "save_soul"
            else None
        )
        async with running(shared_console(tmp_path, fake.url), "console") as (runtime, platform):
            await platform.say(LONG, user="ann")
            await platform.replies(1)
            await runtime.reflector.flush()
    [rejected] = [e for e in logs if e["event"] == "heartbeat.rejected"]
    assert rejected["reason"] == NO_CALL
    assert soul_text(tmp_path) == SOUL
