"""Backups and restores (bot/storage/backup.py): what a backup holds, that its
database is one instant's while a writer goes on, the round trip, and the
members, manifests and places a restore refuses."""

from __future__ import annotations

import dataclasses
import errno
import io
import json
import os
import shutil
import sqlite3
import stat
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.errors import SoulbotError
from bot.storage.backup import Places, backup_name, restore_backup, write_backup
from bot.storage.db import DB_NAME, SCHEMA_VERSION, connect
from tests.storage.writer import INSERT, Writer

LEAVE_OUT = frozenset({"soulbot.lock", "soulbot.pid", "health.json", "locks", "exports"})
WHEN = datetime(2026, 5, 4, 3, 2, 1, tzinfo=UTC)


def write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def private_folder(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)


@pytest.fixture
def places(tmp_path: Path) -> Places:
    """A data_dir (database with two rows, a private wiki, a kept image, the
    daemon's files) and a workspaces folder with one soul, its wiki and a
    SOUL.md backup."""
    data, souls = tmp_path / "data", tmp_path / "workspaces"
    conn = connect(data / DB_NAME)
    conn.executemany(INSERT, [("first",), ("second",)])
    conn.close()
    wiki = data / "memory" / "wren" / "user" / "telegram" / "42"
    for folder in (data / "memory", data / "memory" / "wren", wiki.parent.parent, wiki.parent):
        private_folder(folder)
    private_folder(wiki)
    write(wiki / "index.md", "# Ann\n", 0o600)
    write(wiki / "entities" / "ann.md", "Ann likes tea.\n", 0o600)
    write(data / "media" / "s" / "photo.jpg", "\xff\xd8 not really", 0o600)
    for name in ("soulbot.lock", "soulbot.pid", "health.json"):
        write(data / name, "runtime")
    write(data / "exports" / "wiki.md", "an export")
    write(data / "locks" / "compile-x.lock", "")
    write(data / "memory" / ".wiki-0123456789ab.tmp", "half written")
    soul = souls / "wren"
    write(soul / "SOUL.md", "---\nname: Wren\n---\nBody\n")
    write(soul / "STYLE.md", "Short sentences.\n")
    write(soul / "memory" / "index.md", "# Wren's wiki\n")
    write(soul / "memory" / "concepts" / "tea.md", "Tea.\n")
    write(soul / "memory" / ".meta" / "backups" / "SOUL.md.2026-05-01", "old soul\n", 0o600)
    return Places(data, souls, data / DB_NAME, LEAVE_OUT)


def files_of(root: Path, skip: frozenset[str] = frozenset()) -> dict[str, tuple[int, str]]:
    """Every entry under `root` (but the names `skip` directly in it) as its
    relative path: (mode, content, link target or "<folder>")."""
    found: dict[str, tuple[int, str]] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if relative.parts[0] in skip:
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_symlink():
            found[str(relative)] = (0, f"-> {path.readlink()}")
        elif path.is_dir():
            found[str(relative)] = (mode, "<folder>")
        else:
            found[str(relative)] = (mode, path.read_text(errors="replace"))
    return found


