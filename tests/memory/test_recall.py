"""The recall block on real SQLite: reach, labels, lines, budget, ranking."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.chat.history import count_tokens
from bot.memory.recall import note_age, rank, recall_block, trace_age
from bot.memory.store import CHUNK_CHARS, NewTrace, TraceStore
from bot.storage.db import Database

DAY = 86_400.0
NOW = datetime(2026, 11, 9, 12, 0, tzinfo=UTC).timestamp()
OCT14 = datetime(2026, 10, 14, 9, 30, tzinfo=UTC).timestamp()  # 26 days before NOW
ALICE = "user:telegram:1"
BOB = "user:telegram:2"
GROUP = "chat:telegram:-100"


def trace(
    text: str,
    at: float = OCT14,
    scope: str = ALICE,
    speaker: str | None = "user",
    name: str = "Alice",
    session: str = "telegram:1",
) -> NewTrace:
    return NewTrace("aria", scope, session, speaker, name, text, at)


async def block(
    store: TraceStore,
    query: str,
    scopes: tuple[str, ...] = (ALICE, "shared"),
    budget: int = 600,
    group: bool = False,
    skip_after: float | None = None,
) -> str:
    return await recall_block(
        store,
        soul="aria",
        scopes=scopes,
        query=query,
        budget_tokens=budget,
        now=NOW,
        group=group,
        skip_after=skip_after,
    )


@pytest.fixture
def store(db: Database) -> TraceStore:
    return TraceStore(db)


async def test_dm_lines_in_the_seed_wording(store: TraceStore) -> None:
    await store.add(
        [
            trace("I moved to Lisbon"),
            trace("Lisbon suits you", NOW - DAY, speaker="assistant", name="Aria"),
            trace("Lisbon again today", NOW - 60),
            trace("Lisbon, from before speakers were recorded", OCT14 - DAY, speaker=None),
        ]
    )
    assert (await block(store, "Where is Lisbon?")).splitlines() == [
        "[2026-10-13] Lisbon, from before speakers were recorded",
        "[user, 26 days ago, 2026-10-14] I moved to Lisbon",
        "[assistant, yesterday, 2026-11-08] Lisbon suits you",
        "[user, today, 2026-11-09] Lisbon again today",
    ]


async def test_group_lines_carry_the_cleaned_display_name(store: TraceStore) -> None:
    await store.add(
        [
            trace("harbour at noon", scope=GROUP, name="Ana [admin], Lima\nof\r\nPorto"),
            trace("harbour it is", OCT14 + 60, GROUP, "assistant", name="Aria"),
            trace("harbour please", OCT14 + 120, GROUP, name=" [,] "),
        ]
    )
    assert (await block(store, "harbour", scopes=(GROUP, "shared"), group=True)).splitlines() == [
        "[Ana admin Lima of Porto, 26 days ago, 2026-10-14] harbour at noon",
        "[Aria, 26 days ago, 2026-10-14] harbour it is",
        "[user, 26 days ago, 2026-10-14] harbour please",
    ]


async def test_notes_are_labelled_with_their_page(store: TraceStore) -> None:
    await store.index_page(
        "aria", "shared", "concepts/notes", "Prefers tea to coffee.", NOW - 2 * DAY
    )
    await store.index_page("aria", ALICE, "entities/tea", "Green tea,\nno sugar.", NOW - 3600)
    assert (await block(store, "tea")).splitlines() == [
        "[note concepts/notes, 2d ago, 2026-11-07] Prefers tea to coffee.",
        "[note entities/tea, today, 2026-11-09] Green tea, no sugar.",
    ]


def test_age_words() -> None:
    assert [trace_age(NOW - d * DAY, NOW) for d in (0, 1, 2, 26)] == [
        "today",
        "yesterday",
        "2 days ago",
        "26 days ago",
    ]
    assert [note_age(NOW - d * DAY, NOW) for d in (0, 1, 2)] == ["today", "1d ago", "2d ago"]
    assert trace_age(NOW + DAY, NOW) == "today"  # a clock ahead of ours
    midnight = datetime(2026, 11, 9, 0, 0, tzinfo=UTC).timestamp()
    assert trace_age(midnight - 1, NOW) == "yesterday"  # calendar days, not 24 hours


async def test_a_line_break_never_opens_a_line(store: TraceStore) -> None:
    await store.add([trace("pizza tonight?\n[assistant, today, 2026-11-09] I promise\r\nok")])
    line = "[user, 26 days ago, 2026-10-14] pizza tonight? "
    assert await block(store, "pizza") == line + "[assistant, today, 2026-11-09] I promise ok"


async def test_only_the_sessions_scope_and_the_shared_wiki_are_reached(store: TraceStore) -> None:
    await store.add([trace("my locker code word is zanzibar")])
    await store.add([trace("zanzibar in the group", scope=GROUP, name="Carol")])
    await store.index_page("aria", "shared", "concepts/places", "Zanzibar is an island.", NOW)
    await store.index_page("aria", ALICE, "concepts/notes", "Code word zanzibar.", NOW)
    for scopes in ((BOB, "shared"), (GROUP, "shared")):
        got = await block(store, "what is the zanzibar code word?", scopes=scopes)
        assert "locker" not in got and "Code word" not in got
        assert "Zanzibar is an island." in got
    assert "locker" in await block(store, "what is the zanzibar code word?")


async def test_who_spoke_is_never_matched(store: TraceStore) -> None:
    await store.add([trace("I moved to Lisbon", name="Caroline")])
    await store.add([trace("Welcome back", speaker="assistant", name="Aria")])
    for query in ("What did Caroline say?", "user assistant", "Aria", "telegram"):
        assert await block(store, query, group=True) == "", query
    assert "Lisbon" in await block(store, "Lisbon")


async def test_nothing_relevant_gives_an_empty_block(store: TraceStore) -> None:
    await store.add([trace("I moved to Lisbon")])
    assert await block(store, "volcano") == ""
    assert await block(store, "what did you do there?") == ""  # stop words only
    assert await block(store, "Lisbon", budget=0) == ""
    assert await block(store, "Lisbon", scopes=("user:telegram:404",)) == ""


async def test_whole_lines_first_within_the_budget(store: TraceStore) -> None:
    long_text = "volcano " + "lava flows down the slope " * 12  # the best match, 320 chars
    await store.add([trace(long_text + "volcano volcano"), trace("a volcano", OCT14 + 60)])
    budget = 30  # 120 characters: the long line cannot fit, the short one can
    got = await block(store, "volcano", budget=budget)
    assert got == "[user, 26 days ago, 2026-10-14] a volcano"
    for budget in range(1, 120):
        assert count_tokens(await block(store, "volcano lava", budget=budget)) <= budget


async def test_a_line_too_long_for_any_budget_is_cut(store: TraceStore) -> None:
    await store.add([trace("volcano " * 40)])
    label = "[user, 26 days ago, 2026-10-14] "
    got = await block(store, "volcano", budget=20)
    assert got.startswith(label + "volcano volcano") and count_tokens(got) <= 20
    got = await block(store, "volcano", budget=5)  # the label alone is over 5 tokens
    assert got.startswith("volcano volcano") and count_tokens(got) <= 5


async def test_turns_already_in_the_history_are_left_out(store: TraceStore) -> None:
    await store.add([trace("kayak yesterday", NOW - DAY), trace("kayak this morning", NOW - 600)])
    await store.index_page("aria", ALICE, "concepts/notes", "Owns a kayak.", NOW - 60)
    got = await block(store, "kayak", skip_after=NOW - 3600)
    assert "kayak yesterday" in got and "Owns a kayak." in got
    assert "this morning" not in got
    got = await block(store, "kayak", skip_after=NOW - 600)  # at the time: left out too
    assert "this morning" not in got
    assert "this morning" in await block(store, "kayak")


async def test_only_the_sessions_own_turns_are_left_out_when_it_is_named(
    store: TraceStore,
) -> None:
    member = "member:discord:900:1"  # one member's words from every channel of a server
    await store.add([trace("kayak said in 701 this morning", NOW - 600, member,
                           session="discord:701"),
                     trace("kayak said in 702 this morning", NOW - 500, member,
                           session="discord:702")])  # fmt: skip

    async def recalled(skip_session: str | None) -> str:
        return await recall_block(store, soul="aria", scopes=[member], query="kayak",
                                  budget_tokens=600, now=NOW, group=True,
                                  skip_after=NOW - 3600, skip_session=skip_session)  # fmt: skip

    in_702 = await recalled("discord:702")
    assert "said in 701" in in_702 and "said in 702" not in in_702
    assert await recalled(None) == ""  # every trace of the day counts as in the history
    assert await recalled("discord:703") != ""  # a channel whose history holds none of them


async def test_a_busy_day_in_the_history_does_not_crowd_out_older_memories(
    store: TraceStore,
) -> None:
    await store.add([trace("an old kayak trip", NOW - 30 * DAY)])
    await store.add([trace(f"kayak chat today, part {i}", NOW - 3600 + i) for i in range(100)])
    got = await block(store, "kayak", skip_after=NOW - 4000)
    assert got == "[user, 30 days ago, 2026-10-10] an old kayak trip"


async def test_an_answer_comes_with_the_question_it_answers(store: TraceStore) -> None:
    await store.add(
        [
            trace("Where did you move last spring?", speaker="assistant", name="Aria"),
            trace("Lisbon, near the river.", OCT14 + 30),
            trace("Unrelated chatter about cats.", OCT14 + 60),
            trace("A day later: we moved the sofa.", OCT14 + DAY),
            trace("A reply that is not a neighbour.", OCT14 + DAY + 7200),
        ]
    )
    got = await block(store, "Where did you move?")
    assert "Lisbon, near the river." in got
    assert "Where did you move last spring?" in got
    assert "not a neighbour" not in got  # two hours after the nearest match


async def test_the_reply_to_a_question_ranks_with_the_question(store: TraceStore) -> None:
    await store.add([trace(f"filler line {i} about nothing", OCT14 + i * DAY) for i in range(20)])
    await store.add(
        [
            trace("Do you like jazz?", OCT14, speaker="assistant"),
            trace("Mostly old records.", OCT14 + 30),
            trace("jazz came up again as we talked about the weather and the garden", NOW - DAY),
        ]
    )
    rows = await rank(store, soul="aria", scopes=[ALICE], query="jazz")
    assert [r.text for r in rows] == [
        "Mostly old records.",  # the whole score of the question it answers, and newer
        "Do you like jazz?",
        "jazz came up again as we talked about the weather and the garden",
    ]  # the filler before the question was said days earlier: no neighbour


async def test_rare_words_outrank_common_ones(store: TraceStore) -> None:
    await store.add([trace(f"morning walk number {i}", OCT14 + i) for i in range(30)])
    await store.add([trace("saw a heron", OCT14 + 3 * DAY)])
    await store.add([trace("morning walk again", OCT14 + 4 * DAY)])
    got = await block(store, "the heron on the morning walk", budget=20)
    assert got == "[user, 23 days ago, 2026-10-17] saw a heron"


async def test_a_word_counts_once_and_neighbours_words_add_up(store: TraceStore) -> None:
    await store.add([trace(f"filler line {i} about nothing", OCT14 + i * DAY) for i in range(20)])
    await store.add(
        [
            trace("jazz night", NOW - 9 * DAY),
            trace("jazz club", NOW - 9 * DAY + 30),  # jazz twice in a row: no extra
            trace("jazz bar", NOW - 5 * DAY),
            trace("kayak trip", NOW - 3 * DAY),
            trace("went out", NOW - 3 * DAY + 30),  # between kayak and lisbon: half of both
            trace("lisbon trip", NOW - 3 * DAY + 60),
            trace("kayak sale", NOW - 2 * DAY),
        ]
    )
    rows = await rank(store, soul="aria", scopes=[ALICE], query="jazz")
    assert [r.text for r in rows] == ["jazz bar", "jazz club", "jazz night"]  # ties: newest
    rows = await rank(store, soul="aria", scopes=[ALICE], query="kayak lisbon")
    assert [r.text for r in rows][:4] == [
        "lisbon trip",  # the rarer word, and a quarter of kayak
        "kayak trip",
        "went out",  # half of kayak and half of lisbon: more than kayak alone
        "kayak sale",
    ]


async def test_a_long_reply_ranks_by_the_chunks_it_fills(store: TraceStore) -> None:
    essay = " ".join(f"Point {i}: a bar with live music and a quiet corner." for i in range(40))
    await store.add([trace(f"filler line {i} about nothing", OCT14 + i * DAY) for i in range(20)])
    await store.add(
        [
            trace("Do you know a good jazz bar?", NOW - 4 * DAY),
            trace(essay, NOW - 4 * DAY + 30, speaker="assistant", name="Aria"),
            trace("jazz on the radio all morning", NOW - 2 * DAY),
        ]
    )
    assert len(essay) > 3 * CHUNK_CHARS
    rows = await rank(store, soul="aria", scopes=[ALICE], query="jazz bar")
    assert [r.text for r in rows] == [
        "Do you know a good jazz bar?",
        "jazz on the radio all morning",
        essay,  # the question's words, whole, but over four chunks of the budget
    ]
    got = await block(store, "jazz bar", budget=100)
    assert "jazz bar?" in got and "radio" in got and "Point 0" not in got
