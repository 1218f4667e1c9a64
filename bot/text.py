"""Text that crosses a boundary, made text every store and platform takes.

Python's `str` holds what no UTF-8 can encode (a lone surrogate: a JSON
`"\\ud800"` decodes to one) and what PostgreSQL's `text` refuses (NUL). Both
arrive from outside: in a person's message (the router cleans it, with more)
and in the model's answer (the model client cleans it with `model_text`).
"""

from __future__ import annotations

import re

_SURROGATE = re.compile(r"[\ud800-\udfff]")


def valid(text: str) -> str:
    """`text` with every lone surrogate (no UTF-8 can encode it) replaced by
    U+FFFD; a pair that came as two code points becomes the one it encodes."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def model_text(text: str) -> str:
    """A model's text as it may be stored and sent: `valid`, without NUL."""
    return valid(text).replace("\x00", "")
