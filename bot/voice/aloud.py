"""What of an answer is read aloud, and in which parts.

`aloud` turns the model's Markdown into words to say: a code block is never
read (it becomes "(code in the text)"), nor is a link's address (a link says
its words; a bare address "(link in the text)"); emphasis, headings, quote
marks, list bullets, table rules and HTML tags are dropped, their words kept.
An answer that is nothing but code and addresses has nothing to say ("").
`parts` cuts a long script at sentence ends (else at words) into parts of at
most `max_chars` characters, one speech request each.
"""

from __future__ import annotations

import re

CODE_SAID = "(code in the text)"
LINK_SAID = "(link in the text)"

_FENCE = re.compile(r"^[ \t]*(```|~~~)[^\n]*\n.*?(?:^[ \t]*\1[ \t]*$|\Z)", re.M | re.S)
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_URL = re.compile(r"<?\b(?:https?://|www\.)[^\s<>()]*[^\s<>().,;:!?'\"]>?")
_INLINE_CODE = re.compile(r"`+([^`\n]+)`+")
_TAG = re.compile(r"</?[A-Za-z][^>\n]*>")
_HEADING = re.compile(r"^[ \t]*#{1,6}[ \t]+", re.M)
_QUOTE = re.compile(r"^[ \t]*(?:>[ \t]?)+", re.M)
_BULLET = re.compile(r"^[ \t]*[-*+][ \t]+", re.M)
_RULE = re.compile(
    r"^[ \t]*(?:(?:[-*_][ \t]*){3,}|\|?[ \t:|-]*-{3,}[ \t:|-]*\|?[ \t]*)(?:\n|\Z)", re.M
)
_EMPHASIS = re.compile(r"(?<![\w*~])(\*\*|__|~~|\*|_)(?=\S)(.+?)(?<=\S)\1(?![\w*~])")
_PIPES = re.compile(r"[ \t]*\|[ \t]*")
_SENTENCE = re.compile(r"(?<=[.!?…\u3002\uff01\uff1f])[\"')\]]*\s+|\n\s*\n")


def aloud(text: str) -> str:
    """The words of `text` to say; see the module docstring. "" when nothing
    is left to say."""
    text = _FENCE.sub(CODE_SAID, text)
    text = _IMAGE.sub(lambda m: m[1], text)
    text = _LINK.sub(lambda m: m[1], text)
    text = _URL.sub(LINK_SAID, text)
    text = _INLINE_CODE.sub(lambda m: m[1], text)
    text = _TAG.sub("", text)
    text = _RULE.sub("", text)
    for pattern in (_HEADING, _QUOTE, _BULLET):
        text = pattern.sub("", text)
    for _ in range(3):  # nested emphasis: ***both***, **_both_**
        text = _EMPHASIS.sub(lambda m: m[2], text)
    lines = [_PIPES.sub(", ", line).strip(", ") for line in text.splitlines()]
    text = "\n".join(line.strip() for line in lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    text = re.sub(rf"(?:{re.escape(CODE_SAID)}\s*){{2,}}", CODE_SAID + "\n", text)
    words = text.replace(CODE_SAID, "").replace(LINK_SAID, "")
    return text.strip() if re.search(r"\w", words) else ""


def parts(script: str, max_chars: int) -> list[str]:
    """`script` cut into parts of at most `max_chars` characters: at sentence
    ends and paragraph breaks, a sentence longer than that at words, a word
    longer than that wherever it must."""
    pieces: list[str] = []
    for sentence in _SENTENCE.split(script):
        sentence = sentence.strip()
        while len(sentence) > max_chars:
            cut = sentence.rfind(" ", 0, max_chars + 1)
            cut = cut if cut > 0 else max_chars
            pieces.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if sentence:
            pieces.append(sentence)
    out: list[str] = []
    for piece in pieces:
        if out and len(out[-1]) + 1 + len(piece) <= max_chars:
            out[-1] += " " + piece
        else:
            out.append(piece)
    return out
