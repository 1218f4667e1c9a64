"""The scope index cache: read once, dropped on `changed` or after its TTL, and
bounded in size whatever the number of scopes."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from bot.memory.scopes import INDEX_CACHE_SIZE, INDEX_TTL_S, Scopes
from bot.memory.wiki import Wiki
from bot.soul.registry import SoulRegistry
from bot.types import Route


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def route(user: str) -> Route:
    scope = f"user:test:{user}"
    return Route("lark", scope, f"test:{user}", f"test:{user}", is_dm=True)


def write_index(scopes: Scopes, user: str, text: str) -> None:
    folder = scopes.folder("lark", route(user).scope)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "index.md").write_text(f"# Memory Index\n\n- {text}\n")


def make(tmp_path: Path, size: int = INDEX_CACHE_SIZE) -> tuple[Scopes, Clock]:
    clock = Clock()
    registry = SoulRegistry(tmp_path / "workspaces")
    return Scopes(tmp_path / "data", registry, clock, cache_size=size), clock


async def test_an_index_is_cached_until_changed_or_its_ttl(tmp_path: Path) -> None:
    scopes, clock = make(tmp_path)
    assert await scopes.index(route("a")) is None  # nothing yet (and that is cached too)
    write_index(scopes, "a", "first")
    assert await scopes.index(route("a")) is None
    scopes.changed("lark", route("a").scope)
    assert await scopes.index(route("a")) == "# Memory Index\n\n- first"
    write_index(scopes, "a", "second")
    clock.now += INDEX_TTL_S - 1
    assert await scopes.index(route("a")) == "# Memory Index\n\n- first"
    clock.now += 2
    assert await scopes.index(route("a")) == "# Memory Index\n\n- second"


async def test_the_cache_holds_at_most_its_size(tmp_path: Path) -> None:
    scopes, _ = make(tmp_path, size=3)
    for user in "abcd":
        write_index(scopes, user, f"{user}1")
    for user in "abc":
        assert await scopes.index(route(user)) == f"# Memory Index\n\n- {user}1"
    for user in "abcd":
        write_index(scopes, user, f"{user}2")
    # A fourth scope pushes out the least recently used ("a"), which is read
    # again; "b" and "c" are still cached.
    assert await scopes.index(route("d")) == "# Memory Index\n\n- d2"
    assert await scopes.index(route("a")) == "# Memory Index\n\n- a2"
    assert await scopes.index(route("c")) == "# Memory Index\n\n- c1"
    assert len(scopes) == 3


async def test_ten_thousand_scopes_by_default(tmp_path: Path) -> None:
    scopes, _ = make(tmp_path)
    for i in range(INDEX_CACHE_SIZE + 500):
        await scopes.index(route(f"u{i}"))
    assert len(scopes) == INDEX_CACHE_SIZE == 10_000


async def test_an_index_read_while_its_wiki_is_written_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scopes, _ = make(tmp_path)
    write_index(scopes, "a", "old catalog")
    reading, written = threading.Event(), threading.Event()
    real = Wiki.catalog_text

    def slow(self: Wiki) -> str | None:
        text = real(self)  # the old text is read ...
        reading.set()
        written.wait(5)  # ... and a compile writes the new one before the read returns
        return text

    monkeypatch.setattr(Wiki, "catalog_text", slow)
    read = asyncio.create_task(scopes.index(route("a")))
    await asyncio.to_thread(reading.wait, 5)
    write_index(scopes, "a", "new catalog")
    scopes.changed("lark", route("a").scope)
    written.set()
    assert "old catalog" in (await read or "")
    monkeypatch.setattr(Wiki, "catalog_text", real)
    assert "new catalog" in (await scopes.index(route("a")) or "")
