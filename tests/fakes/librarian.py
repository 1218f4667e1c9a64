"""A responder for the fake model that answers soulbot's compile calls the way a
literal, careful model would, so a compile against the fake builds a wiki:

* a `file_notes` call (bot/memory/filing.py) files each note on
  `entities/<who said it>` (a new page gets the summary "What <who> said");
* a page merge (`prompts.COMPILE_SYSTEM`) answers the page as it is, then the
  new facts, one line each: nothing is dropped, nothing condensed, so a page
  grows until the compile's page cap moves its oldest paragraphs to parts.

Any other request gets None (the fake's own default answers it). Use it as
`fake.responder = librarian`, or `python -m tests.fakes.anthropic_fake --librarian`.
"""

from __future__ import annotations

import re
from typing import Any

from bot import prompts
from bot.memory.filing import page_name
from tests.fakes.anthropic_fake import Reply

_NOTE = re.compile(r"^\[(\d+)\] \[[^,\]]*, ([^\]]*)\] ", re.MULTILINE)


def _user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if block.get("type") == "text")


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system") or ""
    return system if isinstance(system, str) else "".join(b.get("text", "") for b in system)


def _file(text: str) -> Reply:
    pages: dict[str, dict[str, Any]] = {}
    for number, who in _NOTE.findall(text):
        page_id = f"entities/{page_name(who) or 'someone'}"
        entry = pages.setdefault(
            page_id, {"id": page_id, "summary": f"What {who} said", "notes": []}
        )
        entry["notes"].append(int(number))
    return Reply.of_tool_use("file_notes", {"pages": list(pages.values())})


def _merge(text: str) -> Reply:
    _, _, rest = text.partition("The page now:\n")
    page, _, rest = rest.partition("\n\nNew facts, oldest first:\n")
    facts, _, _ = rest.partition("\n\nKeep the page under ")
    page = "" if page.strip() == prompts.EMPTY_PAGE else page.strip()
    return Reply.of_text((page + "\n\n" if page else "") + facts.strip())


def librarian(body: dict[str, Any]) -> Reply | None:
    """The answer to a compile call in `body`, or None for any other request."""
    forced = (body.get("tool_choice") or {}).get("name")
    if forced == "file_notes":
        return _file(_user_text(body))
    if _system_text(body) == prompts.COMPILE_SYSTEM:
        return _merge(_user_text(body))
    return None
