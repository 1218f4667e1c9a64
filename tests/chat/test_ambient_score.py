"""Ambient mode's scorer: each signal on a small channel, by its name."""

from __future__ import annotations

from bot.chat.ambient_score import Line, Score, persona, score, stem

WREN = persona("Wren", "wren", "A home cook who shares recipes and baking tips with the group")


def said(*lines: tuple[str, str] | tuple[str, str, float]) -> list[Line]:
    """Lines of (speaker, text[, ts]); the speaker `wren` is the persona."""
    out = []
    for n, line in enumerate(lines):
        speaker, text = line[0], line[1]
        ts = line[2] if len(line) == 3 else float(n * 10)
        out.append(Line(speaker, speaker, text, ts, own=speaker == "wren"))
    return out


def test_the_persona_is_named_and_topics_come_from_its_role() -> None:
    assert WREN.names == frozenset({"wren"})
    assert {stem(w) for w in ("recipes", "bake", "cooking", "tip", "home")} <= WREN.topics
    assert "group" not in WREN.topics and "with" not in WREN.topics
    assert stem("baking") == stem("baked") == stem("bake") and stem("shipping") == "ship"


def test_being_called_by_name_is_enough_for_the_gate() -> None:
    scored = score(WREN, said(("ann", "Wren, how long do I rest the dough?")), 90)
    assert scored.value >= 0.8 and scored.signals[0] == "name"
    told = score(WREN, said(("ann", "I told Wren about it yesterday")), 90)
    assert told.signals == ("name",) and told.value < 0.5  # talked about, not called
    for called in ("hey wren the oven is on", "wren: look at this", "this one is for you wren"):
        assert score(WREN, said(("ann", called)), 90).value >= 0.5, called


def test_a_question_back_after_its_own_answer_is_a_follow_up_but_thanks_is_not() -> None:
    before = [("ann", "how hot should the oven be for bread?"), ("wren", "220 C with steam.")]
    back = score(WREN, said(*before, ("ann", "and do you preheat the stone too?")), 90)
    assert "follow_up" in back.signals and back.value >= 0.5
    thanks = score(WREN, said(*before, ("ann", "thanks wren, that makes sense")), 90)
    assert thanks == Score(0.0, ("ack",))
    later = said(*before, ("ann", "and do you preheat the stone too?", 10 + 3600))
    assert "follow_up" not in score(WREN, later, 90).signals  # an hour later it is not


def test_a_question_nobody_answered_counts_once_enough_time_has_passed() -> None:
    asked = ("ann", "does anyone know a substitute for buttermilk?", 0.0)
    soon = score(WREN, said(asked, ("ann", "anyone?", 30.0)), 90)
    assert "unanswered" not in soon.signals
    late = score(WREN, said(asked, ("ann", "anyone?", 120.0)), 90)
    assert "unanswered" in late.signals and late.value >= 0.5
    answered = score(WREN, said(asked, ("bob", "milk and lemon", 60.0), ("ann", "hm", 200.0)), 90)
    assert "unanswered" not in answered.signals
    broken = score(WREN, said(("ann", "my oven thermometer stopped working")), 90)
    assert broken.value == 0.0 and not broken.signals  # a trouble report, but not its topic


def test_two_members_talking_to_each_other_silence_it_unless_it_is_named() -> None:
    talk = [("ann", "you coming saturday?"), ("bob", "yes, bringing a pie"),
            ("ann", "which recipe?"), ("bob", "the apple recipe from my gran")]  # fmt: skip
    scored = score(WREN, said(*talk), 90)
    assert scored.value == 0.0 and scored.signals[-1] == "side_talk"
    named = score(WREN, said(*talk[:3], ("bob", "Wren gave me that recipe, right Wren?")), 90)
    assert named.value >= 0.5
    paused = said(*talk[:3], ("bob", "the apple recipe from my gran", 20 + 600.0))
    assert "side_talk" not in score(WREN, paused, 90).signals  # a pause ends the back-and-forth


def test_a_message_to_another_member_is_not_the_persona_s() -> None:
    lines = said(("bob", "hi all"), ("ann", "bob, what recipe did you use for the cake?"))
    scored = score(WREN, lines, 90)
    assert scored.value == 0.0 and scored.signals[-1] == "to_other"
    replying = [*lines[:1], Line("ann", "ann", "what baking recipe?", 10.0, to_other=True)]
    assert score(WREN, replying, 90).value == 0.0


def test_a_question_on_its_topic_scores_more_than_a_mention_of_it() -> None:
    asked = score(WREN, said(("ann", "anyone have a good recipe for sourdough baking?")), 90)
    mentioned = score(WREN, said(("ann", "made a recipe last night")), 90)
    assert "topic" in asked.signals and asked.value > mentioned.value
    assert mentioned.value < 0.5