def contents(db: Path) -> list[tuple[int, str]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT id, content FROM history ORDER BY id").fetchall()
    finally:
        conn.close()


def fresh(tmp_path: Path, name: str = "new") -> Places:
    data = tmp_path / name / "data"
    return Places(data, tmp_path / name / "workspaces", data / DB_NAME, LEAVE_OUT)


@contextmanager
def writing(db: Path) -> Iterator[Writer]:
    writer = Writer(db)
    writer.start()
    try:
        yield writer
    finally:
        writer.stop.set()
        writer.join(10)
    assert not writer.is_alive()
    assert writer.error is None, writer.error


def snapshot_of(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extract(f"data_dir/{DB_NAME}", into, filter="data")
    return into / "data_dir" / DB_NAME


def test_a_backup_while_a_writer_inserts_holds_every_row_committed_before_it(
    places: Places, tmp_path: Path
) -> None:
    with writing(places.data_dir / DB_NAME) as writer:
        writer.reach(200)
        before = writer.last
        made = write_backup(places, tmp_path / "backups")
        after = contents(snapshot_of(made.path, tmp_path / "out"))
        writer.reach(after[-1][0] + 50)  # it goes on writing: the backup holds no lock
    ids = [row_id for row_id, _ in after]
    assert ids == list(range(1, len(ids) + 1))  # one instant's rows, none missing
    assert len(ids) >= before
    assert after[:2] == [(1, "first"), (2, "second")]
    conn = sqlite3.connect(tmp_path / "out" / "data_dir" / DB_NAME)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_what_a_backup_holds_and_its_manifest(places: Places, tmp_path: Path) -> None:
    made = write_backup(places, tmp_path / "backups", WHEN)
    assert made.path == tmp_path / "backups" / "soulbot-backup-20260504-030201.tar.gz"
    assert made.path.name == backup_name(WHEN)
    assert stat.S_IMODE(made.path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "backups").stat().st_mode) == 0o700
    assert made.size == made.path.stat().st_size
    assert made.notes == ()
    assert sorted(p.name for p in (tmp_path / "backups").iterdir()) == [made.path.name]
    with tarfile.open(made.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert manifest == made.manifest
    assert manifest["format"] == 2 and manifest["schema"] == SCHEMA_VERSION
    assert manifest["created"] == "2026-05-04T03:02:01Z"
    assert manifest["souls"] == ["wren"]
    assert manifest["database"] == "data_dir/soulbot.db"
    assert manifest["files"] == {"data_dir": 3, "workspaces": 5}
    names = set(members)
    assert {"data_dir/soulbot.db", "data_dir/media/s/photo.jpg",
            "data_dir/memory/wren/user/telegram/42/entities/ann.md",
            "workspaces/wren/SOUL.md", "workspaces/wren/memory/concepts/tea.md",
            "workspaces/wren/memory/.meta/backups/SOUL.md.2026-05-01"} <= names  # fmt: skip
    left_out = ("soulbot.db-wal", "soulbot.db-shm", "soulbot.lock", "soulbot.pid",
                "health.json", "exports", "locks", "memory/.wiki-0123456789ab.tmp")  # fmt: skip
    assert not any(name.startswith(f"data_dir/{out}") for name in names for out in left_out)
    assert members["data_dir"].mode == 0o700
    assert members["data_dir/soulbot.db"].mode == 0o600
    assert members["data_dir/memory/wren/user/telegram/42"].mode == 0o700
    assert members["data_dir/memory/wren/user/telegram/42/index.md"].mode == 0o600
    assert members["workspaces/wren/memory/.meta/backups/SOUL.md.2026-05-01"].mode == 0o600
    assert members["workspaces/wren/SOUL.md"].mode == 0o644


def test_the_round_trip_gives_the_same_files_rows_and_modes(places: Places, tmp_path: Path) -> None:
    made = write_backup(places, tmp_path / "backups")
    target = fresh(tmp_path)
    restored = restore_backup(target, made.path)
    assert restored.manifest == made.manifest and restored.aside == ()
    assert restored.folders == (target.workspaces, target.data_dir)
    skip = LEAVE_OUT | {DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm"}
    old = files_of(places.data_dir, skip)
    del old["memory/.wiki-0123456789ab.tmp"]
    assert files_of(target.data_dir, skip) == old
    assert files_of(target.workspaces) == files_of(places.workspaces)
    assert stat.S_IMODE(target.data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((target.data_dir / DB_NAME).stat().st_mode) == 0o600
    assert contents(target.data_dir / DB_NAME) == contents(places.data_dir / DB_NAME)
    assert sorted(p.name for p in target.data_dir.parent.iterdir()) == ["data", "workspaces"]


def test_an_older_schema_restores_and_migrates_on_open(places: Places, tmp_path: Path) -> None:
    conn = connect(places.data_dir / DB_NAME)
    conn.execute("DROP TABLE sent_messages")
    conn.execute("DROP TABLE memory_folds")
    conn.execute("PRAGMA user_version=1")
    conn.close()
    made = write_backup(places, tmp_path / "backups")
    assert made.manifest["schema"] == 1
    target = fresh(tmp_path)
    restore_backup(target, made.path)
    conn = connect(target.data_dir / DB_NAME)
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    rows = conn.execute("SELECT content FROM history ORDER BY id").fetchall()
    conn.close()
    assert version == SCHEMA_VERSION
    assert {"sent_messages", "memory_folds"} <= tables
    assert rows == [("first",), ("second",)]


def test_links_that_stay_inside_are_kept_and_links_out_left_out(
    places: Places, tmp_path: Path
) -> None:
    soul = places.workspaces / "wren"
    (soul / "memory" / "tea.md").symlink_to("concepts/tea.md")
    (soul / "passwd").symlink_to("/etc/passwd")
    (soul / "up").symlink_to("../../outside")
    os.mkfifo(places.data_dir / "pipe")
    made = write_backup(places, tmp_path / "backups")
    assert len(made.notes) == 3
    assert any(note.startswith(f"{soul / 'passwd'}: a link out of") for note in made.notes)
    assert any(note.startswith(f"{soul / 'up'}: a link out of") for note in made.notes)
    assert f"{places.data_dir / 'pipe'}: a named pipe: left out" in made.notes
    target = fresh(tmp_path)
    restore_backup(target, made.path)
    kept = target.workspaces / "wren" / "memory" / "tea.md"
    assert kept.is_symlink() and kept.read_text() == "Tea.\n"
    assert not (target.workspaces / "wren" / "passwd").exists()
    assert not os.path.lexists(target.workspaces / "wren" / "up")


def test_where_a_backup_goes(places: Places, tmp_path: Path) -> None:
    named = write_backup(places, tmp_path / "keep" / "before-upgrade.tar.gz")
    assert named.path == tmp_path / "keep" / "before-upgrade.tar.gz"
    with pytest.raises(SoulbotError, match=r"before-upgrade\.tar\.gz: already exists$"):
        write_backup(places, named.path)
    with pytest.raises(SoulbotError, match=r"inside .*data, which it backs up"):
        write_backup(places, places.data_dir / "backups")
    assert not (places.data_dir / "backups").exists()
    with pytest.raises(SoulbotError, match="nothing to back up"):
        write_backup(fresh(tmp_path, "none"), tmp_path / "backups")
    (tmp_path / "file").write_text("")
    with pytest.raises(SoulbotError, match=r"file: (File exists|Not a directory)"):
        write_backup(places, tmp_path / "file" / "b.tar.gz")


def test_a_failed_backup_leaves_no_file(places: Places, tmp_path: Path) -> None:
    (places.data_dir / DB_NAME).write_bytes(b"not a database at all, but long enough" * 100)
    with pytest.raises(SoulbotError, match=r"soulbot\.db: cannot be copied: "):
        write_backup(places, tmp_path / "backups")
    assert list((tmp_path / "backups").iterdir()) == []


def archive(path: Path, *members: tuple[tarfile.TarInfo, bytes],
            manifest: dict[str, object] | None = None) -> Path:  # fmt: skip
    """A backup file of `members` (each with its data) and a manifest."""
    data = json.dumps(manifest or {"format": 1, "soulbot": "0.1.0", "schema": 4}).encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        folder = tarfile.TarInfo("data_dir")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o700
        tar.addfile(folder)
        for member, content in members:
            member.size = len(content) if member.isreg() else 0
            tar.addfile(member, io.BytesIO(content) if member.isreg() else None)
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (member("../evil"), "'../evil': a path with .."),
        (member("data_dir/../../evil"), "'data_dir/../../evil': a path with .."),
        (member("/tmp/evil"), "'/tmp/evil': an absolute path"),
        (member("data_dir/./x"), "'data_dir/./x': not a plain relative path"),
        (member("evil.txt"), "'evil.txt': outside data_dir/, workspaces/ and database/"),
        (member("database/other.db"), "'database/other.db': not the manifest's database"),
        (member("data_dir/out", tarfile.SYMTYPE, "../../outside"),
         "'data_dir/out': a link out of data_dir/ (../../outside)"),
        (member("data_dir/out", tarfile.SYMTYPE, "/etc/passwd"),
         "'data_dir/out': a link to an absolute path (/etc/passwd)"),
        (member("workspaces/w/db", tarfile.SYMTYPE, "../../data_dir/soulbot.db"),
         "'workspaces/w/db': a link out of workspaces/"),
        (member("data_dir/hard", tarfile.LNKTYPE, "manifest.json"), "'data_dir/hard': a hard link"),
        (member("data_dir/pipe", tarfile.FIFOTYPE), "'data_dir/pipe': a device, pipe or other"),
        (member("data_dir", tarfile.REGTYPE), "'data_dir': given twice"),
    ],
    ids=["dotdot", "dotdot-inside", "absolute", "dot", "stray", "stray-database", "link-out",
         "link-absolute", "link-across", "hard-link", "fifo", "twice"],
)  # fmt: skip
def test_a_hostile_member_is_refused_and_nothing_written(
    tmp_path: Path, bad: tarfile.TarInfo, says: str
) -> None:
    path = archive(tmp_path / "evil.tar.gz", (member("data_dir/fine.md"), b"fine"), (bad, b"x"))
    target = fresh(tmp_path)
    with pytest.raises(SoulbotError) as caught:
        restore_backup(target, path)
    message = str(caught.value)
    assert message.startswith(f"{path}: member {says}") and "\n" not in message
    assert message.endswith("; nothing was restored")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.tar.gz"]


LINK = tarfile.SYMTYPE


@pytest.mark.parametrize(
    ("members", "says"),
    [
        ([member("data_dir/e", LINK, "d/d/d/../../.."), member("data_dir/d", LINK, ".")],
         "'data_dir/e': a link out of data_dir/ (d/d/d/../../..), followed link by link"),
        ([member("data_dir/d", LINK, "."), member("data_dir/e", LINK, "d/d/d/../../..")],
         "'data_dir/e': a link out of data_dir/ (d/d/d/../../..), followed link by link"),
        ([member("data_dir/m", tarfile.DIRTYPE), member("data_dir/e", LINK, "m/up/m/up/../.."),
          member("data_dir/m/up", LINK, "..")],
         "'data_dir/e': a link out of data_dir/ (m/up/m/up/../..), followed link by link"),
        ([member("data_dir/sub", tarfile.DIRTYPE), member("data_dir/l", LINK, "sub"),
          member("data_dir/l/x.md")],
         "'data_dir/l/x.md': inside the link data_dir/l"),
    ],
    ids=["chain-first", "chain-last", "chain-below", "through-a-link"],
)  # fmt: skip
def test_a_chain_of_links_out_is_refused_and_nothing_written(
    tmp_path: Path, members: list[tarfile.TarInfo], says: str
) -> None:
    path = archive(tmp_path / "chain.tar.gz", *((m, b"x") for m in members))
    with pytest.raises(SoulbotError) as caught:
        restore_backup(fresh(tmp_path), path)
    assert str(caught.value) == f"{path}: member {says}; nothing was restored"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.tar.gz"]


def test_a_gzip_bomb_is_refused_in_one_line_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = archive(tmp_path / "bomb.tar.gz", (member("data_dir/zeros"), bytes(16 << 20)))
    assert path.stat().st_size < 64 << 10
    target = fresh(tmp_path)
    free = shutil.disk_usage(tmp_path)._replace(free=8 << 20)
    with monkeypatch.context() as disk:
        disk.setattr(shutil, "disk_usage", lambda where: free)
        with pytest.raises(SoulbotError) as full:
            restore_backup(target, path)
    assert str(full.value) == (
        f"{path}: refused: it unpacks to 16.0 MiB on the disk of {tmp_path}, which has 8.0 MiB "
        "free (a restore leaves 64.0 MiB): free some space, or restore elsewhere; nothing was "
        "restored"
    )
    with pytest.raises(SoulbotError) as capped:
        restore_backup(target, path, max_size=1 << 20)
    assert str(capped.value) == (
        f"{path}: refused: it unpacks to 16.0 MiB, more than the 1.0 MiB a restore takes (a "
        "damaged or hostile file?); nothing was restored"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.tar.gz"]


def test_the_manifest_is_checked_first(tmp_path: Path) -> None:
    target = fresh(tmp_path)
    newer = archive(tmp_path / "newer.tar.gz", manifest={"format": 1, "soulbot": "9.0.0",
                                                         "schema": SCHEMA_VERSION + 1})  # fmt: skip
    with pytest.raises(SoulbotError) as caught:
        restore_backup(target, newer)
    assert str(caught.value) == (
        f"{newer}: its database has schema {SCHEMA_VERSION + 1} (soulbot 9.0.0); this soulbot "
        f"(0.1.0) reads schema {SCHEMA_VERSION} at most: upgrade soulbot to restore it"
    )
    later = archive(tmp_path / "later.tar.gz", manifest={"format": 3, "schema": 1})
    with pytest.raises(SoulbotError, match=r"a backup of format 3 .* reads format 2"):
        restore_backup(target, later)
    (tmp_path / "plain.tar.gz").write_text("not a tar")
    with pytest.raises(SoulbotError, match=r"plain\.tar\.gz: not a \.tar\.gz file"):
        restore_backup(target, tmp_path / "plain.tar.gz")
    with tarfile.open(tmp_path / "bare.tar.gz", "w:gz") as tar:
        tar.addfile(member("data_dir/x.md"), io.BytesIO(b""))
    with pytest.raises(SoulbotError, match=r"bare\.tar\.gz: not a soulbot backup"):
        restore_backup(target, tmp_path / "bare.tar.gz")
    with pytest.raises(SoulbotError, match=r"missing\.tar\.gz: no such file"):
        restore_backup(target, tmp_path / "missing.tar.gz")
    assert not (tmp_path / "new").exists()


def test_a_full_place_is_refused_and_force_moves_it_aside(places: Places, tmp_path: Path) -> None:
    made = write_backup(places, tmp_path / "backups")
    write(places.workspaces / "wren" / "SOUL.md", "changed since\n")
    (places.data_dir / "memory" / "later.md").write_text("later")
    with pytest.raises(SoulbotError) as caught:
        restore_backup(places, made.path, now=WHEN)
    assert str(caught.value) == (
        f"not empty: {places.workspaces}, {places.data_dir}: restore into an empty place, or "
        "force it (--force), which moves what is there aside to "
        "workspaces.before-restore-20260504-030201, data.before-restore-20260504-030201"
    )
    restored = restore_backup(places, made.path, force=True, now=WHEN)
    data_aside = tmp_path / "data.before-restore-20260504-030201"
    souls_aside = tmp_path / "workspaces.before-restore-20260504-030201"
    assert restored.aside == ((places.workspaces, souls_aside), (places.data_dir, data_aside))
    assert (souls_aside / "wren" / "SOUL.md").read_text() == "changed since\n"
    assert (data_aside / "memory" / "later.md").read_text() == "later"
    assert (data_aside / "soulbot.lock").exists()
    assert (places.workspaces / "wren" / "SOUL.md").read_text().startswith("---\nname: Wren")
    assert not (places.data_dir / "memory" / "later.md").exists()
    assert contents(places.data_dir / DB_NAME)[:2] == [(1, "first"), (2, "second")]
    assert not list(tmp_path.glob(".*restore-*"))


def test_a_data_dir_holding_only_what_is_not_data_counts_as_empty(
    places: Places, tmp_path: Path
) -> None:
    made = write_backup(places, tmp_path / "backups")
    target = fresh(tmp_path)
    write(target.data_dir / "soulbot.lock", "")
    write(target.data_dir / "exports" / "mine.md", "an export of mine")
    restored = restore_backup(target, made.path)
    assert restored.aside == ()
    assert (target.data_dir / "soulbot.lock").exists()
    assert (target.data_dir / "exports" / "mine.md").read_text() == "an export of mine"
    assert (target.data_dir / "memory" / "wren").is_dir()
    assert stat.S_IMODE(target.data_dir.stat().st_mode) == 0o700


def test_hold_is_taken_after_the_checks_and_before_any_write(
    places: Places, tmp_path: Path
) -> None:
    made = write_backup(places, tmp_path / "backups")
    evil = archive(tmp_path / "evil.tar.gz", (member("../evil"), b"x"))
    held: list[str] = []
    busy = threading.Event()

    @contextmanager
    def hold() -> Iterator[None]:
        if busy.is_set():
            raise SoulbotError("data is in use by another soulbot (pid 7)")
        held.append("taken")
        yield
        held.append("released")

    target = fresh(tmp_path)
    with pytest.raises(SoulbotError, match="a path with"):
        restore_backup(target, evil, hold=hold)
    assert held == []
    restore_backup(target, made.path, hold=hold)
    assert held == ["taken", "released"]
    busy.set()
    with pytest.raises(SoulbotError, match="in use by another soulbot"):
        restore_backup(fresh(tmp_path, "other"), made.path, hold=hold)
    assert not (tmp_path / "other").exists()


def test_force_on_a_mount_point_moves_its_entries_into_a_folder_inside(
    places: Places, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = write_backup(places, tmp_path / "backups")
    (places.data_dir / "memory" / "later.md").write_text("later")
    rename = Path.rename

    def busy(self: Path, target: str | os.PathLike[str]) -> Path:
        if self == places.data_dir:  # a Docker volume: the kernel says EBUSY
            raise OSError(errno.EBUSY, "Device or resource busy", str(self))
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", busy)
    restored = restore_backup(places, made.path, force=True, now=WHEN)
    inner = places.data_dir / ".before-restore-20260504-030201"
    assert restored.aside[1] == (places.data_dir, inner)
    assert (inner / "memory" / "later.md").read_text() == "later"
    assert stat.S_IMODE(inner.stat().st_mode) == 0o700
    assert not (places.data_dir / "memory" / "later.md").exists()
    assert (places.data_dir / "memory" / "wren").is_dir()
    assert contents(places.data_dir / DB_NAME)[:2] == [(1, "first"), (2, "second")]
    assert sorted(p.name for p in places.data_dir.iterdir()) == [
        ".before-restore-20260504-030201", "media", "memory", DB_NAME,
    ]  # fmt: skip


def test_a_volume_in_a_folder_that_may_not_be_written_is_restored_in_place(
    places: Places, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = write_backup(places, tmp_path / "backups")
    (places.workspaces / "wren" / "SOUL.md").write_text("changed since\n")
    mkdtemp, rename = tempfile.mkdtemp, Path.rename

    def no_write(prefix: str, dir: Path) -> str:
        if Path(dir) == tmp_path:  # as uid 10001 in /srv/soulbot, which root owns
            raise PermissionError(errno.EACCES, "Permission denied", str(dir))
        return mkdtemp(prefix=prefix, dir=dir)

    def no_rename(self: Path, target: str | os.PathLike[str]) -> Path:
        if self.parent == tmp_path:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return rename(self, target)

    monkeypatch.setattr(tempfile, "mkdtemp", no_write)
    monkeypatch.setattr(Path, "rename", no_rename)
    restored = restore_backup(places, made.path, force=True, now=WHEN)
    inner = ".before-restore-20260504-030201"
    assert [aside for _, aside in restored.aside] == [places.workspaces / inner,
                                                      places.data_dir / inner]  # fmt: skip
    assert (places.workspaces / inner / "wren" / "SOUL.md").read_text() == "changed since\n"
    assert (places.workspaces / "wren" / "SOUL.md").read_text().startswith("---\nname: Wren")
    assert sorted(p.name for p in places.workspaces.iterdir()) == [inner, "wren"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backups", "data", "workspaces"]


def test_a_database_elsewhere_goes_aside_with_its_wal_on_force(
    places: Places, tmp_path: Path
) -> None:
    outside = dataclasses.replace(places, database=tmp_path / "db" / "x.db")
    (tmp_path / "db").mkdir()
    (places.data_dir / DB_NAME).rename(outside.database)  # type: ignore[arg-type]
    made = write_backup(outside, tmp_path / "backups", WHEN)
    assert made.manifest["database"] == "database/x.db"
    target = dataclasses.replace(fresh(tmp_path), database=tmp_path / "new-db" / "x.db")
    live = connect(tmp_path / "new-db" / "x.db")  # a -wal beside it while open
    live.execute(INSERT, ("not restored",))
    with pytest.raises(SoulbotError, match=r"not empty: .*new-db/x\.db"):
        restore_backup(target, made.path, now=WHEN)
    restored = restore_backup(target, made.path, force=True, now=WHEN)
    live.close()
    aside = tmp_path / "new-db" / "x.db.before-restore-20260504-030201"
    assert (target.database, aside) in restored.aside
    assert {p.name for p in aside.iterdir()} >= {"x.db", "x.db-wal"}
    assert sorted(p.name for p in aside.parent.iterdir()) == ["x.db", aside.name]
    assert contents(tmp_path / "new-db" / "x.db")[:2] == [(1, "first"), (2, "second")]
    assert [text for _, text in contents(aside / "x.db")] == ["not restored"]  # its WAL went too
