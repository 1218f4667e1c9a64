"""`soulbot backup` and `soulbot restore` as a user runs them: a subprocess,
real files, a writer on the database meanwhile, a daemon's lock held."""

from __future__ import annotations

import io
import json
import os
import re
import sqlite3
import stat
import tarfile
from pathlib import Path

import pytest

from bot.app.owner import own_data_dir
from bot.storage.db import DB_NAME, SCHEMA_VERSION, connect
from tests.run_cli import soulbot
from tests.storage.writer import INSERT, Writer

REPO = Path(__file__).resolve().parents[2]
CONFIG = "workspaces: ./workspaces\ndata_dir: ./data\n"


def write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def place(folder: Path) -> Path:
    """A folder with a soulbot.yaml (workspaces and data_dir beside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "soulbot.yaml").write_text(CONFIG)
    return folder


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A soulbot's folder: config, a database with a row, a private wiki, a
    soul with its wiki and a SOUL.md backup, and the daemon's own files."""
    home = place(tmp_path / "home")
    conn = connect(home / "data" / DB_NAME)
    conn.execute(INSERT, ("first",))
    conn.close()
    wiki = home / "data" / "memory" / "wren" / "user" / "telegram" / "42"
    wiki.mkdir(mode=0o700, parents=True)
    write(wiki / "index.md", "# Ann\n", 0o600)
    write(home / "data" / "health.json", "{}")
    write(home / "data" / "exports" / "wiki.md", "an export")
    write(home / "workspaces" / "wren" / "SOUL.md", "---\nname: Wren\n---\nBody\n")
    write(home / "workspaces" / "wren" / "memory" / "index.md", "# Wren\n")
    write(home / "workspaces" / "wren" / "memory" / ".meta" / "backups" / "SOUL.md.2026-05-01",
          "old\n", 0o600)  # fmt: skip
    return home


def files_of(root: Path) -> dict[str, tuple[int, str]]:
    """Every file and folder under `root` but the database's: (mode, content)."""
    return {
        str(path.relative_to(root)): (
            stat.S_IMODE(path.stat().st_mode),
            "<folder>" if path.is_dir() else path.read_text(),
        )
        for path in sorted(root.rglob("*"))
        if not path.name.startswith(DB_NAME)
    }


def ids_in(db: Path) -> list[int]:
    conn = sqlite3.connect(db)
    try:
        return [row[0] for row in conn.execute("SELECT id FROM history ORDER BY id")]
    finally:
        conn.close()


def backup_of(home: Path, dest: str = "../backups") -> Path:
    result = soulbot("backup", dest, cwd=home)
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    path = Path(line.removeprefix("backup written: ").split(" (")[0])
    return path


def test_a_backup_while_a_writer_inserts_restores_to_the_same_files_and_rows(
    home: Path, tmp_path: Path
) -> None:
    writer = Writer(home / "data" / DB_NAME)
    writer.start()
    try:
        writer.reach(200)
        before = writer.last
        result = soulbot("backup", "../backups", cwd=home)
        writer.reach(writer.last + 50)  # still writing: the backup left no lock behind
    finally:
        writer.stop.set()
        writer.join(10)
    assert writer.error is None, writer.error
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    (line,) = result.stdout.splitlines()
    (path,) = (tmp_path / "backups").iterdir()
    assert path.name.startswith("soulbot-backup-") and path.name.endswith(".tar.gz")
    assert line.startswith(f"backup written: {path} (")
    assert line.endswith(": the database, 1 file(s) of data_dir, 1 soul folder(s) with 3 file(s))")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    other = place(tmp_path / "other")
    restored = soulbot("restore", str(path), cwd=other)
    assert restored.returncode == 0, restored.stderr
    (said,) = restored.stdout.splitlines()
    assert said.startswith(f"restored {path} (soulbot 0.1.0, schema {SCHEMA_VERSION}, made ")
    assert said.endswith(f"into {other / 'workspaces'} and {other / 'data'}")
    ids = ids_in(other / "data" / DB_NAME)
    assert ids == list(range(1, len(ids) + 1)) and len(ids) >= before
    assert files_of(other / "workspaces") == files_of(home / "workspaces")
    kept = {k: v for k, v in files_of(home / "data").items() if k.split("/")[0] == "memory"}
    assert files_of(other / "data") == {**kept, "soulbot.lock": (0o600, "")}  # restore's own
    assert stat.S_IMODE((other / "data" / DB_NAME).stat().st_mode) == 0o600
    assert stat.S_IMODE((other / "data").stat().st_mode) == 0o700
    usage = soulbot("usage", cwd=other)  # the restored database opens
    assert usage.returncode == 0, usage.stderr


