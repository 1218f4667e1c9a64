"""The pace of streamed replies (adapters/stream.py), on its own."""

from __future__ import annotations

import asyncio
import itertools
import time

from adapters.stream import Paced
from tests.kit import capture_logs, wait_until

PACE = 0.2


class Shows:
    def __init__(self, fail: bool = False) -> None:
        self.shown: list[tuple[float, str]] = []
        self.fail = fail

    async def __call__(self, text: str) -> None:
        if self.fail:
            raise ConnectionError("gone")
        self.shown.append((time.monotonic(), text))


async def test_an_answer_whole_within_the_first_pace_is_never_previewed() -> None:
    shows = Shows()
    paced = Paced(shows, PACE)
    for text in ("He", "Hello", "Hello there"):
        await paced.update(text)
    started = time.monotonic()
    await paced.settle()
    assert shows.shown == []
    assert time.monotonic() - started < PACE / 2  # nothing shown: nothing to wait for


async def test_shows_keep_the_pace_and_the_latest_text_wins() -> None:
    shows = Shows()
    paced = Paced(shows, PACE)
    began = time.monotonic()
    for n in range(12):
        await paced.update("x" * (n + 1))
        await asyncio.sleep(PACE / 4)
    await wait_until(lambda: shows.shown and shows.shown[-1][1] == "x" * 12, within=5)
    await paced.settle()
    settled = time.monotonic()
    times = [t for t, _ in shows.shown]
    assert times[0] - began >= PACE * 0.95  # the first show waited a pace too
    assert all(b - a >= PACE * 0.95 for a, b in itertools.pairwise(times))
    assert len(shows.shown) < 12  # texts between two shows were never shown on their own
    assert settled - times[-1] >= PACE * 0.95  # what comes next keeps the pace


async def test_a_failed_preview_ends_the_previews_with_one_line() -> None:
    shows = Shows(fail=True)
    paced = Paced(shows, PACE, adapter="test")
    with capture_logs() as logs:
        await paced.update("a")
        await wait_until(lambda: any(e["event"] == "adapter.preview_failed" for e in logs))
        await paced.update("ab")
        await paced.settle()
    assert [e["event"] for e in logs].count("adapter.preview_failed") == 1
    assert paced.shown is None


async def test_a_cancelled_pace_shows_nothing_after_it() -> None:
    shows = Shows()
    paced = Paced(shows, PACE)
    await paced.update("a")
    await wait_until(lambda: shows.shown)
    await paced.update("ab")  # waits for its time
    started = time.monotonic()
    await paced.cancel()
    assert time.monotonic() - started < PACE / 2  # no wait for the pace
    await paced.update("abc")
    await asyncio.sleep(PACE * 1.5)
    assert [text for _, text in shows.shown] == ["a"]
    assert paced.shown == "a"
