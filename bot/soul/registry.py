"""Every soul under the workspaces folder, reloadable one by one or all at once.

A soul that fails to load in any way (a RecursionError included, or a prompt
over `souls.max_prompt_tokens`) logs one `soul.load_failed` line (`path`,
`error`), and every other soul still loads. A reload swaps the new set in one
assignment, and a soul whose new version fails keeps its previous good version
live.
Reloads run one at a time (from any thread), so a reload that read the files
before another never swaps its older souls in after it.

A reload is `at_once` (the default: an operator's reload, a rollback, a new
epoch, the shared wiki's compile) or not (the heartbeat's own SOUL.md write).
Each live soul carries its `renewal`, the number of the last `at_once` reload of
it; a reload that is not keeps the number. A session whose prompt cache is warm
goes on with the version it has while the renewal is the same (the rule is
`bot/chat/turn.py`'s `Agent.soul`).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from bot.config.schema import MAX_PROMPT_TOKENS
from bot.errors import SoulbotError, SoulLoadError
from bot.soul.loader import BYTES_PER_TOKEN, Soul, load_soul
from bot.soul.prompt import estimate_tokens, system_blocks

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class LoadFailure:
    """A soul folder that did not load, and why."""

    path: Path
    error: str


@dataclass(frozen=True)
class ReloadReport:
    """What a load or reload did: souls loaded, folders that failed (with
    `kept` true when an older version stays live), souls removed."""

    loaded: tuple[Soul, ...] = ()
    failed: tuple[tuple[LoadFailure, bool], ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass(frozen=True)
class LiveSoul:
    """A live soul and its `renewal`: the number of the last `at_once` reload
    of it (no two reloads share one). An older version of the soul may still
    serve a warm session while its renewal is this one."""

    soul: Soul
    renewal: int


@dataclass
class SoulRegistry:
    """The live souls, by id. Loading is synchronous file I/O: call it from a
    worker thread when an event loop must not stall."""

    workspaces: Path
    max_prompt_tokens: int = MAX_PROMPT_TOKENS
    _live: dict[str, LiveSoul] = field(default_factory=dict)
    # Held by a reload from its first read to its swap; `get` and `all` never wait.
    _reloading: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _renewals: itertools.count[int] = field(
        default_factory=lambda: itertools.count(1), repr=False, compare=False
    )

    def get(self, soul_id: str) -> Soul | None:
        live = self._live.get(soul_id)
        return live.soul if live else None

    def live(self, soul_id: str) -> LiveSoul | None:
        """The live version of `soul_id` with its renewal."""
        return self._live.get(soul_id)

    def all(self) -> list[Soul]:
        return sorted((live.soul for live in self._live.values()), key=lambda s: s.id)

    def _folders(self) -> list[Path]:
        try:
            entries = sorted(self.workspaces.iterdir())
        except FileNotFoundError:
            raise SoulbotError(f"{self.workspaces}: the workspaces folder does not exist") from None
        except NotADirectoryError:
            raise SoulbotError(f"{self.workspaces}: the workspaces path is not a folder") from None
        return [p for p in entries if not p.name.startswith(".") and (p.is_symlink() or p.is_dir())]

    def _folder_named(self, name: str) -> Path:
        """The soul folder under the workspaces folder named `name`: one that
        `_folders` lists, so never a path, a hidden folder or one outside.
        Raises SoulbotError when there is none."""
        if Path(name).name == name and name not in ("", ".", ".."):
            for folder in self._folders():
                if folder.name == name:
                    return folder
        raise SoulbotError(f"no soul or workspace folder is named '{name}'")

    def _load(self, folder: Path, claimed: dict[str, Path]) -> Soul | LoadFailure:
        try:
            soul = load_soul(folder, self.max_prompt_tokens * BYTES_PER_TOKEN)
            self._check_size(soul)
        except Exception as exc:  # whatever fails, fails for this soul alone
            error = (
                str(exc)
                if isinstance(exc, SoulLoadError)
                else (f"{folder}: the soul failed to load: {type(exc).__name__}: {exc}")
            )
            log.error("soul.load_failed", path=str(folder), error=error)
            return LoadFailure(folder, error)
        other = claimed.get(soul.id)
        if other is not None and other != folder:
            error = f"{folder}: soul id '{soul.id}' is already used by {other}"
            log.error("soul.load_failed", path=str(folder), error=error)
            return LoadFailure(folder, error)
        claimed[soul.id] = folder
        log.info("soul.loaded", soul=soul.id, path=str(folder), files=list(soul.files))
        return soul

    def _check_size(self, soul: Soul) -> None:
        """Raise SoulLoadError when the soul's system prompt, its memory index
        aside (the bot writes that one, and it grows with the wiki), is over
        `max_prompt_tokens`."""
        blocks = [b for b in system_blocks(soul) if b.kind != "memory_index"]
        tokens = sum(estimate_tokens(b.text) for b in blocks)
        if tokens > self.max_prompt_tokens:
            raise SoulLoadError(
                f"{soul.folder / 'SOUL.md'}: the soul's prompt is about {tokens:,} tokens, over "
                f"souls.max_prompt_tokens ({self.max_prompt_tokens:,}): shorten SOUL.md or "
                "STYLE.md, or raise the key"
            )

    def reload_all(self) -> ReloadReport:
        """Load every soul folder again and swap the result in at once (after
        any reload running now); every session takes the new versions at its
        next turn."""
        with self._reloading:
            return self._reload_all()

    def reload(self, name: str, *, at_once: bool = True) -> ReloadReport:
        """Reload one soul, named by its id or its folder name (after any
        reload running now). `at_once`: every session takes the new version
        at its next turn; else a session whose prompt cache is warm keeps the
        version it has (the heartbeat's writes).

        Raises SoulbotError when no soul and no folder has that name (a folder
        name is a plain name of a folder in the workspaces folder: not a path,
        not hidden).
        """
        with self._reloading:
            return self._reload(name, at_once)

    def _reload_all(self) -> ReloadReport:
        fresh: dict[str, LiveSoul] = {}
        claimed: dict[str, Path] = {}
        loaded: list[Soul] = []
        failed: list[tuple[LoadFailure, bool]] = []
        renewal = next(self._renewals)
        for folder in self._folders():
            result = self._load(folder, claimed)
            if isinstance(result, Soul):
                fresh[result.id] = LiveSoul(result, renewal)
                loaded.append(result)
                continue
            previous = self._by_folder(folder)
            if previous is not None and previous.soul.id not in fresh:
                fresh[previous.soul.id] = previous
                claimed[previous.soul.id] = folder
            failed.append((result, previous is not None))
        removed = tuple(sorted(set(self._live) - set(fresh)))
        for soul_id in removed:
            log.info("soul.removed", soul=soul_id)
        self._live = fresh
        return ReloadReport(tuple(loaded), tuple(failed), removed)

    def _reload(self, name: str, at_once: bool) -> ReloadReport:
        current = self._live.get(name)
        folder = current.soul.folder if current else self._folder_named(name)
        claimed = {k: v.soul.folder for k, v in self._live.items()}
        if current is not None:
            del claimed[current.soul.id]
        result = self._load(folder, claimed)
        if isinstance(result, LoadFailure):
            previous = current or self._by_folder(folder)
            return ReloadReport(failed=((result, previous is not None),))
        kept = self._live.get(result.id)
        renewal = kept.renewal if kept is not None and not at_once else next(self._renewals)
        fresh = {k: v for k, v in self._live.items() if v.soul.folder != folder}
        fresh[result.id] = LiveSoul(result, renewal)
        self._live = fresh
        log.info("soul.reloaded", soul=result.id, at_once=at_once)
        return ReloadReport(loaded=(result,))

    def _by_folder(self, folder: Path) -> LiveSoul | None:
        return next((v for v in self._live.values() if v.soul.folder == folder), None)
