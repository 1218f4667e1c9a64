"""The soul folder and its `memory/`: open the folder (never a link), start
`memory/` and `memory/.meta/` one folder at a time with their starting files
only where nothing is, seed index.md from a legacy MEMORY.md, read the index.
Every read and write goes through bot/storage/files.py (no link followed,
nothing waits).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from bot.errors import SoulLoadError
from bot.storage import files

INDEX_HEADING = "# Memory Index"
MIGRATED_START = "<!-- migrated from MEMORY.md -->"
MIGRATED_END = "<!-- end of MEMORY.md -->"
MIGRATED_END_QUOTED = "<!-- end of MEMORY.md (quoted) -->"


def open_folder(path: Path) -> int:
    """A descriptor for the soul folder `path`, which may not itself be a link.

    Raises SoulLoadError when it is a link, missing or not a folder.
    """
    if path.is_symlink():
        raise SoulLoadError(
            f"{path}: the soul folder is a symbolic link; a soul folder may not be one "
            "(soulbot follows no link)"
        )
    try:
        return os.open(path, files.DIR_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            reason = "is a symbolic link; a soul folder may not be one (soulbot follows no link)"
        elif exc.errno == errno.ENOTDIR:
            reason = "is not a folder"
        elif exc.errno == errno.ENOENT:
            reason = "does not exist"
        else:
            reason = f"cannot be opened: {exc.strerror}"
        raise SoulLoadError(f"{path}: the soul folder {reason}") from None


def initial_index(legacy_memory: str | None) -> str:
    """A new memory/index.md: the heading, and a legacy MEMORY.md's text between
    the migration markers (an end marker inside it is quoted, so it closes nothing)."""
    if legacy_memory is None or not legacy_memory.strip():
        return INDEX_HEADING + "\n"
    body = legacy_memory.replace(MIGRATED_END, MIGRATED_END_QUOTED).strip("\n")
    return f"{INDEX_HEADING}\n\n{MIGRATED_START}\n{body}\n{MIGRATED_END}\n"


def ensure_memory(dir_fd: int, folder: Path, warnings: list[str]) -> None:
    """Start `memory/` in the soul folder: the folders, then index.md and
    .meta/index.json, each only where nothing is. A new index.md is seeded from
    a legacy MEMORY.md, which is left untouched."""
    memory = folder / "memory"
    mem_fd = files.make_folder(dir_fd, "memory", memory, warnings)
    if mem_fd is None:
        return
    try:
        meta_fd = files.make_folder(mem_fd, ".meta", memory / ".meta", warnings)
        if not files.exists(mem_fd, "index.md"):
            legacy = files.read_text(dir_fd, "MEMORY.md", folder / "MEMORY.md", warnings)
            index = initial_index(legacy)
            files.make_file(mem_fd, "index.md", index, memory / "index.md", warnings)
        if meta_fd is not None:
            try:
                meta = memory / ".meta" / "index.json"
                files.make_file(meta_fd, "index.json", "{}\n", meta, warnings)
            finally:
                os.close(meta_fd)
    finally:
        os.close(mem_fd)


def read_index(dir_fd: int, folder: Path, warnings: list[str]) -> str | None:
    """memory/index.md's text, read through no link; None when there is none."""
    mem_fd = files.open_subfolder(dir_fd, "memory", folder / "memory", [])
    if mem_fd is None:
        return None
    try:
        return files.read_text(mem_fd, "index.md", folder / "memory" / "index.md", warnings)
    finally:
        os.close(mem_fd)
