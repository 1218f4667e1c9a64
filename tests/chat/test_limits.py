"""The rate limit's list of the people it holds back now (the web console's People page)."""

from __future__ import annotations

from bot.chat.limits import RateLimit


def test_limited_lists_who_is_over_and_for_how_long() -> None:
    now = [100.0]
    rate = RateLimit(2, clock=lambda: now[0])
    rate.admit("telegram:1", 3)
    rate.admit("telegram:2", 2)  # at the limit, not over it
    assert rate.limited() == [("telegram:1", 60.0)]
    now[0] += 45
    assert rate.limited() == [("telegram:1", 15.0)]
    now[0] += 15
    assert rate.limited() == []
