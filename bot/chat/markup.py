"""User-controlled text as plain text in a reply.

Replies are Markdown: Telegram's adapter turns them into HTML, Discord renders
them itself. A display name such as `[Approve me](https://evil.example)` would
become a link there, so every string a command reply shows that soulbot did not
write itself (names, words typed as arguments, error messages) goes through
`plain`: each Markdown character gets a backslash (CommonMark's escape, which
both renderers honour) and the text becomes one line. A bare URL stays a
visible URL (both platforms link those themselves); it can no longer hide
behind other words.
"""

from __future__ import annotations

import re
import unicodedata

# Links, code, emphasis, strike, spoilers, quotes, headings, Discord's <@id> <#id> <t:..>.
_MARKUP = re.compile(r"([\\`*_~|\[\]()<>#])")
# At the start of a line: a list item, Discord's `-#` small text.
_LEADING = ("-", "+")
_KEPT_FORMAT = "\u200d"  # the zero-width joiner inside emoji sequences


def _visible(char: str) -> bool:
    """Not a control or format character (line breaks, bidi overrides, ...)."""
    return char in _KEPT_FORMAT or unicodedata.category(char) not in ("Cc", "Cf")


def plain(text: str) -> str:
    """`text` escaped so that no Markdown in it renders, on one line: every
    run of whitespace (line breaks included) is one space, and control and
    format characters are dropped."""
    line = " ".join("".join(c for c in text if c.isspace() or _visible(c)).split())
    escaped = _MARKUP.sub(r"\\\1", line)
    return "\\" + escaped if escaped.startswith(_LEADING) else escaped
