"""Telegram's rules for a text, as the Bot API fake (tests/fakes/telegram_fake.py)
applies them: lengths in UTF-16 code units (`utf16_len`), and the HTML parse mode
(`parse_html`: tags ``HTML_TAGS``, entities ``&lt; &gt; &amp; &quot;`` and numeric
ones, a stray ``&`` is literal), which gives the plain text a message carries.
"""

from __future__ import annotations

import re

HTML_TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "code", "pre", "a"}
    | {"tg-spoiler", "tg-emoji", "blockquote", "span"}
)
HTML_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}

_ENTITY = re.compile(r"&(#x[0-9a-fA-F]+|#[0-9]+|[a-zA-Z]+);")
_TAG_NAME = re.compile(r"[^\s>]*")


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units, the unit of Telegram's limits and offsets."""
    return len(text.encode("utf-16-le")) // 2


def _decode_entity(name: str) -> str | None:
    if not name.startswith("#"):
        return HTML_ENTITIES.get(name)
    code = int(name[2:], 16) if name[1] in "xX" else int(name[1:])
    if 0 < code < 0x110000 and not 0xD800 <= code < 0xE000:
        return chr(code)
    return None


def _tag_end(text: str, start: int) -> int:
    """Index of the ``>`` closing the tag opened at ``start`` (quotes respected), or -1."""
    quote = ""
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c == ">":
            return i
    return -1


def parse_html(text: str) -> str:
    """Parse ``text`` as Telegram's HTML parse mode does and return the plain text.

    Checks only what Telegram's parser checks (supported tags, nesting, closing);
    attribute values are not validated. Raises ValueError with Telegram's wording.
    """
    out: list[str] = []
    stack: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "&" and (m := _ENTITY.match(text, i)) and (ch := _decode_entity(m[1])):
            out.append(ch)
            i = m.end()
            continue
        if c != "<":
            out.append(c)
            i += 1
            continue
        at = len(text[:i].encode())
        end = _tag_end(text, i)
        if text.startswith("</", i):
            if not stack:
                raise ValueError(f"Unexpected end tag at byte offset {at}")
            if end < 0:
                raise ValueError(f"Unclosed end tag at byte offset {at}")
            name = text[i + 2 : end].strip().lower()
            if name and name != stack[-1]:
                raise ValueError(
                    f'Unmatched end tag at byte offset {at}, expected "</{stack[-1]}>", '
                    f'found "</{name}>"'
                )
            stack.pop()
        else:
            m = _TAG_NAME.match(text, i + 1)
            name = m[0].lower() if m else ""
            if i + 1 + len(name) < len(text) and name not in HTML_TAGS:
                raise ValueError(f'Unsupported start tag "{name}" at byte offset {at}')
            if end < 0:
                raise ValueError(f"Unclosed start tag at byte offset {at}")
            stack.append(name)
        i = end + 1
    if stack:
        raise ValueError(f'Can\'t find end tag corresponding to start tag "{stack[-1]}"')
    return "".join(out)
