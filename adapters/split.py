"""Cutting a long reply into chunks a platform accepts.

Discord takes 2,000 characters a message, Telegram 4,096 UTF-16 code units
(`utf16_len`). `split_message` cuts a reply into chunks that each measure at
most the limit, and never leaves a code fence open in a chunk.

Where a chunk ends: the best kind of break that lies in the second half of the
room the limit leaves, and the last of that kind, so chunks come out full:

1. a paragraph break outside code: a blank line, just before a fence opens or
   just after one closes (so a block that fits whole is kept whole);
2. a line break, inside code too;
3. the space between two words.

With no break in the second half, the last break of any kind; with none at all
(one huge word), a hard cut as late as fits. A hard cut never splits a
surrogate pair, and splits a character from its combining marks, joiners or
emoji modifiers only when nothing else fits. A cut never leaves the rest of a
line starting with backticks or tildes that would read as a fence, unless the
limit is so close to `MIN_LIMIT` that nothing else fits.

Fences: a line starting, after any indentation, with three or more backticks
or tildes opens a fence, unless backticks follow the run (inline code such as
"```x```"). Inside, a line starting with at least as many of the same
character closes it, whatever follows on the line (chat clients read it so).
A chunk that ends inside a fence gets a closing line ("\n```"), and the next
chunk starts by reopening the fence with the same opening line ("```python\n");
both count towards the limit. A fence still open at the end is closed too. A
fence line too long to be reopened within the limit, with room to spare, is read
as text. Cutting just after an opening line or just before a closing one (an
empty block) is the last resort.

Whitespace: every line loses its trailing whitespace and the reply its leading
and trailing whitespace (clients trim messages anyway). At a cut the whitespace
on both sides is dropped, except that a chunk starting inside a fence keeps the
indentation of its first code line, which is content. So every chunk starts and
ends with a visible character (or a fence line), and the visible characters of
the reply all come out, in order, with only the added fence lines between.

`measure` must not shrink when a string grows and should count each character
as at least 1 (`len`, `utf16_len` and UTF-8 byte counts do); when it does not,
chunks are less full but still within the limit.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MIN_LIMIT = 16
"""The smallest limit: room to reopen a "```python" fence (9) and close it (3) around
one astral character (2), with the two line breaks (2)."""

Measure = Callable[[str], int]

_FENCE_LINE = re.compile(r"^[^\S\n]*(`{3,}|~{3,})(.*)$", re.MULTILINE)
_WORD_GAP = re.compile(r"(?<=\S)[^\S\n]+(?=\S)(?!```|~~~)")  # not before a fence-like run
_LINE_END = re.compile(r"(?<=\S)\n")
_BEFORE_BLANK = re.compile(r"(?<=\S)\n(?=\n)")
_VISIBLE = re.compile(r"\S")
_FENCE_AHEAD = re.compile(r"[^\S\n]*(?:```|~~~)")  # a fence start later on this line
_JOINERS = frozenset("\u200d\ufe0e\ufe0f")  # zero-width joiner, text and emoji selectors

_TEXT, _OPEN, _CLOSE = 0, 1, 2  # what a line is
_STRICT, _RELAXED, _LAST_RESORT = 0, 1, 2  # how freely a word may be cut


def utf16_len(text: str) -> int:
    """The length of `text` in UTF-16 code units, as Telegram counts it.

    An astral character (most emoji) counts 2, a lone surrogate 1.
    """
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def split_message(text: str, limit: int, measure: Measure = len) -> list[str]:
    """`text` cut into chunks that each measure at most `limit` (see the module doc).

    Returns [] for empty or blank text, and one tidied chunk when it all fits.
    Non-whitespace content survives in order; the only text added is the fence
    lines that close a chunk inside code and reopen the fence in the next.

    Raises ValueError for a limit below `MIN_LIMIT`, or when `measure` makes a
    single character too long to fit (impossible with `len` or `utf16_len`).
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, not {limit}")
    return _Reply(text, limit, measure).chunks()


