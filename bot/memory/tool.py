"""`read_memory_page`: the tool a turn's model opens wiki pages with. It reads
the route's own scope and the soul's shared wiki, nothing else."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bot.errors import InvalidWikiPageIdError, PageFormatError
from bot.memory.page import Page
from bot.memory.pageid import check_page_id
from bot.memory.scopes import Scopes
from bot.types import SHARED, Route, Tool

READ_PAGE_SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "string", "description": "A page id from a memory index, "
                                                           "such as concepts/notes"}},
    "required": ["id"],
}  # fmt: skip


def _page_json(where: str, page: Page) -> dict[str, Any]:
    return {"wiki": where, "id": page.id, "summary": page.summary, "updated": page.updated,
            "links": list(page.links), "body": page.body}  # fmt: skip


def read_page_tool(scopes: Scopes, route: Route) -> Tool:
    """The tool for `route`: its answer is JSON, `pages` found (private first,
    then shared) or an `error` with a code."""

    async def read_memory_page(args: dict[str, Any]) -> str:
        page_id = str(args.get("id", ""))
        try:
            check_page_id(page_id)
        except InvalidWikiPageIdError as exc:
            return json.dumps({"error": str(exc), "details": {"code": "INVALID_WIKI_PAGE_ID"}})
        found = []
        for where in dict.fromkeys([route.scope, SHARED]):
            wiki = scopes.wiki(route.soul, where)
            try:
                page = await asyncio.to_thread(wiki.read_page, page_id) if wiki else None
            except PageFormatError as exc:
                return json.dumps({"error": str(exc), "details": {"code": "PAGE_UNREADABLE"}})
            if page is not None:
                found.append(_page_json("shared" if where == SHARED else "private", page))
        if not found:
            return json.dumps({"error": f"no page {page_id!r}",
                               "details": {"code": "PAGE_NOT_FOUND"}})  # fmt: skip
        return json.dumps({"pages": found}, ensure_ascii=False)

    return Tool("read_memory_page",
                "Open a page of your long-term memory wiki by its id (from a memory index).",
                READ_PAGE_SCHEMA, read_memory_page)  # fmt: skip
