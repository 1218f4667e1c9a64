"""A page's size cap: what stays, what moves to parts, nothing lost or reworded."""

from __future__ import annotations

import pytest

from bot.memory.pagesize import (
    fit,
    pack,
    part_id,
    part_number,
    tokens,
    with_part_links,
    without_part_links,
)

CAP = 100


def words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize(
    "body",
    [
        "\n\n".join(f"Paragraph {n}: Ann said something worth keeping." for n in range(40)),
        "\n".join(f"- fact {n} about the bakery in Porto" for n in range(80)),  # one paragraph
        "word " * 500,  # one line
        "x" * 2000,  # one word
    ],
)
def test_a_body_over_its_cap_keeps_its_newest_part_and_moves_the_rest(body: str) -> None:
    kept, moved = fit(body, CAP)
    assert tokens(kept) <= CAP and moved
    assert all(tokens(unit) <= CAP for unit in moved)
    parts = pack(None, moved, CAP)
    assert all(tokens(part) <= CAP for part in parts)
    assert "".join(words("".join(parts) + kept)) == "".join(words(body))  # all of it, in order


def test_a_body_under_its_cap_stays_whole() -> None:
    assert fit("short\n\npage", CAP) == ("short\n\npage", [])


def test_the_newest_part_is_filled_before_a_new_one() -> None:
    assert pack("old", ["a", "b"], CAP) == ["old\n\na\n\nb"]
    assert pack("o" * 390, ["a" * 20], CAP) == ["o" * 390, "a" * 20]


def test_part_links_and_ids() -> None:
    body = with_part_links("Body", "entities/ann", 3)
    assert body == "Body\n\nEarlier notes: [[entities/ann/part-3]]\n"
    assert without_part_links(body) == "Body"
    assert with_part_links("Body", "entities/ann", 0) == "Body\n"
    assert part_number("entities/ann", part_id("entities/ann", 12)) == 12
    assert part_number("entities/ann", "entities/ann/notes") is None
    assert part_number("entities/ann", "entities/bob/part-1") is None