@dataclass(frozen=True)
class _Fence:
    """An open code fence: its run of backticks or tildes and its opening line."""

    marker: str
    opening: str

    def closed_by(self, run: str) -> bool:
        return run[0] == self.marker[0] and len(run) >= len(self.marker)


@dataclass(frozen=True)
class _FenceLine:
    """A line that looks like a fence, what it does, and the fence open after it."""

    start: int
    end: int
    kind: int
    after: _Fence | None


class _Reply:
    """The tidied text, its fence lines and the places it may break."""

    def __init__(self, text: str, limit: int, measure: Measure) -> None:
        self.limit = limit
        self.measure = measure
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self.text = "\n".join(line.rstrip() for line in lines).strip()
        self._read_fences()
        self._find_breaks()

    def _read_fences(self) -> None:
        """The lines that look like fences, in order, and what each one does."""
        self.fence_lines: list[_FenceLine] = []
        fence: _Fence | None = None
        for match in _FENCE_LINE.finditer(self.text):
            line = match.group()
            run, info = match.groups()
            kind = _TEXT
            if fence is None:
                inline = run[0] == "`" and "`" in info
                # room for the opening line, one character (2) and the closing line
                if not inline and self.measure(f"{line}\n\n{run}") + 2 <= self.limit:
                    fence = _Fence(run, line.strip())
                    kind = _OPEN
            elif fence.closed_by(run) and self._fits(fence.opening, "\n", line):
                fence = None
                kind = _CLOSE
            self.fence_lines.append(_FenceLine(match.start(), match.end(), kind, fence))
        self.fence_starts = [line.start for line in self.fence_lines]

    def _find_breaks(self) -> None:
        """The sorted break positions (the index just past a chunk's last character)."""
        text, n = self.text, len(self.text)
        # Breaks that leave an empty block: after an opening line, before a closing one.
        poor: set[int] = set()
        fence_edges: list[int] = []
        for line in self.fence_lines:
            if line.kind == _OPEN:
                if line.end < n:
                    poor.add(line.end)
                if line.start and text[line.start - 2] != "\n":
                    fence_edges.append(line.start - 1)
            elif line.kind == _CLOSE:
                if line.end < n:
                    fence_edges.append(line.end)
                before = line.start - 1
                while text[before - 1] == "\n":
                    before -= 1
                poor.add(before)
        blank_lines = [match.start() for match in _BEFORE_BLANK.finditer(text)]
        self.paragraphs = sorted(
            {
                end
                for end in blank_lines + fence_edges
                if end not in poor and self._fence_at(end) is None
            }
        )
        self.line_breaks = [
            match.start() for match in _LINE_END.finditer(text) if match.start() not in poor
        ]
        self.poor_breaks = sorted(poor)
        # Word breaks in the text between fence-like lines.
        self.word_breaks: list[int] = []
        starts = [0] + [line.end for line in self.fence_lines]
        stops = [line.start for line in self.fence_lines] + [n]
        for start, stop in zip(starts, stops, strict=True):
            self.word_breaks.extend(m.start() for m in _WORD_GAP.finditer(text, start, stop))

    def _fence_line(self, index: int) -> _FenceLine | None:
        """The last fence-like line starting at or before `index`."""
        k = bisect_right(self.fence_starts, index) - 1
        return self.fence_lines[k] if k >= 0 else None

    def _fits(self, *parts: str) -> bool:
        return self.measure("".join(parts)) <= self.limit

    def chunks(self) -> list[str]:
        chunks: list[str] = []
        pos, n = 0, len(self.text)
        fence: _Fence | None = None
        while pos < n:
            head = f"{fence.opening}\n" if fence else ""
            end = self._cut(pos, head)
            chunks.append(self._chunk(pos, end, head))
            fence = self._fence_at(end)
            pos = self._next_start(end, fence)
        return chunks

    def _chunk(self, pos: int, end: int, head: str) -> str:
        fence = self._fence_at(end)
        tail = f"\n{fence.marker}" if fence else ""
        return head + self.text[pos:end] + tail

    def _fence_at(self, end: int) -> _Fence | None:
        """The fence open at a cut just before `end`."""
        line = self._fence_line(end)
        return line.after if line else None

    def _next_start(self, end: int, fence: _Fence | None) -> int:
        """Where the chunk after a cut at `end` starts: its first visible character,
        or inside a fence the start of its line, indentation and all, when that fits."""
        visible = _VISIBLE.search(self.text, end)
        if visible is None:
            return len(self.text)
        first = visible.start()
        newline = self.text.rfind("\n", end, first)
        if fence is None or newline < 0:
            return first
        line = self.text[newline + 1 : first + 1]
        return newline + 1 if self._fits(fence.opening, "\n", line, "\n", fence.marker) else first

    def _room_end(self, pos: int, head: str) -> int:
        """The furthest end for a chunk from `pos`, fence closing aside."""
        low, high = pos, min(len(self.text), pos + self.limit)
        if self._fits(head, self.text[pos:high]):
            return high
        while high - low > 1:
            middle = (low + high) // 2
            if self._fits(head, self.text[pos:middle]):
                low = middle
            else:
                high = middle
        return low

    def _cut(self, pos: int, head: str) -> int:
        """Where the chunk starting at `pos` ends."""
        room = self._room_end(pos, head)

        def fits(end: int) -> bool:
            return self._fits(self._chunk(pos, end, head))

        if room == len(self.text) and fits(room):
            return room
        half = pos + (room - pos) // 2
        kinds = (self.paragraphs, self.line_breaks, self.word_breaks)
        for breaks in kinds:
            end = _last(breaks, max(half, pos + 1), room, fits)
            if end is not None:
                return end
        early = [_last(breaks, pos + 1, half, fits) for breaks in kinds]
        found = [end for end in early if end is not None]
        if found:
            return max(found)
        for level in (_STRICT, _RELAXED):
            end = self._hard_cut(pos, room, level, fits)
            if end is not None:
                return end
        poor = _last(self.poor_breaks, pos + 1, room, fits)
        if poor is not None:
            return poor
        end = self._hard_cut(pos, room, _LAST_RESORT, fits)
        if end is not None:
            return end
        raise ValueError(
            f"limit {self.limit} is too small for {self.text[pos]!r} "
            f"(at character {pos}) with the fence around it"
        )

    def _hard_cut(self, pos: int, room: int, level: int, fits: Callable[[int], bool]) -> int | None:
        """The last place in (pos, room] to cut a word that `level` allows and fits."""
        for end in range(room, pos, -1):
            if self._can_hard_cut(end, level) and fits(end):
                return end
        return None

    def _can_hard_cut(self, end: int, level: int) -> bool:
        """Whether a chunk may end just before `end` in the middle of a word.

        Never after whitespace, inside a surrogate pair, inside or just after an
        opening line, or inside a closing line. Below `_LAST_RESORT`, not so that
        the rest of the line starts with a fence-like run of backticks or tildes;
        at `_STRICT`, also not before a combining mark, joiner or emoji modifier,
        nor inside any other line that looks like a fence.
        """
        text = self.text
        before = text[end - 1]
        after = text[end] if end < len(text) else "\n"
        if before.isspace() or ("\ud800" <= before <= "\udbff" and "\udc00" <= after <= "\udfff"):
            return False
        line = self._fence_line(end - 1)
        if line is None or end - 1 >= line.end:
            line = None  # end - 1 is on a line that does not look like a fence
        inside = line is not None and end < line.end
        if line and (line.kind == _OPEN or (inside and line.kind == _CLOSE)):
            return False
        if level == _LAST_RESORT:
            return True
        if _FENCE_AHEAD.match(text, end):
            return False
        if level == _RELAXED:
            return True
        marks = unicodedata.category(after).startswith("M") or after in _JOINERS
        modifier = "\U0001f3fb" <= after <= "\U0001f3ff"
        return not (marks or modifier or before == "\u200d" or inside)


def _last(breaks: Sequence[int], low: int, high: int, fits: Callable[[int], bool]) -> int | None:
    """The last break in [low, high] whose chunk fits, or None."""
    k = bisect_right(breaks, high) - 1
    while k >= 0 and breaks[k] >= low:
        if fits(breaks[k]):
            return breaks[k]
        k -= 1
    return None
