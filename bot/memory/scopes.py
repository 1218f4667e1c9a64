"""Where each wiki lives, and the scope index a turn shows (cached).

Scopes (docs/memory.md): the shared wiki of a soul is its workspace's `memory/`;
the wiki of `user:<platform>:<id>` or `chat:<platform>:<id>` lives under
`data_dir/memory/<soul>/<user|chat>/<platform>/<id>/`, that of
`member:<platform>:<server>:<id>` under `.../member/<platform>/<server>/<id>/`,
a path built only from the scope's validated parts (bot/types.py `Scope`). A
per-member place (`members:`) has no wiki: its turns read their speaker's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from cachetools import TTLCache

from bot.memory.wiki import Wiki
from bot.soul.registry import SoulRegistry
from bot.types import SHARED, Route, Scope

INDEX_TTL_S = 60.0
# Indexes kept at most (the least recently used goes first): a long uptime meets
# more scopes than it needs to hold.
INDEX_CACHE_SIZE = 10_000


def scope_folder(data_dir: Path, soul: str, scope: str) -> Path:
    """The folder of a private scope's wiki. Raises InvalidKeyError for a
    scope that breaks the key rule, or for the shared scope."""
    return Scope.parse(scope).folder(data_dir / "memory" / soul)


class Scopes:
    """The wikis of every soul and scope, and each private scope's index."""

    def __init__(
        self,
        data_dir: Path,
        registry: SoulRegistry,
        clock: Callable[[], float] = time.time,
        cache_size: int = INDEX_CACHE_SIZE,
    ) -> None:
        self._data_dir = data_dir
        self._registry = registry
        self._indexes: TTLCache[tuple[str, str], str | None] = TTLCache(
            maxsize=cache_size, ttl=INDEX_TTL_S, timer=clock
        )
        self._changes = 0  # `changed` calls so far

    def __len__(self) -> int:
        """How many scope indexes are cached (at most the cache size)."""
        return len(self._indexes)

    def folder(self, soul: str, scope: str) -> Path:
        """The folder of a private scope's wiki (see `scope_folder`)."""
        return scope_folder(self._data_dir, soul, scope)

    def wiki(self, soul_id: str, scope: str) -> Wiki | None:
        """The wiki of `scope` (None when the soul is not loaded, or for a
        per-member place, which has none)."""
        if Scope.parse(scope).per_member:
            return None
        if scope == SHARED:
            soul = self._registry.get(soul_id)
            return Wiki(soul.folder / "memory", shared=True) if soul else None
        return Wiki(self.folder(soul_id, scope))

    async def index(self, route: Route) -> str | None:
        """The catalog of the route's private wiki (the shared one is in the
        soul's own blocks), or None when it lists nothing yet. Read once, then
        kept until `changed` is called for it (a compile, a forget, a self
        note), or `INDEX_TTL_S` (a compile run by another process), whichever
        comes first; at most `cache_size` indexes are kept."""
        if route.scope == SHARED:
            return None
        key = (route.soul, route.scope)
        try:
            return self._indexes[key]
        except KeyError:  # never read, expired or pushed out
            pass
        wiki = self.wiki(route.soul, route.scope)
        changes = self._changes
        text = await asyncio.to_thread(wiki.catalog_text) if wiki else None
        if not text or not text.strip().removeprefix("# Memory Index").strip():
            text = None
        index = text.strip() if text else None
        if self._changes == changes:  # else a wiki was written while this read: maybe this one
            self._indexes[key] = index
        return index

    def changed(self, soul: str, scope: str) -> None:
        """Forget the cached index of a wiki that was just written (and any
        index being read now is not kept)."""
        self._changes += 1
        self._indexes.pop((soul, scope), None)