def test_restore_refuses_while_a_daemon_holds_data_dir(home: Path, tmp_path: Path) -> None:
    path = backup_of(home)
    other = place(tmp_path / "other")
    with own_data_dir(other / "data"):
        result = soulbot("restore", str(path), cwd=other)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: restore failed: data is in use by another soulbot "
        f"(pid {os.getpid()}): stop it first, or give this one a data_dir of its own"
    ]
    assert not (other / "workspaces").exists()
    assert sorted(p.name for p in (other / "data").iterdir()) == ["soulbot.lock"]


def test_force_moves_what_is_there_aside(home: Path) -> None:
    path = backup_of(home)
    write(home / "workspaces" / "wren" / "SOUL.md", "changed since\n")
    refused = soulbot("restore", str(path), cwd=home)
    assert refused.returncode == 1
    (line,) = refused.stderr.splitlines()
    assert line.startswith(
        f"error: restore failed: not empty: {home / 'workspaces'}, {home / 'data'}: "
    )
    assert (home / "workspaces" / "wren" / "SOUL.md").read_text() == "changed since\n"
    forced = soulbot("restore", str(path), "--force", cwd=home)
    assert forced.returncode == 0, forced.stderr
    asides = sorted(p.name for p in home.iterdir() if ".before-restore-" in p.name)
    assert [name.split(".before-restore-")[0] for name in asides] == ["data", "workspaces"]
    assert all(f"the old {home / name.split('.')[0]} is now at {home / name}" in forced.stdout
               for name in asides)  # fmt: skip
    souls_aside = home / next(n for n in asides if n.startswith("workspaces"))
    assert (souls_aside / "wren" / "SOUL.md").read_text() == "changed since\n"
    assert (home / "workspaces" / "wren" / "SOUL.md").read_text().startswith("---\nname: Wren")
    assert ids_in(home / "data" / DB_NAME) == [1]


def hostile(path: Path, name: str, manifest: dict[str, object]) -> Path:
    data = json.dumps(manifest).encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        evil = tarfile.TarInfo(name)
        evil.size = 4
        tar.addfile(evil, io.BytesIO(b"evil"))
    return path


