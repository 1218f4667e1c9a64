"""A page's size cap (`memory.page_max_tokens`) and what happens past it.

The compile asks the model to keep a page under its cap. A body still over it
keeps its newest paragraphs, at most KEEP of the cap, and the oldest move, in
order, to the page's part pages `<id>/part-<n>`: onto the newest part while it
fits under the cap, else onto a new one. Nothing is dropped or reworded; the
page ends with a line linking its newest part, and each part one linking the
part before it, so no page grows with the number of parts. A paragraph larger than a third of
the cap is moved line by line, and a line larger than that is cut at spaces.
"""

from __future__ import annotations

import re

from bot import prompts
from bot.memory.pageid import is_wiki_page_id

KEEP = 2 / 3  # of the cap, what a page keeps when it is cut
_PART = re.compile(r"part-(\d+)")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_LINK_PREFIX = prompts.PART_LINK.split("{", 1)[0]


def tokens(text: str) -> int:
    """A token count of `text`: characters / 4, rounded up (the estimate the
    budgets use)."""
    return -(-len(text) // 4)


def part_id(page_id: str, number: int) -> str:
    return f"{page_id}/part-{number}"


def part_number(page_id: str, other: str) -> int | None:
    """n when `other` is part n of `page_id`, else None."""
    head, sep, name = other.rpartition("/")
    match = _PART.fullmatch(name) if sep and head == page_id else None
    return int(match.group(1)) if match else None


def without_part_links(body: str) -> str:
    """`body` without its line of links to part pages (the compile writes it anew)."""
    lines = [line for line in body.split("\n") if not line.startswith(_LINK_PREFIX)]
    return "\n".join(lines).strip()


def with_part_links(body: str, page_id: str, newest: int) -> str:
    """`body` ending with the link to part `newest` of `page_id` (none for 0):
    a page links its newest part, each part the one before it."""
    if not newest:
        return body.strip() + "\n"
    link = prompts.PART_LINK.format(link=f"[[{part_id(page_id, newest)}]]")
    return body.strip() + "\n\n" + link + "\n"


def _cut(line: str, limit: int) -> list[str]:
    """`line` cut at spaces into pieces of at most `limit` tokens (anywhere, in
    a word longer than that)."""
    pieces = []
    while tokens(line) > limit:
        cut = line.rfind(" ", 0, limit * 4)
        cut = cut if cut > 0 else limit * 4
        pieces.append(line[:cut].rstrip())
        line = line[cut:].lstrip()
    return [*pieces, line] if line.strip() else pieces


def _units(body: str, limit: int) -> list[tuple[str, str]]:
    """`body` as (what joins it to the one before, text) units of at most
    `limit` tokens: paragraphs; a larger one's lines; a larger line's pieces."""
    units: list[tuple[str, str]] = []
    for paragraph in _PARAGRAPH_BREAK.split(body.strip()):
        lines = [paragraph] if tokens(paragraph) <= limit else paragraph.split("\n")
        for n, line in enumerate(lines):
            for m, piece in enumerate(_cut(line, limit)):
                units.append(("\n\n" if n == m == 0 else "\n" if m == 0 else " ", piece))
    return units


def _join(units: list[tuple[str, str]]) -> str:
    return "".join((joiner if n else "") + text for n, (joiner, text) in enumerate(units))


def fit(body: str, cap: int) -> tuple[str, list[str]]:
    """(what stays on a page, the blocks that move to its parts, oldest first,
    each at most `cap` tokens) for a page `body` (without its part link) and
    a cap in tokens. What moves keeps its line breaks; blocks are joined by
    paragraph breaks."""
    if tokens(body) <= cap:
        return body, []
    units = _units(body, max(1, cap // 3))
    keep = int(cap * KEEP)
    cut = 0
    while cut < len(units) - 1 and tokens(_join(units[cut:])) > keep:
        cut += 1
    blocks: list[list[tuple[str, str]]] = []
    for unit in units[:cut]:
        if blocks and tokens(_join([*blocks[-1], unit])) <= cap:
            blocks[-1].append(unit)
        else:
            blocks.append([unit])
    return _join(units[cut:]), [_join(block) for block in blocks]


def pack(last_part: str | None, moved: list[str], cap: int) -> list[str]:
    """The bodies of the parts after `moved` lands: the newest part's body
    (`last_part`, None when there is none) filled up to `cap`, then new parts.
    The first body returned replaces `last_part` when that was given."""
    bodies: list[str] = [last_part.strip()] if last_part and last_part.strip() else [""]
    for unit in moved:
        if not bodies[-1] or tokens(bodies[-1] + "\n\n" + unit) <= cap:
            bodies[-1] = f"{bodies[-1]}\n\n{unit}" if bodies[-1] else unit
        else:
            bodies.append(unit)
    return bodies


def parts_can_be_named(page_id: str) -> bool:
    """Whether the part ids of `page_id` keep the page-id rule (a long id's may not)."""
    return is_wiki_page_id(part_id(page_id, 1_000_000))
