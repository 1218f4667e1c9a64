"""Safe file access inside a soul folder.

Nothing here follows a symbolic link at the soul folder or below it, and
nothing waits: every file is opened relative to its folder's descriptor with
O_NOFOLLOW | O_NONBLOCK, and only a regular file is read. A link, a named pipe,
a socket or a device is skipped with a warning. `memory/` and `memory/.meta/`
are made one folder at a time, and their starting files only where nothing is,
so nothing is ever written through a link or over a file already there.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from bot.errors import SoulLoadError
from bot.text import decode_text

INDEX_HEADING = "# Memory Index"
MIGRATED_START = "<!-- migrated from MEMORY.md -->"
MIGRATED_END = "<!-- end of MEMORY.md -->"
MIGRATED_END_QUOTED = "<!-- end of MEMORY.md (quoted) -->"

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


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
        return os.open(path, _DIR)
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


def read_text(dir_fd: int, name: str, where: Path, warnings: list[str]) -> str | None:
    """The text of the regular file `name` in the folder `dir_fd`, or None.

    None when it is absent, or when it is a link or not a regular file (with a
    warning). Raises SoulLoadError for a file that cannot be read or decoded.
    """
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        warnings.append(f"{where}: skipped, it is {_kind(info.st_mode)}")
        return None
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            warnings.append(f"{where}: skipped, it is not a regular file")
            return None
        raise SoulLoadError(f"{where}: cannot be read: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the stat above
            warnings.append(f"{where}: skipped, it is not a regular file")
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read()
    except OSError as exc:
        raise SoulLoadError(f"{where}: cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    try:
        return decode_text(data)
    except UnicodeDecodeError as exc:
        raise SoulLoadError(f"{where}: not valid UTF-8 (bad byte at offset {exc.start})") from None


def open_subfolder(dir_fd: int, name: str, where: Path, warnings: list[str]) -> int | None:
    """A descriptor for the folder `name` in `dir_fd`, or None (with a warning)
    when something else, a link included, is in its place."""
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            warnings.append(f"{where}: not a folder (a link or a file); left as it is")
        else:
            warnings.append(f"{where}: cannot be opened: {exc.strerror}")
        return None


def _make_folder(dir_fd: int, name: str, where: Path, warnings: list[str]) -> int | None:
    try:
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    except FileExistsError:
        pass
    except OSError as exc:
        warnings.append(f"{where}: cannot be created: {exc.strerror}")
        return None
    return open_subfolder(dir_fd, name, where, warnings)


def _make_file(dir_fd: int, name: str, text: str, where: Path, warnings: list[str]) -> None:
    try:
        fd = os.open(name, _CREATE, 0o644, dir_fd=dir_fd)
    except FileExistsError:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode):
            warnings.append(f"{where}: {_kind(info.st_mode)} is in the way; left as it is")
        return
    except OSError as exc:
        warnings.append(f"{where}: cannot be created: {exc.strerror}")
        return
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def initial_index(legacy_memory: str | None) -> str:
    """A new memory/index.md: the heading, and a legacy MEMORY.md's text between
    the migration markers (an end marker inside it is quoted, so it closes nothing)."""
    if legacy_memory is None or not legacy_memory.strip():
        return INDEX_HEADING + "\n"
    body = legacy_memory.replace(MIGRATED_END, MIGRATED_END_QUOTED).strip("\n")
    return f"{INDEX_HEADING}\n\n{MIGRATED_START}\n{body}\n{MIGRATED_END}\n"


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def ensure_memory(dir_fd: int, folder: Path, warnings: list[str]) -> None:
    """Start `memory/` in the soul folder: the folders, then index.md and
    .meta/index.json, each only where nothing is. A new index.md is seeded from
    a legacy MEMORY.md, which is left untouched."""
    memory = folder / "memory"
    mem_fd = _make_folder(dir_fd, "memory", memory, warnings)
    if mem_fd is None:
        return
    try:
        meta_fd = _make_folder(mem_fd, ".meta", memory / ".meta", warnings)
        if not _exists(mem_fd, "index.md"):
            legacy = read_text(dir_fd, "MEMORY.md", folder / "MEMORY.md", warnings)
            _make_file(mem_fd, "index.md", initial_index(legacy), memory / "index.md", warnings)
        if meta_fd is not None:
            try:
                _make_file(meta_fd, "index.json", "{}\n", memory / ".meta" / "index.json", warnings)
            finally:
                os.close(meta_fd)
    finally:
        os.close(mem_fd)


def read_index(dir_fd: int, folder: Path, warnings: list[str]) -> str | None:
    """memory/index.md's text, read through no link; None when there is none."""
    mem_fd = open_subfolder(dir_fd, "memory", folder / "memory", [])
    if mem_fd is None:
        return None
    try:
        return read_text(mem_fd, "index.md", folder / "memory" / "index.md", warnings)
    finally:
        os.close(mem_fd)