@pytest.mark.parametrize(
    ("name", "schema", "says"),
    [
        ("../evil", 4, "member '../evil': a path with ..; nothing was restored"),
        ("/tmp/evil", 4, "member '/tmp/evil': an absolute path; nothing was restored"),
        ("data_dir/x", SCHEMA_VERSION + 1,
         f"its database has schema {SCHEMA_VERSION + 1} (soulbot 9.9.9); this soulbot (0.1.0) "
         f"reads schema {SCHEMA_VERSION} at most: upgrade soulbot to restore it"),
    ],
    ids=["dotdot", "absolute", "newer-schema"],
)  # fmt: skip
def test_a_hostile_or_newer_backup_is_refused_in_one_line(
    tmp_path: Path, name: str, schema: int, says: str
) -> None:
    other = place(tmp_path / "other")
    path = hostile(tmp_path / "b.tar.gz", name, {"format": 1, "soulbot": "9.9.9", "schema": schema})
    result = soulbot("restore", str(path), cwd=other)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"error: restore failed: {path}: {says}"]
    assert sorted(p.name for p in other.iterdir()) == ["soulbot.yaml"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar.gz", "other"]


def test_a_failed_backup_says_what_and_where(home: Path) -> None:
    inside = soulbot("backup", "data/backups", cwd=home)
    assert inside.returncode == 1 and inside.stdout == ""
    (line,) = inside.stderr.splitlines()
    folder, data = re.escape(str(home / "data" / "backups")), re.escape(str(home / "data"))
    assert re.fullmatch(rf"error: backup failed: {folder}/soulbot-backup-\d{{8}}-\d{{6}}\.tar\.gz: "
                        rf"inside {data}, which it backs up: write it elsewhere", line)  # fmt: skip
    assert not (home / "data" / "backups").exists()
    (home / "in-the-way").write_text("")
    blocked = soulbot("backup", "in-the-way/b.tar.gz", cwd=home)
    assert blocked.returncode == 1
    (line,) = blocked.stderr.splitlines()
    assert line == f"error: backup failed: {home / 'in-the-way'}: File exists"


def test_a_database_elsewhere_is_backed_up_and_restored_where_the_config_reads_it(
    home: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere" / "x.db"
    elsewhere.parent.mkdir()
    (home / "data" / DB_NAME).rename(elsewhere)  # the config's store is now x.db
    stale = connect(home / "data" / DB_NAME)  # an old soulbot.db, not the store
    stale.close()
    (home / "soulbot.yaml").write_text(CONFIG + f"store:\n  url: sqlite:///{elsewhere}\n")
    conn = connect(elsewhere)  # open, in WAL mode, as a daemon holds it
    conn.execute(INSERT, ("written just before",))
    result = soulbot("backup", "../backups", cwd=home)
    conn.close()
    assert result.returncode == 0, result.stderr
    assert "(" in result.stdout and ": the database, " in result.stdout
    (path,) = (tmp_path / "backups").iterdir()
    with tarfile.open(path) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert "database/x.db" in names and not any(n.startswith("database/x.db-") for n in names)
    assert manifest["database"] == "database/x.db"
    assert manifest["store"] == {"engine": "sqlite", "path": str(elsewhere), "instance": None}

    other = place(tmp_path / "other")
    there = tmp_path / "other-db" / "x.db"
    (other / "soulbot.yaml").write_text(CONFIG + f"store:\n  url: sqlite:///{there}\n")
    restored = soulbot("restore", str(path), cwd=other)
    assert restored.returncode == 0, restored.stderr
    assert ids_in(there) == [1, 2]
    back = sqlite3.connect(there)
    assert back.execute("SELECT content FROM history WHERE id = 2").fetchone() == (
        "written just before",
    )
    back.close()


def test_a_backup_into_a_config_of_another_store_is_refused_in_one_line(
    home: Path, tmp_path: Path
) -> None:
    path = backup_of(home)
    other = place(tmp_path / "other")
    (other / "soulbot.yaml").write_text(CONFIG + "store:\n  url: sqlite:///data/soulbot-back.db\n")
    result = soulbot("restore", str(path), "--force", cwd=other)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: restore failed: {path}: made for another store: its database is "
        "data_dir/soulbot.db; this config's store is the SQLite file data/soulbot-back.db (kept "
        "as data_dir/soulbot-back.db): restore it with the config it was made with (the "
        "manifest's store), then `soulbot store migrate`; nothing was restored"
    ]
    assert sorted(p.name for p in other.iterdir()) == ["soulbot.yaml"]


PG = "postgresql://soulbot:secret@127.0.0.1:5432/soulbot"


def test_a_backup_of_a_postgresql_store_is_refused_with_its_own_tools(
    home: Path, tmp_path: Path
) -> None:
    (home / "soulbot.yaml").write_text(CONFIG + f"store:\n  url: {PG}\n")
    result = soulbot("backup", "../backups", cwd=home)
    assert result.returncode == 1 and result.stdout == ""
    shown = "postgresql://soulbot@127.0.0.1:5432/soulbot"
    assert result.stderr.splitlines() == [
        f"error: backup failed: the store is PostgreSQL ({shown}), which soulbot does not copy: "
        f"dump it with its own tools (`pg_dump --format=custom --file=soulbot.dump {shown}`; "
        f"back: `pg_restore --clean --if-exists --dbname={shown} soulbot.dump`), and back up "
        "data_dir and workspaces with `soulbot backup --no-database DEST`"
    ]
    assert not (tmp_path / "backups").exists()
    files = soulbot("backup", "../backups", "--no-database", cwd=home)
    assert files.returncode == 0, files.stderr
    assert ": no database, 2 file(s) of data_dir" in files.stdout  # the old soulbot.db: a file


def test_restore_with_another_instances_config_beside_a_serving_daemon_is_refused(
    home: Path, tmp_path: Path
) -> None:
    shared = place(tmp_path / "shared")  # two instances' data_dir, their store PostgreSQL's
    for name in ("a", "b"):
        config = CONFIG + f"store:\n  url: {PG}\ninstance: {name}\n"
        (shared / f"{name}.yaml").write_text(config)
    write(shared / "workspaces" / "wren" / "SOUL.md", "---\nname: Wren\n---\nserving\n")
    write(shared / "data" / "memory" / "wren" / "index.md", "# served\n")
    made = soulbot("backup", "../backups", "--no-database", "--config", "a.yaml", cwd=shared)
    assert made.returncode == 0, made.stderr
    (path,) = (tmp_path / "backups").iterdir()
    with own_data_dir(shared / "data", "a"):  # instance a serves
        before = files_of(shared)
        result = soulbot("restore", str(path), "--force", "--config", "b.yaml", cwd=shared)
        assert result.stderr.splitlines() == [
            "error: restore failed: data (instance a) is in use by another soulbot "
            f"(pid {os.getpid()}): stop it first, or give this one a data_dir of its own"
        ]
        assert result.returncode == 1
        assert (shared / "data" / "soulbot-a.pid").read_text() == f"{os.getpid()}\n"
        assert files_of(shared) == before
    assert not any(".before-restore-" in p.name for p in shared.iterdir())


def test_restore_on_a_shared_store_beside_a_daemon_of_another_host_is_refused(
    home: Path, tmp_path: Path
) -> None:
    """A daemon on another host holds no lock in this host's view of data_dir;
    its fresh row in the store's `processes` says it serves."""
    import asyncio

    from bot.cluster.topology import Process, Topology
    from bot.storage.db import Database
    from tests.engines import postgres_schema

    with postgres_schema() as url:
        (home / "soulbot.yaml").write_text(CONFIG + f"store:\n  url: '{url}'\n")
        made = soulbot("backup", "../backups", "--no-database", cwd=home)
        assert made.returncode == 0, made.stderr
        (path,) = (tmp_path / "backups").iterdir()
        elsewhere = Process("b", "host-b", 4242, str(home / "data"), False, True, None, None)

        async def registered() -> None:
            db = Database(url)
            await db.open()
            try:
                await Topology(db, elsewhere).join()
            finally:
                await db.close()

        asyncio.run(registered())
        before = files_of(home)
        result = soulbot("restore", str(path), "--force", cwd=home)
    assert result.stderr.splitlines() == [
        "error: restore failed: soulbot instance b (host host-b, pid 4242) serves this store: "
        "stop it first; nothing was restored"
    ]
    assert result.returncode == 1
    after = files_of(home)
    after.pop("data/soulbot.lock")  # the restore's own hold, taken first
    assert after == before
    assert not any(".before-restore-" in p.name for p in home.iterdir())
