"""The bot-to-bot chain and cap (bot/chat/bots.py), with a seeded chance."""

from __future__ import annotations

import random

from bot.chat.bots import Bots
from bot.config.schema import BotsConfig
from tests.kit import capture_logs

SESSION = "discord:510"


def test_each_reply_in_a_row_is_less_likely_and_a_person_resets_the_chain() -> None:
    draws = [0.9, 0.4, 0.3, 0.2, 0.1, 0.9]
    bots = Bots(BotsConfig(decay=0.5, replies_per_minute=100), chance=lambda: draws.pop(0))
    # odds 1, 0.5, 0.25: 0.9 and 0.4 pass, 0.3 misses; the chain holds at 2 (0.2 passes
    # 0.25), then a person speaks and odds are 1 again.
    said = [bots.answers(SESSION, "lark", float(t), True) for t in range(4)]
    bots.human(SESSION)
    said += [bots.answers(SESSION, "lark", 10.0, True), bots.answers(SESSION, "lark", 11.0, True)]
    assert said == [True, True, False, True, True, False]
    assert draws == []


def test_the_cap_holds_in_the_channel_s_rolling_minute_whatever_the_chance() -> None:
    bots = Bots(BotsConfig(decay=1, replies_per_minute=2), chance=random.Random(7).random)
    times = [0.0, 10.0, 20.0, 59.0, 60.0, 61.0, 65.0]
    said = [bots.answers(SESSION, "lark", t, True) for t in times]
    # 0 and 10 answered; 20 and 59 capped; at 60 the one of 0 is a minute old, at 70 the
    # one of 10: 61 and 65 capped again.
    assert said == [True, True, False, False, True, False, False]
    assert bots.answers("discord:511", "lark", 65.0, True)  # another channel's own cap
    bots.human(SESSION)  # a person resets the chain, not the minute's count
    assert not bots.answers(SESSION, "lark", 66.0, True)
    assert bots.answers(SESSION, "lark", 70.0, True)


def test_a_seeded_chance_decides_the_same_every_run() -> None:
    def run() -> list[bool]:
        bots = Bots(BotsConfig(decay=0.8, replies_per_minute=1000), random.Random(42).random)
        return [bots.answers(SESSION, "lark", float(t), True) for t in range(40)]

    first = run()
    assert first == run() and first[0] and not all(first)


def test_every_decision_is_one_line_without_text() -> None:
    bots = Bots(BotsConfig(decay=0, replies_per_minute=2), chance=lambda: 0.0)
    with capture_logs() as logs:
        bots.answers(SESSION, "lark", 0.0, False)
        bots.answers(SESSION, "lark", 0.0, True)
        bots.answers(SESSION, "lark", 1.0, True)
        bots.human(SESSION)
        bots.answers(SESSION, "lark", 2.0, True)
        bots.answers(SESSION, "lark", 3.0, True)
        bots.ignored("discord:dm:9", "lark", "a DM")
    lines = [(e["session"], e["chain"], e["decision"], e["reason"]) for e in logs]
    assert lines == [
        (SESSION, 0, "silent", "not addressed"),
        (SESSION, 1, "answer", "chance 1"),
        (SESSION, 1, "silent", "chance 0 missed"),
        (SESSION, 1, "answer", "chance 1"),
        (SESSION, 1, "silent", "2 replies to bots this minute (cap 2)"),
        ("discord:dm:9", 0, "ignored", "a DM"),
    ]
    assert all(e["event"] == "bots.decided" and e["soul"] == "lark" for e in logs)
    assert [e["log_level"] for e in logs] == ["info"] * 5 + ["debug"]  # ignored: debug
