"""A time without an offset is UTC wherever the host is: in `memory import` as in
a page's front matter."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from bot.cli.memory import _timestamp
from bot.memory.page import parse_page

NOON = datetime(2026, 10, 14, 12, 0, tzinfo=UTC).timestamp()


@pytest.fixture(params=["UTC", "America/New_York", "Asia/Tokyo"])
def host_zone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield request.param
    monkeypatch.undo()
    time.tzset()


def test_an_import_time_without_an_offset_is_utc(host_zone: str) -> None:
    assert _timestamp("2026-10-14T12:00:00", "t.jsonl line 1") == NOON
    assert _timestamp("2026-10-14 12:00", "t.jsonl line 1") == NOON
    assert _timestamp("2026-10-14T12:00:00Z", "t.jsonl line 1") == NOON
    assert _timestamp("2026-10-14T21:00:00+09:00", "t.jsonl line 1") == NOON


def test_the_front_matter_reads_the_same_text_as_the_import(host_zone: str) -> None:
    page = parse_page("---\nupdated: 2026-10-14T12:00:00\n---\nBody\n", "concepts/notes")
    when = datetime.fromisoformat(page.updated.replace("Z", "+00:00"))
    assert when.timestamp() == _timestamp("2026-10-14T12:00:00", "t.jsonl line 1") == NOON
