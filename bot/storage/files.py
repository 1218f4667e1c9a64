"""Files soulbot reads and writes, safely: text decoding, atomic replacement,
reads that never wait on a pipe, no-follow access relative to a folder's
descriptor (soul folders, wiki catalogs), where links lead, private modes.

Nothing here follows a symbolic link given relative to a folder descriptor,
and nothing waits: files are opened with O_NOFOLLOW | O_NONBLOCK, and only a
regular file is read. A link, a named pipe, a socket or a device is skipped
with a warning. New files are created with O_EXCL, so nothing is written
through a link or over a file already there. What only the bot may read is
made PRIVATE_FOLDER / PRIVATE_FILE exactly, whatever the process umask.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from contextlib import suppress
from pathlib import Path

from bot.errors import SoulLoadError

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600


def decode_text(data: bytes) -> str:
    """UTF-8 text without a byte order mark, with `\\n` line ends.

    Raises UnicodeDecodeError, whose `start` counts bytes from the file's start.
    """
    text = data.decode("utf-8")
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


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
        warnings.append(f"{where}: skipped, it is {kind(info.st_mode)}")
        return None
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
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
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            warnings.append(f"{where}: not a folder (a link or a file); left as it is")
        else:
            warnings.append(f"{where}: cannot be opened: {exc.strerror}")
        return None


def make_folder(dir_fd: int, name: str, where: Path, warnings: list[str]) -> int | None:
    try:
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    except FileExistsError:
        pass
    except OSError as exc:
        warnings.append(f"{where}: cannot be created: {exc.strerror}")
        return None
    return open_subfolder(dir_fd, name, where, warnings)


def make_file(dir_fd: int, name: str, text: str, where: Path, warnings: list[str]) -> None:
    try:
        fd = os.open(name, CREATE_FLAGS, 0o644, dir_fd=dir_fd)
    except FileExistsError:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode):
            warnings.append(f"{where}: {kind(info.st_mode)} is in the way; left as it is")
        return
    except OSError as exc:
        warnings.append(f"{where}: cannot be created: {exc.strerror}")
        return
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb", closefd=False) as handle:
        return handle.read()


def read_regular(path: Path) -> bytes | None:
    """The bytes of the regular file at `path`, never waiting; None when nothing,
    a link or something else (a folder, a pipe) is there. A link at `path`
    itself is not followed; links in the folders above it are."""
    try:
        fd = os.open(path, READ_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        raise
    try:
        return read_all(fd) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


def within(path: str, folder: str) -> bool:
    """Whether the path `path` is `folder` or lies under it (compared as text:
    resolve both first)."""
    return os.path.commonpath([folder, path]) == folder


def link_out(bound: Path, path: Path) -> tuple[Path, str] | None:
    """The first place on `path`, walking down from the folder `bound` it lies
    in, whose links lead out of `bound`, with the real path it leads to; None
    when every place on the way (and `path` itself) resolves inside `bound`.
    Every name is checked: a linked folder on the way, a link at `path`, a
    chain of links. The check is on the paths as they are now. Raises
    ValueError when `path` does not lie under `bound` as written."""
    top = os.path.realpath(bound)
    at = bound
    for part in path.relative_to(bound).parts:
        at = at / part
        real = os.path.realpath(at)
        if not within(real, top):
            return at, real
    return None


def make_folders(path: Path, mode: int | None = None) -> None:
    """Make the folder `path` and the missing folders above it (`mkdir -p`),
    following links to folders. Each new folder gets exactly `mode`, whatever
    the umask (None: the umask's default); a folder already there is left as
    it is. Raises OSError (EEXIST or ENOTDIR when a file is in the way)."""
    try:
        _make_folder(path, mode)
    except FileNotFoundError:
        if path.parent == path:
            raise
        make_folders(path.parent, mode)
        _make_folder(path, mode)


def _make_folder(path: Path, mode: int | None) -> None:
    try:
        path.mkdir(0o777 if mode is None else mode)
    except FileNotFoundError:
        raise
    except OSError:
        if not path.is_dir():
            raise
        return
    if mode is not None:
        fd = os.open(path, DIR_FLAGS)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


def create_private(path: Path) -> None:
    """Create an empty file at `path`, PRIVATE_FILE whatever the umask, unless
    something is there already (which is left as it is). Raises OSError."""
    try:
        fd = os.open(path, CREATE_FLAGS, PRIVATE_FILE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write `data` to a new file beside `path`, then rename it over `path`
    (a link at `path` is replaced, not written through). The file keeps the
    permission bits of the one it replaces; a new one gets exactly `mode`,
    whatever the umask (None: 0o644 less the umask). The new file is removed
    on failure. Raises OSError."""
    temp = path.with_name(f".wiki-{secrets.token_hex(6)}.tmp")
    fd = os.open(temp, CREATE_FLAGS, 0o644 if mode is None else mode)
    try:
        try:
            try:
                keep: int | None = stat.S_IMODE(path.stat().st_mode)
            except FileNotFoundError:
                keep = mode
            if keep is not None:
                os.fchmod(fd, keep)
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        temp.replace(path)
    except BaseException:
        with suppress(OSError):
            temp.unlink()
        raise
