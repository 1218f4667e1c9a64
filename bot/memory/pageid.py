"""Wiki page ids: the rule, the path an id names, and what an id implies.

A page id is its path under `memory/` without `.md`, with `/` between folders:
`entities/johnny` is `memory/entities/johnny.md`. An id is one or more names
joined by `/`. No name is empty or starts with a dot (so `.` and `..` are never
names), starts or ends with a space, or ends with a dot (Windows drops both);
the id holds no backslash, colon, `"`, `*`, `<`, `>`, `?` or `|` (Windows
refuses them) and no control character (Unicode category Cc: C0, DEL, C1, NUL
among them); it is at most 512 characters (code points), each name at most 200
bytes in UTF-8 (with `.md` a file name stays under Linux's 255 bytes), and it
is not `index` in any case, which names the catalog (`entities/index` is fine).
The checks are on the path the id names, never on where a link there leads.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from typing import TypeGuard

from bot.errors import InvalidWikiPageIdError

MAX_ID_CHARS = 512
MAX_NAME_BYTES = 200
CATALOG_ID = "index"

_FORBIDDEN = {
    "\\": "a backslash",
    ":": "a colon",
    '"': "a double quote",
    "*": "an asterisk",
    "<": "a '<'",
    ">": "a '>'",
    "?": "a question mark",
    "|": "a '|'",
}
_FOLDER_TYPES = {"entities": "entity", "log": "log"}


def _problem(page_id: object) -> str | None:
    """Which rule `page_id` breaks, in words; None when it breaks none."""
    if not isinstance(page_id, str):
        return f"it is {type(page_id).__name__}, not text"
    if not page_id:
        return "it is empty"
    if len(page_id) > MAX_ID_CHARS:
        return f"it is {len(page_id)} characters long; the limit is {MAX_ID_CHARS}"
    try:
        page_id.encode("utf-8")
    except UnicodeEncodeError:
        return "it is not valid Unicode (it holds a lone surrogate)"
    for char in page_id:
        if unicodedata.category(char) == "Cc":
            return f"it holds a control character (U+{ord(char):04X})"
        if char in _FORBIDDEN:
            return f"it holds {_FORBIDDEN[char]}, which Windows refuses in a name"
    for name in page_id.split("/"):
        if not name:
            return "it has an empty name (a leading, trailing or doubled '/')"
        if name.startswith("."):
            return f"the name {name!r} starts with a dot"
        if name.startswith(" ") or name.endswith(" "):
            return f"the name {name!r} starts or ends with a space"
        if name.endswith("."):
            return f"the name {name!r} ends with a dot"
        size = len(name.encode("utf-8"))
        if size > MAX_NAME_BYTES:
            return f"a name is {size} bytes in UTF-8; the limit is {MAX_NAME_BYTES}"
    if page_id.casefold() == CATALOG_ID:
        return "'index' (in any case) names the catalog, not a page"
    return None


def is_wiki_page_id(page_id: object) -> TypeGuard[str]:
    """Whether `page_id` is text that keeps every rule of a page id."""
    return _problem(page_id) is None


def check_page_id(page_id: object) -> None:
    """Raise InvalidWikiPageIdError, naming the rule broken, unless `page_id`
    is a valid page id."""
    problem = _problem(page_id)
    if problem is not None:
        raise InvalidWikiPageIdError(str(page_id), problem)


def page_path(root: Path, page_id: str) -> Path:
    """The file of page `page_id` in the wiki folder `root` (`<root>/<id>.md`).

    Checks the id, then that the path it names lies inside `root`, comparing
    the paths lexically: no link on the way is resolved. Raises
    InvalidWikiPageIdError for an id that fails either check.
    """
    check_page_id(page_id)
    path = root / f"{page_id}.md"
    base = os.path.normpath(root.absolute())
    named = os.path.normpath(path.absolute())
    # The id rule already keeps every path inside; this is the seed's second check.
    if os.path.commonpath([base, named]) != base:
        raise InvalidWikiPageIdError(page_id, "it names a path outside memory/")
    return path


def page_type(page_id: str) -> str:
    """`entity` for a page under `entities/`, `log` under `log/`, else `concept`."""
    folder, sep, _ = page_id.partition("/")
    return _FOLDER_TYPES.get(folder, "concept") if sep else "concept"


def default_summary(page_id: str) -> str:
    """The summary a created page gets, named from its id and never from a trace.

    `concepts/notes` -> `Notes compiled from conversations`; `entities/johnny`
    -> `Notes on johnny compiled from conversations`; `log/2026-11-07` ->
    `Conversation log of 2026-11-07`. The name is the id without its leading
    `entities/`, `concepts/` or `log/` folder. Raises InvalidWikiPageIdError
    for an invalid id.
    """
    check_page_id(page_id)
    folder, sep, rest = page_id.partition("/")
    name = rest if sep and folder in ("entities", "concepts", "log") else page_id
    if page_type(page_id) == "log":
        return f"Conversation log of {name}"
    if page_type(page_id) == "concept" and name.casefold() == "notes":
        return "Notes compiled from conversations"
    return f"Notes on {name} compiled from conversations"
