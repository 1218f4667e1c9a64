"""A wiki page: its file format (YAML front matter + markdown body) and links.

PageFormatError   a page whose front matter or encoding cannot be read
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import yaml

from bot.errors import PageFormatError
from bot.memory.pageid import check_page_id, default_summary, is_wiki_page_id, page_type
from bot.storage.yamlfile import load_yaml

_LINK = re.compile(r"\[\[([^\[\]\n]+?)\]\]")
_FIELDS = ("id", "type", "summary", "updated", "sources")


class _Dumper(yaml.SafeDumper):
    """A safe dumper that double-quotes text holding NEL, LS or PS: PyYAML
    writes them raw in single quotes, and reads them back as spaces."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if any(char in value for char in "\x85\u2028\u2029") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


@dataclass(frozen=True)
class Page:
    """One wiki page. `updated` is an ISO-8601 UTC time or ""; `extra` keeps the
    front matter fields a person added, in their order, so a rewrite keeps them.
    `sources` is read from pages written before the store kept which traces a
    page folded (`memory_folds`); the compile moves them there."""

    id: str
    type: str
    summary: str
    updated: str = ""
    sources: tuple[str, ...] = ()
    body: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def new(
        cls, page_id: str, body: str = "", updated: str = "", sources: Iterable[str] = ()
    ) -> Page:
        """A page the compiler creates: its type and summary come from its id,
        never from a trace. Raises InvalidWikiPageIdError for a bad id."""
        return cls(
            page_id, page_type(page_id), default_summary(page_id), updated, tuple(sources), body
        )

    @property
    def links(self) -> tuple[str, ...]:
        """The targets of the body's `[[id]]` and `[[id|label]]` links, first
        seen first, without repeats; a target that is no valid id is left out."""
        targets: dict[str, None] = {}
        for match in _LINK.finditer(self.body):
            target = match.group(1).partition("|")[0].strip()
            if is_wiki_page_id(target):
                targets.setdefault(target)
        return tuple(targets)


def _text_field(value: Any, name: str, page_id: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, datetime):  # YAML reads an unquoted time as one
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    raise PageFormatError(page_id, f"front matter '{name}': expected text; quote the value")


def _front_matter(text: str, page_id: str) -> tuple[dict[str, Any], str]:
    first, _, rest = text.partition("\n")
    if first.rstrip() != "---":
        return {}, text
    lines = rest.split("\n")
    close = next((i for i, line in enumerate(lines) if line.rstrip() == "---"), None)
    if close is None:
        raise PageFormatError(page_id, "the front matter on line 1 is never closed by '---'")
    try:
        fields = load_yaml("\n".join(lines[:close]))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 2}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise PageFormatError(
            page_id, f"{where}invalid YAML in the front matter: {problem}"
        ) from None
    if fields is None:
        fields = {}
    if not isinstance(fields, dict):
        raise PageFormatError(page_id, "the front matter must be a mapping of fields")
    return {str(key): value for key, value in fields.items()}, "\n".join(lines[close + 1 :])


def parse_page(text: str, page_id: str) -> Page:
    """The page in `text` (line ends already `\\n`). The id is `page_id`, the
    page's path; an `id:` field that says otherwise is ignored. A text with no
    front matter is all body, with the type its id implies and no summary.

    Raises InvalidWikiPageIdError for a bad id and PageFormatError for front
    matter that is unclosed, not YAML, not a mapping or has a field of the
    wrong type.
    """
    check_page_id(page_id)
    fields, body = _front_matter(text, page_id)
    known = {name: fields.pop(name, None) for name in _FIELDS}
    sources = known["sources"] or []
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise PageFormatError(page_id, "front matter 'sources': expected a list of text")
    kind = known["type"]
    return Page(
        id=page_id,
        type=page_type(page_id) if kind is None else _text_field(kind, "type", page_id),
        summary=_text_field(known["summary"], "summary", page_id),
        updated=_text_field(known["updated"], "updated", page_id),
        sources=tuple(sources),
        body=body,
        extra=fields,
    )


def render_page(page: Page) -> str:
    """The file text of `page`: front matter, then the body as it is.
    `parse_page(render_page(page), page.id) == page`."""
    fields: dict[str, Any] = {
        "id": page.id,
        "type": page.type,
        "summary": page.summary,
        "updated": page.updated,
    }
    if page.sources:  # a page from before fold records; the compile drops it
        fields["sources"] = list(page.sources)
    fields.update((k, v) for k, v in page.extra.items() if k not in fields)
    head = yaml.dump(fields, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1_000_000)
    return f"---\n{head}---\n{page.body}"
