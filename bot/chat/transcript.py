"""A conversation as text for the model: the heartbeat's and the compaction's
transcripts.

One line per message, its speaker's label first. A message's own line
breaks, separators and control characters (categories Cc, Zl and Zp: all
that `str.splitlines` or a reader could take for the end of a line) are shown
as visible escapes (`\\n`, `\\r`, `\\t`, `\\u2028`), so no message can open a
line that reads as another speaker's, the soul's own included.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

_ESCAPED = frozenset({"Cc", "Zl", "Zp"})
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if unicodedata.category(char) not in _ESCAPED:
        return char
    return _SHORT.get(char) or f"\\u{ord(char):04x}"


def one_line(text: str) -> str:
    """`text` with every control character and line or paragraph separator
    replaced by its visible escape; other characters are kept as they are."""
    return "".join(map(_escape, text))


def transcript(messages: Iterable[tuple[str, str]]) -> str:
    """The (speaker, text) pairs as `speaker: text` lines, one line each, in order."""
    return "\n".join(f"{one_line(speaker)}: {one_line(text)}" for speaker, text in messages)
