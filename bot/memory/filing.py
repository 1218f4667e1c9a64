"""Filing new notes on wiki pages: the first step of a compile.

A trace with entities (from `memory import`) goes to `entities/<name>` for each
of them, with no model call. The others go to the model in batches of at most
BATCH notes, one forced `file_notes` call a batch: the answer names pages and,
for each, the numbers of the notes it takes, and a one-line summary for a new
page. The answer is a suggestion; what lands is checked. A page id is taken
when it is a page the wiki has (not a log, nor the heartbeat's `self`) or a new
`entities/<name>` or `concepts/<topic>` (the name put in lower case with
hyphens, then held to the page-id rule). A note filed on a refused id, or on no
page at all, goes to DEFAULT_PAGE, and the compile's conflicts say so: no note
is ever left out of the wiki because the answer was wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bot import prompts
from bot.memory.pageid import is_wiki_page_id, page_type
from bot.memory.store import Trace
from bot.model.client import ModelClient
from bot.model.usage import CallContext
from bot.soul.persona import slugify

DEFAULT_PAGE = "concepts/notes"
BATCH = 40  # notes per filing call
NOTE_CHARS = 400  # a note is shown cut to this many characters for filing
SUMMARY_CHARS = 160
_NEW_FOLDERS = ("entities", "concepts")
_NOT_FILED_ON = ("self",)  # the heartbeat's page of a private wiki
_NON_WORD = re.compile(r"[\W_]+")

FILE_TOOL: dict[str, Any] = {
    "name": "file_notes",
    "description": prompts.FILE_TOOL_DESCRIPTION,
    "input_schema": {
        "type": "object",
        "properties": {
            "pages": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {
                            "type": "string",
                            "description": "entities/<name> or concepts/<topic>",
                        },
                        "summary": {"type": "string", "description": "one line, for a new page"},
                        "notes": {"type": "array", "items": {"type": "integer"}},
                    },
                    "required": ["id", "notes"],
                },
            }
        },
        "required": ["pages"],
    },
}


def page_name(name: str) -> str:
    """A page name for `name`: its Latin slug (`Zoë Ünal` -> `zoe-unal`), else
    its words in lower case joined by hyphens (`张伟` stays `张伟`); "" when it
    has no letter or digit."""
    return slugify(name) or _NON_WORD.sub("-", name.casefold()).strip("-")


def filed_id(raw: object, existing: Iterable[str]) -> str | None:
    """The page id an answer's `raw` names: a page of `existing` as it is
    (logs and `self` excepted), or a new `entities/<name>` or `concepts/<name>`
    with its name made a page name; None when it is neither or breaks the
    page-id rule."""
    if not isinstance(raw, str):
        return None
    wanted = raw.strip().removesuffix(".md")
    if wanted in existing and page_type(wanted) != "log" and wanted not in _NOT_FILED_ON:
        return wanted
    folder, sep, name = wanted.partition("/")
    if not sep or folder not in _NEW_FOLDERS or "/" in name:
        return None
    page_id = f"{folder}/{page_name(name)[:100].strip('-')}"
    return page_id if page_id != f"{folder}/" and is_wiki_page_id(page_id) else None


@dataclass
class Filing:
    """Where the notes of a compile go: page id -> traces (oldest first), the
    summaries the answer gave new pages, and what was refused."""

    pages: dict[str, list[Trace]] = field(default_factory=dict)
    summaries: dict[str, str] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    _seen: set[tuple[str, int]] = field(default_factory=set)

    def add(self, page_id: str, trace: Trace) -> None:
        if (page_id, trace.id) not in self._seen:
            self._seen.add((page_id, trace.id))
            self.pages.setdefault(page_id, []).append(trace)


def note_line(number: int, trace: Trace) -> str:
    """`[n] [YYYY-MM-DD, who] text`, the text on one line and cut to NOTE_CHARS."""
    when = datetime.fromtimestamp(trace.created_at, UTC).strftime("%Y-%m-%d")
    who = trace.name or trace.speaker or "someone"
    text = " ".join(trace.text.split())
    if len(text) > NOTE_CHARS:
        text = text[:NOTE_CHARS].rstrip() + " ..."
    return f"[{number}] [{when}, {who}] {text}"


def _summary(value: object) -> str:
    if not isinstance(value, str):
        return ""
    line = " ".join(value.split())
    return line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 3].rstrip() + "..."


class Filer:
    """Files the notes of one compile (see the module's docstring)."""

    def __init__(self, model: ModelClient, max_tokens: int) -> None:
        self._model = model
        self._max_tokens = max_tokens

    async def file(
        self, ctx: CallContext, traces: Sequence[Trace], catalog: Mapping[str, str]
    ) -> Filing:
        """Where each of `traces` goes, given the wiki's pages (`catalog`: id ->
        summary). Raises BudgetExceeded, ModelError (the compile stops)."""
        filing = Filing()
        asked: list[Trace] = []
        for trace in traces:
            names = [n for n in (page_name(e) for e in trace.entities) if n]
            ids = [f"entities/{n}" for n in names if is_wiki_page_id(f"entities/{n}")]
            for page_id in ids:
                filing.add(page_id, trace)
            if not ids:
                asked.append(trace)
        for start in range(0, len(asked), BATCH):
            known = {**catalog, **filing.summaries}
            known.update((page_id, known.get(page_id, "")) for page_id in filing.pages)
            await self._file_batch(ctx, asked[start : start + BATCH], known, filing)
        for items in filing.pages.values():
            items.sort(key=lambda t: t.id)
        return filing

    async def _file_batch(
        self, ctx: CallContext, batch: Sequence[Trace], known: Mapping[str, str], filing: Filing
    ) -> None:
        listed = [
            f"- {page_id}: {summary}"
            for page_id, summary in sorted(known.items())
            if page_type(page_id) != "log" and page_id not in _NOT_FILED_ON
        ]
        text = prompts.FILE_USER.format(
            catalog="\n".join(listed) or prompts.FILE_NO_PAGES,
            notes="\n".join(note_line(n, t) for n, t in enumerate(batch, 1)),
        )
        answer = await self._model.use_tool(
            ctx,
            [{"type": "text", "text": prompts.FILE_SYSTEM}],
            [{"role": "user", "content": [{"type": "text", "text": text}]}],
            FILE_TOOL,
            max_tokens=self._max_tokens,
        )
        entries = answer.get("pages") if isinstance(answer, dict) else None
        if not isinstance(entries, list):
            filing.conflicts.append(
                f"filing: the model filed no notes; {len(batch)} go to {DEFAULT_PAGE}"
            )
            entries = []
        filed: set[int] = set()
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            numbers = entry.get("notes")
            picked = [
                n
                for n in (numbers if isinstance(numbers, list) else [])
                if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= len(batch)
            ]
            page_id = filed_id(entry.get("id"), known)
            if page_id is None:
                filing.conflicts.append(
                    f"{str(entry.get('id'))[:80]!r}: not a page id to file on; "
                    f"its {len(picked)} notes go to {DEFAULT_PAGE}"
                )
                page_id = DEFAULT_PAGE
            elif page_id not in known and page_id not in filing.summaries:
                filing.summaries[page_id] = _summary(entry.get("summary"))
            for n in picked:
                filing.add(page_id, batch[n - 1])
                filed.add(n)
        unfiled = [t for n, t in enumerate(batch, 1) if n not in filed]
        if unfiled and entries:
            filing.conflicts.append(
                f"filing: {len(unfiled)} notes were filed on no page; they go to {DEFAULT_PAGE}"
            )
        for trace in unfiled:
            filing.add(DEFAULT_PAGE, trace)
