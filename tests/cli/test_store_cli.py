"""`soulbot store migrate` as a user runs it: a subprocess, a SQLite store in
the config's data_dir, a PostgreSQL schema of its own as the target."""

from __future__ import annotations

import os
import pty
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from bot.app.owner import own_data_dir
from bot.chat.history import HistoryStore
from bot.memory.store import NewTrace, TraceStore
from bot.storage.db import DB_NAME, Database
from tests.engines import postgres_schema
from tests.run_cli import REPO, soulbot

PASSWORD = "s3cret-pw"
TABLES = 13


@pytest.fixture
async def home(tmp_path: Path) -> Path:
    """A soulbot's folder: its config and a store with a few rows in data_dir."""
    (tmp_path / "soulbot.yaml").write_text("workspaces: ./workspaces\ndata_dir: ./data\n")
    db = Database(tmp_path / "data" / DB_NAME)
    await db.open()
    try:
        history = HistoryStore(db)
        for n in range(4):
            await history.append_message("telegram:42", 0, f"line {n} about tea", f"m{n}")
        await TraceStore(db).add(
            [NewTrace("aria", "shared", "telegram:42", "user", "Ann", "tea", 1.0)] * 3
        )
    finally:
        await db.close()
    return tmp_path


@pytest.fixture
def pg() -> Iterator[str]:
    """A fresh schema's URL, with a password in it (the server trusts, and ignores it)."""
    with postgres_schema() as url:
        parts = urlsplit(url)
        netloc = f"{parts.username}:{PASSWORD}@{parts.hostname}:{parts.port}"
        yield urlunsplit(parts._replace(netloc=netloc))


def migrate(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return soulbot("store", "migrate", "--config", str(home / "soulbot.yaml"), *args, cwd=home)


def rows(out: str) -> dict[str, list[str]]:
    """The count check's lines, by table."""
    return {line.split()[0]: line.split()[1:] for line in out.splitlines()[1 : TABLES + 1]}


def test_migrate_prints_the_count_check_and_copies_nothing_twice(home: Path, pg: str) -> None:
    done = migrate(home, "--to", pg, "--batch-rows", "2")
    assert done.returncode == 0, done.stderr
    table = rows(done.stdout)
    assert done.stdout.splitlines()[0].split() == [
        "table",
        "source",
        "rows",
        "target",
        "rows",
        "ok",
    ]
    assert len(table) == TABLES and all(cells[-1] == "ok" for cells in table.values())
    assert table["history"] == ["4", "4", "ok"] and table["memory"] == ["3", "3", "ok"]
    assert done.stdout.splitlines()[-1].startswith("12 row(s) copied from data/soulbot.db to ")
    assert "copying" not in done.stderr  # no terminal, no bar
    again = migrate(home, "--from", "sqlite:///data/soulbot.db", "--to", pg)
    assert again.returncode == 0, again.stderr
    assert rows(again.stdout) == table
    assert again.stdout.splitlines()[-1].startswith("0 row(s) copied")
    for result in (done, again):
        assert PASSWORD not in result.stdout + result.stderr


def test_a_count_that_differs_exits_1(home: Path, pg: str) -> None:
    assert migrate(home, "--to", pg).returncode == 0
    conn = sqlite3.connect(home / "data" / DB_NAME)
    conn.execute("DELETE FROM history WHERE id = 2")  # neither the first nor the last
    conn.commit()
    conn.close()
    result = migrate(home, "--to", pg)
    assert result.returncode == 1
    assert rows(result.stdout)["history"] == ["3", "4", "DIFFERS"]
    assert result.stderr.strip().splitlines() == [
        "error: the row counts differ (history): the source changed since an earlier copy, or "
        "the target holds rows of its own; migrate into an empty database"
    ]


def test_what_cannot_be_migrated_is_one_line_and_exit_1(
    home: Path, pg: str, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    db = sqlite3.connect(other / "x.db")
    db.execute("PRAGMA user_version = 99")
    db.close()
    cases = {
        ("--to", "sqlite:///data/soulbot.db"): "the source and the target are the same store",
        ("--from", "sqlite:///other/x.db", "--to", pg): "written by a newer soulbot (schema 99",
        ("--from", "sqlite:///missing.db", "--to", pg): "missing.db: no store there to migrate",
    }
    for args, says in cases.items():
        result = migrate(home, *args)
        assert result.returncode == 1, result
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("error: ") and says in line, line
    assert migrate(home, "--to", pg).returncode == 0
    conn = sqlite3.connect(home / "data" / DB_NAME)
    conn.execute("UPDATE history SET content = 'changed' WHERE id = 1")
    conn.commit()
    conn.close()
    result = migrate(home, "--to", pg)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: cannot migrate data/soulbot.db to "
        f"{pg.split('?')[0].replace(':' + PASSWORD, '')}: the target holds another store: "
        "its history row (1) differs from the source's; migrate into an empty database (or "
        "one an earlier migrate of this source filled)"
    ]


def test_a_server_that_does_not_answer_exits_2_without_the_password(home: Path) -> None:
    result = migrate(home, "--to", f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/test")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: postgresql://postgres@127.0.0.1:1/test: cannot be reached")
    assert PASSWORD not in result.stdout + result.stderr


def test_a_url_of_another_kind_is_a_usage_error(home: Path) -> None:
    result = migrate(home, "--to", "mysql://db/x")
    assert result.returncode == 2 and "Invalid value for --to: expected sqlite:///" in result.stderr


def test_a_daemon_on_data_dir_keeps_migrate_off(home: Path, pg: str) -> None:
    with own_data_dir(home / "data"):
        result = migrate(home, "--to", pg)
    assert result.returncode == 1
    assert "is in use by another soulbot" in result.stderr and "stop it first" in result.stderr


def test_a_daemon_of_the_configs_store_keeps_migrate_off_whatever_its_instance(
    home: Path, pg: str
) -> None:
    config = f"workspaces: ./workspaces\ndata_dir: ./data\nstore:\n  url: {pg}\ninstance: b\n"
    (home / "soulbot.yaml").write_text(config)
    with own_data_dir(home / "data", "a"):  # instance a serves the config's store
        result = migrate(home, "--to", "sqlite:///data/back.db")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: data (instance a) is in use by another soulbot (pid {os.getpid()}): stop it "
        "first, or give this one a data_dir of its own"
    ]
    assert not (home / "data" / "back.db").exists()


def test_the_help_says_to_stop_the_daemon_first() -> None:
    result = soulbot("store", "migrate", "--help")
    assert result.returncode == 0 and "Stop the daemon first" in result.stdout


def test_a_terminal_shows_the_progress_bar(home: Path, pg: str) -> None:
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOULBOT_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "store", "migrate", "--to", pg, "--batch-rows", "2"],
        cwd=home,
        env={**env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=follower,
        text=True,
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal is gone: the process closed it
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, seen
    assert b"copying" in seen and b"12/12" in seen
    assert rows(out)["memory"] == ["3", "3", "ok"]
