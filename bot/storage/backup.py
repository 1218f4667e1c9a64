"""Backups of everything a soulbot keeps, and their restore.

A backup is one gzipped tar file, created 0600 (never over a file already there;
written beside its final name and renamed, so a failed backup leaves nothing):

    data_dir/             data_dir, its own mode kept
      soulbot.db          the SQLite database when it is in data_dir (at its path
                          there), copied with SQLite's online backup API
      ...                 every other file and folder: the private memory wikis,
                          kept images, ...; not the database's -wal, -shm and
                          -journal files, and not `Places.leave_out`
    database/x.db         the SQLite database when it is elsewhere (`store.url`),
                          copied the same way
    workspaces/           the workspaces folder whole: every soul folder with its
                          SOUL.md, its other files and its memory/ (the shared
                          wiki, memory/.meta/ with the SOUL.md daily backups)
    manifest.json         what it is: backup format, soulbot version, database
                          schema, time (UTC), the paths it came from, the store
                          (its engine, the SQLite file, the instance), what it holds

A PostgreSQL store is not in it (`Places.database` None): its own tools
(pg_dump) back it up; the backup holds the files, and says so in its manifest.

The database copy is one instant's, never the file read byte by byte: the
backup API reads it in one read transaction, and in WAL mode the daemon goes
on writing meanwhile. The other files are copied one at a time, each whole
(soulbot replaces its files by a rename), so a backup taken during a memory
compile may hold a wiki halfway through it. Every entry keeps its permission
bits: what was 0600 stays 0600. Regular files, folders and relative links
that stay inside their folder (data_dir or workspaces) are kept; a link out
of it (or an absolute one), a pipe, a socket or a device is left out with a
note, and so are the half-written temporary files of `replace_file`.

A restore checks the whole file before it writes anything: the manifest (a
backup of a newer format, or of a database schema newer than SCHEMA_VERSION,
is refused, and so is one of another store than the config's: a SQLite
database into a PostgreSQL store or back, or a database that would not be
where the config reads it), then every member (an absolute path, a `..`, a
name out of the three folders, a hard link, a special file, a link that
leads out of its folder, a name given twice: refused, naming the member),
then the members together (bot/storage/backup_checks.py: every link followed
link by link stays in its folder; the files fit under a cap and in the free
space). Each folder is extracted (with tarfile's "data" filter as a second
guard) into a new folder beside its target, folders get their modes back,
and only then is it put in place: workspaces first, then a database kept
outside data_dir, data_dir last. A target that holds anything (but
`leave_out` names) is refused unless `force`, which renames it aside to
`<name>.before-restore-<time>` (a mount point: its entries into a folder
`.before-restore-<time>` inside it), never deleting it; a database outside
data_dir goes, with its -wal, -shm and -journal files, into a folder
`<name>.before-restore-<time>` beside it, so they stay together. Keeping
every daemon off the data meanwhile is the caller's: `restore_backup`'s
`hold` takes their locks (bot/app/owner.py) once the file is checked.

Every failure is a SoulbotError of one line: what failed and where.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import posixpath
import shutil
import sqlite3
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import IO, Any

from bot import __version__
from bot.errors import SoulbotError
from bot.storage.backup_checks import MAX_SIZE, check_links, check_room
from bot.storage.db import SCHEMA_VERSION
from bot.storage.files import (
    PRIVATE_FILE,
    PRIVATE_FOLDER,
    READ_FLAGS,
    kind,
    make_folders,
    within,
)

FORMAT = 2  # the layout above (1: no database/, no store); a restore refuses a newer one
MANIFEST = "manifest.json"
DATA = "data_dir"
SOULS = "workspaces"
DATABASE = "database"
SUFFIX = ".tar.gz"
STAMP = "%Y%m%d-%H%M%S"
_DB_SUFFIXES = ("", "-wal", "-shm", "-journal")  # a SQLite file, and the files beside it
_MANIFEST_MAX = 1 << 20
_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error)


@dataclass(frozen=True)
class Places:
    """Where a soulbot keeps what a backup holds: its `data_dir`, its
    `workspaces` folder and its SQLite `database` (in data_dir or elsewhere;
    None: the store is PostgreSQL, which a backup does not hold); `leave_out`
    are names directly under data_dir that are not data (the daemons' lock,
    pid and health files, ...): never backed up, and not counted when a
    restore asks whether data_dir is empty. `instance` is only recorded."""

    data_dir: Path
    workspaces: Path
    database: Path | None
    leave_out: frozenset[str] = field(default_factory=frozenset)
    instance: str | None = None


@dataclass(frozen=True)
class Backup:
    """A backup written: its file, its size in bytes, its manifest, and one
    note per entry left out (a link out, a pipe, a file that vanished)."""

    path: Path
    size: int
    manifest: dict[str, Any]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Restored:
    """A backup restored: its manifest, the folders restored, and for each
    folder that was not empty (with `force`) where it was moved: (the
    folder, its new name)."""

    manifest: dict[str, Any]
    folders: tuple[Path, ...]
    aside: tuple[tuple[Path, Path], ...]


def backup_name(when: datetime) -> str:
    """The file name of a backup taken at `when` (UTC)."""
    return f"soulbot-backup-{when.astimezone(UTC).strftime(STAMP)}{SUFFIX}"


def write_backup(places: Places, dest: Path, now: datetime | None = None) -> Backup:
    """Back up `places` into `dest`: a file path ending .tar.gz, or a folder
    (made when missing, 0700) that gets `backup_name(now)`. Safe while the
    daemon runs. Raises SoulbotError (one line) when there is nothing to back
    up, the file is there already or lies inside what it backs up, or a read
    or write fails."""
    when = now or datetime.now(UTC)
    data_dir, workspaces = _real(places.data_dir), _real(places.workspaces)
    database = None if places.database is None else _real(places.database)
    if not data_dir.is_dir() and not workspaces.is_dir() and not _is_file(database):
        raise SoulbotError(f"nothing to back up: neither {data_dir} nor {workspaces} is a folder")
    try:
        target = _target(dest, when)
        for root in (data_dir, workspaces):
            if within(str(target), str(root)):
                raise SoulbotError(
                    f"{target}: inside {root}, which it backs up: write it elsewhere"
                )
        make_folders(target.parent, PRIVATE_FOLDER)
        if os.path.lexists(target):
            raise SoulbotError(f"{target}: already exists")
        fd, name = tempfile.mkstemp(prefix=".soulbot-backup-", suffix=".tmp", dir=target.parent)
        temp = Path(name)
        try:
            with os.fdopen(fd, "wb") as raw:  # mkstemp: 0600
                manifest, notes = _write_tar(raw, places, when, target.parent)
                raw.flush()
                os.fsync(raw.fileno())
            temp.replace(target)
        finally:
            temp.unlink(missing_ok=True)
        return Backup(target, target.stat().st_size, manifest, tuple(notes))
    except OSError as exc:
        raise SoulbotError(_os_line(exc, dest)) from None
    except sqlite3.Error as exc:
        raise SoulbotError(f"{database}: cannot be copied: {exc}") from None


def restore_backup(places: Places, archive: Path, *, force: bool = False,
                   hold: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
                   now: datetime | None = None, max_size: int = MAX_SIZE) -> Restored:  # fmt: skip
    """Restore the backup `archive` into `places` (see the module's docstring).
    `hold()` is entered once the file is checked, before anything is looked
    at or written in the targets, and left at the end: the caller's lock on
    data_dir. Raises SoulbotError (one line) for a file that is not a soulbot
    backup, one newer than this soulbot reads, a member refused, one that
    unpacks to more than `max_size` or the free space (bot/storage/backup_checks.py),
    one of another store than `places` (`_check_store`), a target that is not
    empty without `force`, or a failed write; nothing is changed then,
    but for a failure while the folders are put in place, which says where
    everything is. What `hold()` raises goes through."""
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime(STAMP)
    targets = {SOULS: _real(places.workspaces), DATA: _real(places.data_dir)}
    if places.database is not None:
        targets = {SOULS: targets[SOULS], DATABASE: _real(places.database), DATA: targets[DATA]}
    skip = {SOULS: frozenset[str](), DATABASE: frozenset[str](), DATA: places.leave_out}
    with _open_archive(archive) as (tar, members):
        manifest = _check_manifest(tar, members, archive)
        _check_store(manifest, places, archive)
        parts = _check_members(members, manifest, archive)
        check_links(members, archive)
        targets = {root: target for root, target in targets.items() if root in parts}
        check_room(parts, targets, archive, max_size)
        with hold():
            full = [t for root, t in targets.items() if _taken(root, t, skip[root])]
            if full and not force:
                raise SoulbotError(
                    f"not empty: {', '.join(map(str, full))}: restore into an empty place, or "
                    "force it (--force), which moves what is there aside to "
                    f"{', '.join(_aside(t, stamp).name for t in full)}"
                )
            try:
                stages = _extract_all(tar, parts, targets)
            except tarfile.FilterError as exc:
                raise SoulbotError(f"{archive}: refused: {exc}; nothing was restored") from None
            except _READ_ERRORS as exc:
                raise SoulbotError(f"{archive}: damaged ({exc}); nothing was restored") from None
            except OSError as exc:
                raise SoulbotError(_os_line(exc, archive) + "; nothing was restored") from None
            aside = _put_all_in_place(stages, targets, skip, stamp)
    return Restored(manifest, tuple(targets.values()), aside)


def _put_all_in_place(stages: dict[str, Path], targets: dict[str, Path],
                      skip: dict[str, frozenset[str]],
                      stamp: str) -> tuple[tuple[Path, Path], ...]:  # fmt: skip
    """Put each stage in place of its target, in order; return (target, where
    it went) for each target moved aside."""
    aside: list[tuple[Path, Path]] = []
    placed: set[str] = set()
    for root, stage in stages.items():
        try:
            if root == DATABASE:
                moved = _put_database(stage, targets[root], stamp)
            else:
                moved = _put_in_place(stage, targets[root], skip[root], stamp)
        except OSError as exc:
            left = ", ".join(str(s) for r, s in stages.items() if r not in placed)
            old = "".join(f"; {t} was moved aside to {a}" for t, a in aside)
            raise SoulbotError(
                f"{_os_line(exc, targets[root])}: the restored copies are left at {left}{old}"
            ) from None
        placed.add(root)
        if moved is not None:
            aside.append((targets[root], moved))
    return tuple(aside)


# -- writing ----------------------------------------------------------------------------


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _target(dest: Path, when: datetime) -> Path:
    dest = dest.absolute()
    if dest.name.endswith(SUFFIX):
        folder, name = dest.parent, dest.name
    else:
        folder, name = dest, backup_name(when)
    return _real(folder) / name


def database_member(places: Places) -> str | None:
    """Where a backup of `places` keeps its SQLite database: `data_dir/<its
    path there>` when it lies in data_dir, else `database/<its name>`; None
    for a PostgreSQL store."""
    if places.database is None:
        return None
    data_dir, database = _real(places.data_dir), _real(places.database)
    if within(str(database), str(data_dir)) and database != data_dir:
        return f"{DATA}/{database.relative_to(data_dir).as_posix()}"
    return f"{DATABASE}/{database.name}"


def _is_file(path: Path | None) -> bool:
    return path is not None and path.is_file()


def _write_tar(raw: IO[bytes], places: Places, when: datetime,
               scratch: Path) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    data_dir, workspaces = _real(places.data_dir), _real(places.workspaces)
    notes: list[str] = []
    schema: int | None = None
    counts = {DATA: 0, SOULS: 0}
    souls: list[str] = []
    member = database_member(places)
    beside = {f"{member}{suffix}" for suffix in _DB_SUFFIXES} if member else set()
    sides = {posixpath.basename(name) for name in beside if name != member}
    skip = frozenset({f"{DATA}/{name}" for name in places.leave_out} | beside)
    with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        if data_dir.is_dir():
            _add(tar, DATA, data_dir.stat())
            counts[DATA] = _add_tree(tar, data_dir, DATA, data_dir, skip, notes)
        if places.database is not None and member is not None:
            schema = _add_database(tar, _real(places.database), member, scratch)
        if workspaces.is_dir():
            _add(tar, SOULS, workspaces.stat())
            counts[SOULS] = _add_tree(tar, workspaces, SOULS, workspaces, frozenset(), notes)
            souls = sorted(
                e.name for e in os.scandir(workspaces) if e.is_dir(follow_symlinks=False)
            )
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "soulbot": __version__,
            "schema": schema,
            "created": when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "data_dir": str(data_dir),
            "workspaces": str(workspaces),
            "store": {
                "engine": "postgresql" if places.database is None else "sqlite",
                "path": None if places.database is None else str(_real(places.database)),
                "instance": places.instance,
            },
            "database": member if schema is not None else None,
            "files": counts,
            "souls": souls,
            "left_out": sorted(places.leave_out | sides),
        }
        data = (json.dumps(manifest, indent=2) + "\n").encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mode, info.mtime = len(data), PRIVATE_FILE, int(when.timestamp())
        tar.addfile(info, io.BytesIO(data))
    return manifest, notes


def _add(tar: tarfile.TarFile, name: str, info: os.stat_result, content: IO[bytes] | None = None,
         link: str | None = None, mode: int | None = None) -> None:  # fmt: skip
    """Add an entry with `info`'s time and mode (or `mode`'s): the file
    `content` (of `info`'s size), a link to `link`, or else a folder."""
    entry = tarfile.TarInfo(name)
    entry.mode = stat.S_IMODE(info.st_mode if mode is None else mode)
    entry.mtime = int(info.st_mtime)
    if link is not None:
        entry.type, entry.linkname = tarfile.SYMTYPE, link
    elif content is None:
        entry.type = tarfile.DIRTYPE
    else:
        entry.size = info.st_size
    tar.addfile(entry, content)


def _add_database(tar: tarfile.TarFile, path: Path, member: str, scratch: Path) -> int | None:
    """Add a copy of the database at `path` as `member`, made with SQLite's
    online backup API in a temporary file in the folder `scratch`, with the
    database file's mode, and return its schema version; None when there is
    no database."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    fd, name = tempfile.mkstemp(prefix=".soulbot-db-", suffix=".tmp", dir=scratch)
    os.close(fd)
    temp = Path(name)
    try:
        source = sqlite3.connect(path, timeout=5)
        try:
            copy = sqlite3.connect(temp)
            try:
                source.backup(copy)
                schema: int = copy.execute("PRAGMA user_version").fetchone()[0]
            finally:
                copy.close()
        finally:
            source.close()
        with temp.open("rb") as handle:
            _add(tar, member, os.fstat(handle.fileno()), handle, mode=mode)
        return schema
    finally:
        for suffix in _DB_SUFFIXES:
            temp.with_name(temp.name + suffix).unlink(missing_ok=True)


def _add_tree(tar: tarfile.TarFile, folder: Path, arc: str, top: Path, skip: frozenset[str],
              notes: list[str]) -> int:  # fmt: skip
    """Add what is under `folder` as `arc/...` (but the entries named `skip`,
    by their names in the archive) and return the number of files added;
    `top` is the real path of the folder backed up, which links must stay in."""
    count = 0
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except FileNotFoundError:  # removed while the backup runs
        return 0
    for entry in entries:
        path, name = Path(entry.path), f"{arc}/{entry.name}"
        if name in skip or (entry.name.startswith(".wiki-") and entry.name.endswith(".tmp")):
            continue  # the latter: replace_file's half-written files
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(info.st_mode):
            _add(tar, name, info)
            count += _add_tree(tar, path, name, top, skip, notes)
        elif stat.S_ISLNK(info.st_mode):
            link = str(path.readlink())
            root = name.split("/", 1)[0]
            if _link_stays(name, link, root) and within(os.path.realpath(path), str(top)):
                _add(tar, name, info, link=link)
            else:
                notes.append(f"{path}: a link out of {top} ({link}): left out")
        elif stat.S_ISREG(info.st_mode):
            count += _add_file(tar, path, name, notes)
        else:
            notes.append(f"{path}: {kind(info.st_mode)}: left out")
    return count


def _add_file(tar: tarfile.TarFile, path: Path, name: str, notes: list[str]) -> int:
    """Add the regular file at `path` (never through a link) and return 1;
    0, with a note, when it was removed or swapped since it was listed."""
    gone = f"{path}: removed or replaced while the backup ran: left out"
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO):  # a link or a socket now
            notes.append(gone)
            return 0
        raise
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            notes.append(gone)
            return 0
        _add(tar, name, info, handle)
    return 1


def _os_line(exc: OSError, where: Path) -> str:
    return f"{exc.filename or where}: {exc.strerror or exc}"


# -- restoring --------------------------------------------------------------------------


@contextlib.contextmanager
def _open_archive(archive: Path) -> Iterator[tuple[tarfile.TarFile, list[tarfile.TarInfo]]]:
    try:
        tar = tarfile.open(archive, "r:gz")  # noqa: SIM115 (closed below, after the checks)
    except FileNotFoundError:
        raise SoulbotError(f"{archive}: no such file") from None
    except _READ_ERRORS as exc:
        raise SoulbotError(f"{archive}: not a .tar.gz file ({exc})") from None
    except OSError as exc:
        raise SoulbotError(_os_line(exc, archive)) from None
    with tar:
        try:
            members = tar.getmembers()
        except _READ_ERRORS as exc:
            raise SoulbotError(f"{archive}: damaged ({exc})") from None
        yield tar, members


def _check_manifest(tar: tarfile.TarFile, members: list[tarfile.TarInfo],
                    archive: Path) -> dict[str, Any]:  # fmt: skip
    found = [m for m in members if m.name == MANIFEST and m.isreg() and m.size <= _MANIFEST_MAX]
    handle = tar.extractfile(found[0]) if found else None
    try:
        manifest = json.loads(handle.read()) if handle is not None else None
    except (ValueError, *_READ_ERRORS):
        manifest = None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("format"), int):
        raise SoulbotError(f"{archive}: not a soulbot backup (no readable {MANIFEST})")
    made = f"soulbot {manifest.get('soulbot', '?')}"
    if manifest["format"] > FORMAT:
        raise SoulbotError(
            f"{archive}: a backup of format {manifest['format']} ({made}); this soulbot "
            f"({__version__}) reads format {FORMAT}: upgrade soulbot to restore it"
        )
    schema = manifest.get("schema")
    if schema is not None and not isinstance(schema, int):
        raise SoulbotError(f"{archive}: not a soulbot backup ({MANIFEST}: schema is {schema!r})")
    if schema is not None and schema > SCHEMA_VERSION:
        raise SoulbotError(
            f"{archive}: its database has schema {schema} ({made}); this soulbot "
            f"({__version__}) reads schema {SCHEMA_VERSION} at most: upgrade soulbot to restore it"
        )
    return manifest


def _check_store(manifest: dict[str, Any], places: Places, archive: Path) -> None:
    """Refuse a backup of another store than the one `places` restores into: a
    SQLite database into a PostgreSQL store, a PostgreSQL store's files into a
    SQLite one, or a SQLite database that would not be where `places` reads
    it. Raises SoulbotError (one line) naming both."""
    had = manifest.get("database")
    store = manifest.get("store")
    engine = store.get("engine") if isinstance(store, dict) else None
    engine = engine or ("sqlite" if had else None)  # format 1: data_dir's soulbot.db, or none
    want = database_member(places)
    mine = "postgresql" if want is None else "sqlite"
    if engine is None or (engine == mine and (had is None or had == want)):
        return
    theirs = f"its database is {had}" if had else f"it holds no database (a {engine} store's)"
    if want is None:
        here = "this config's store is PostgreSQL, which a restore does not write"
    else:
        here = f"this config's store is the SQLite file {places.database} (kept as {want})"
    raise SoulbotError(
        f"{archive}: made for another store: {theirs}; {here}: restore it with the config it "
        "was made with (the manifest's store), then `soulbot store migrate`; nothing was restored"
    )


def _check_members(members: list[tarfile.TarInfo], manifest: dict[str, Any],
                   archive: Path) -> dict[str, list[tarfile.TarInfo]]:  # fmt: skip
    """The members of each folder (its own entry first, when there is one).
    Raises SoulbotError naming the first member refused and why."""
    parts: dict[str, list[tarfile.TarInfo]] = {}
    seen: set[str] = set()
    for member in members:
        problem = _problem(member, seen, manifest.get("database"))
        if problem:
            raise SoulbotError(
                f"{archive}: member {member.name!r}: {problem}; nothing was restored"
            )
        seen.add(member.name)
        if member.name != MANIFEST:
            parts.setdefault(member.name.split("/", 1)[0], []).append(member)
    return parts


def _problem(member: tarfile.TarInfo, seen: set[str], database: object) -> str | None:
    name = member.name
    if name.startswith("/"):
        return "an absolute path"
    if ".." in name.split("/"):
        return "a path with .."
    if name != "/".join(PurePosixPath(name).parts):
        return "not a plain relative path"
    if name in seen:
        return "given twice"
    root = name.split("/", 1)[0]
    if name == MANIFEST:
        return None if member.isreg() else "not a regular file"
    if root == DATABASE:
        return None if member.isreg() and name == database else "not the manifest's database"
    if root not in (DATA, SOULS):
        return f"outside {DATA}/, {SOULS}/ and {DATABASE}/"
    if name == root and not member.isdir():
        return "not a folder"
    if member.islnk():
        return "a hard link"
    if member.issym():
        if posixpath.isabs(member.linkname):
            return f"a link to an absolute path ({member.linkname})"
        if not _link_stays(name, member.linkname, root):
            return f"a link out of {root}/ ({member.linkname})"
        return None
    return None if member.isreg() or member.isdir() else "a device, pipe or other special file"


def _link_stays(name: str, link: str, root: str) -> bool:
    """Whether the relative link `link` at `name`, read as text, leads to
    `root` or under it (the extraction filter checks the paths on disk too)."""
    if posixpath.isabs(link):
        return False
    target = posixpath.normpath(posixpath.join(posixpath.dirname(name), link))
    return target == root or target.startswith(f"{root}/")


def _extract_all(tar: tarfile.TarFile, parts: dict[str, list[tarfile.TarInfo]],
                 targets: dict[str, Path]) -> dict[str, Path]:  # fmt: skip
    """Extract each folder of `parts` beside its target; the folders made are
    removed again when one fails."""
    stages: dict[str, Path] = {}
    try:
        for root, target in targets.items():
            if root in parts:
                stages[root] = _extract(tar, parts[root], root, target)
    except BaseException:
        for stage in stages.values():
            shutil.rmtree(stage, ignore_errors=True)
        raise
    return stages


def _extract(tar: tarfile.TarFile, members: list[tarfile.TarInfo], root: str,
             target: Path) -> Path:  # fmt: skip
    """Extract the members of `root` into a new folder beside `target` (inside
    it, a dot folder, when its parent may not be written: a Docker volume's),
    give its folders their modes, and return it."""
    make_folders(target.parent)
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.restore-", dir=target.parent))
    except PermissionError:
        if not target.is_dir():
            raise
        stage = Path(tempfile.mkdtemp(prefix=".restore-", dir=target))
    cut = len(root) + 1

    def inside(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
        return tarfile.data_filter(member.replace(name=member.name[cut:], deep=False), dest)

    try:
        tar.extractall(stage, members=[m for m in members if m.name != root], filter=inside)
        folders = [m for m in members if m.isdir() and m.name != root]
        for member in sorted(folders, key=lambda m: m.name.count("/"), reverse=True):
            path = stage / member.name[cut:]
            if not path.is_symlink():
                path.chmod(_folder_mode(member.mode))
        own = [m.mode for m in members if m.name == root]
        stage.chmod(_folder_mode(own[0]) if own else PRIVATE_FOLDER)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return stage


def _folder_mode(mode: int) -> int:
    """A folder's mode as restored: the owner may always enter and write; as the
    "data" filter does for files, no group or other write, no special bits."""
    return (mode & 0o755) | 0o700


def _occupied(target: Path, leave_out: frozenset[str]) -> bool:
    """Whether something is at `target`: a folder holding more than `leave_out`
    names, or anything that is not a folder."""
    try:
        return any(entry.name not in leave_out for entry in target.iterdir())
    except FileNotFoundError:
        return os.path.lexists(target)
    except NotADirectoryError:
        return True


def _taken(root: str, target: Path, leave_out: frozenset[str]) -> bool:
    """Whether something is at the target of `root`: for the database, the
    file or one of the files SQLite keeps beside it."""
    if root == DATABASE:
        return any(os.path.lexists(f"{target}{suffix}") for suffix in _DB_SUFFIXES)
    return _occupied(target, leave_out)


def _put_database(stage: Path, target: Path, stamp: str) -> Path | None:
    """Move the database file restored in `stage` to `target`; the database
    there, with its -wal, -shm and -journal files, goes first into a new folder
    `<name>.before-restore-<stamp>` beside it (a WAL file must never meet
    another database). Return that folder, or None when nothing was there."""
    there = [Path(f"{target}{s}") for s in _DB_SUFFIXES if os.path.lexists(f"{target}{s}")]
    aside = _aside(target, stamp) if there else None
    if aside is not None:
        aside.mkdir(PRIVATE_FOLDER)  # FileExistsError when it is there: nothing moved
        for path in there:
            path.rename(aside / path.name)
    (stage / target.name).rename(target)
    stage.rmdir()
    return aside


def _aside(target: Path, stamp: str) -> Path:
    return target.with_name(f"{target.name}.before-restore-{stamp}")


def _put_in_place(stage: Path, target: Path, leave_out: frozenset[str], stamp: str) -> Path | None:
    """Move `stage` to `target`, moving what is there aside first; return
    where that went. A folder that stays (one holding only `leave_out` names,
    or a mount point) gets the staged entries."""
    inner = frozenset({stage.name}) if stage.parent == target else frozenset[str]()
    aside = _move_aside(target, stamp, inner) if _occupied(target, leave_out | inner) else None
    if target.is_dir():
        for entry in stage.iterdir():
            shutil.move(entry, target / entry.name)  # a copy when the target is a mount point
        target.chmod(stat.S_IMODE(stage.stat().st_mode))
        stage.rmdir()
    else:
        stage.rename(target)
    return aside


def _move_aside(target: Path, stamp: str, keep: frozenset[str]) -> Path:
    """Rename `target` to `<name>.before-restore-<stamp>` beside it. A folder
    that cannot be renamed (a mount point, a Docker volume; a parent that may
    not be written) keeps its entries, but the names `keep`, in a folder
    `.before-restore-<stamp>` inside it, on the same volume (soulbot reads no
    dot folder of data_dir or workspaces)."""
    aside = _aside(target, stamp)
    if os.path.lexists(aside):
        raise FileExistsError(errno.EEXIST, "already exists", str(aside))
    try:
        target.rename(aside)
    except OSError as exc:
        if exc.errno not in (errno.EBUSY, errno.EXDEV, errno.EACCES, errno.EPERM):
            raise
    else:
        return aside
    inner = target / f".before-restore-{stamp}"
    inner.mkdir(PRIVATE_FOLDER)
    for entry in sorted(target.iterdir()):
        if entry != inner and entry.name not in keep:
            entry.rename(inner / entry.name)
    return inner
