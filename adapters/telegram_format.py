"""The model's Markdown as Telegram HTML (parse_mode HTML).

Covers what chat replies use: fenced code blocks (with their language),
`inline code`, **bold** / __bold__, *italic* / _italic_, ~~strike~~,
[links](https://...) and `#` headings (bold lines), and CommonMark's backslash
escapes outside code (a backslash before `*` makes it a literal `*`: this is how
command replies show names and other user-controlled text as typed). Everything
else is text, escaped. When Telegram still refuses the entities, the adapter
sends the chunk as plain text: a reply is never lost to formatting.
"""

from __future__ import annotations

import html
import re

_FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+#.-]*)\s*$")
# A backslash escape (of ASCII punctuation) or a code span, whichever starts first:
# an escaped backtick opens no span, and a backslash inside a span is literal.
_ESCAPE_OR_CODE = re.compile(r"\\([!-/:-@\[-`{-~])|`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(
    r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])|(?<!\w)_(?=\S)(.+?)(?<=\S)_(?!\w)"
)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
_TAG = re.compile(r"<(/?)(b|i|s)>")
_SLOT = "\x00{}\x00"
_SLOT_REF = re.compile("\x00(\\d+)\x00")


def _inline(line: str) -> str:
    """One line of prose: escaped, with inline formatting as tags."""
    kept: list[str] = []

    def keep(fragment: str) -> str:
        kept.append(fragment)
        return _SLOT.format(len(kept) - 1)

    def escape_or_code(m: re.Match[str]) -> str:
        if m[1] is not None:
            return keep(html.escape(m[1], quote=False))
        return keep(f"<code>{html.escape(m[2], quote=False)}</code>")

    line = source = line.replace("\x00", "")
    line = _ESCAPE_OR_CODE.sub(escape_or_code, line)
    line = _LINK.sub(
        lambda m: keep(f'<a href="{html.escape(m[2])}">{html.escape(m[1], quote=False)}</a>'), line
    )
    line = html.escape(line, quote=False)
    line = _BOLD.sub(lambda m: f"<b>{m[1] or m[2]}</b>", line)
    line = _ITALIC.sub(lambda m: f"<i>{m[1] or m[2]}</i>", line)
    line = _STRIKE.sub(lambda m: f"<s>{m[1]}</s>", line)
    if not _nested(line):  # overlapping marks such as **a *b** c*: no formatting
        unescaped = _ESCAPE_OR_CODE.sub(lambda m: m[1] if m[1] is not None else m[0], source)
        return html.escape(unescaped, quote=False)
    heading = _HEADING.match(line)
    if heading:
        line = f"<b>{heading[1]}</b>"
    while _SLOT_REF.search(line):  # a kept link may hold kept escapes and code
        line = _SLOT_REF.sub(lambda m: kept[int(m[1])], line)
    return line


def _nested(line: str) -> bool:
    """Whether the tags we added close in the order they opened."""
    opened: list[str] = []
    for closing, name in _TAG.findall(line):
        if not closing:
            opened.append(name)
        elif not opened or opened.pop() != name:
            return False
    return not opened


def to_html(markdown: str) -> str:
    """Telegram HTML for a chunk of Markdown (its fences balanced)."""
    out: list[str] = []
    code: list[str] | None = None
    language = ""
    for line in markdown.split("\n"):
        fence = _FENCE.match(line)
        if code is None and fence:
            code, language = [], fence[2]
        elif code is not None and fence and not fence[2]:
            out.append(_pre(code, language))
            code = None
        elif code is not None:
            code.append(line)
        else:
            out.append(_inline(line))
    if code is not None:  # an unclosed fence: the rest is code
        out.append(_pre(code, language))
    return "\n".join(out)


def _pre(lines: list[str], language: str) -> str:
    body = html.escape("\n".join(lines), quote=False)
    if language:
        return f'<pre><code class="language-{html.escape(language)}">{body}</code></pre>'
    return f"<pre>{body}</pre>"
