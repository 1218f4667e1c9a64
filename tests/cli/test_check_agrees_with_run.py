"""`soulbot check` is the pre-flight `soulbot run` trusts: every config and
environment `run` refuses before it serves, `check` fails on too (exit 1), with
the very line `run` prints. The cases: the operator faults of
tests/test_hostile_inputs.py (`FAULTS`: data_dir and database), and every other
refusal `run` knows (bot/app/preflight.py)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.storage.db import DB_NAME, SCHEMA_VERSION
from tests.kit import example_souls
from tests.run_cli import MODEL_ENV
from tests.test_hostile_inputs import FAULTS, with_fault, without_override

# A config that `run` serves (the terminal chat, which reads end-of-input and stops).
GOOD = "default_soul: wren\ndata_dir: {data}\nadapters: {{console: {{enabled: true}}}}\n"
NO_MODEL = {"ANTHROPIC_API_KEY": "", "ANTHROPIC_BASE_URL": ""}


def _newer_database(cwd: Path) -> None:
    data = cwd / "box" / "data"
    data.mkdir(mode=0o700)
    conn = sqlite3.connect(data / DB_NAME)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()


def _broken_souls(cwd: Path) -> None:
    for soul in ("wren", "twinkle"):
        (cwd / "workspaces" / soul / "SOUL.md").write_text("---\nname: [unclosed\n---\nBody")


# Each case: the config's text (`{data}` is the data_dir), the environment it adds,
# what it does to the working folder, and run's exit code.
CASES: dict[str, tuple[str, dict[str, str], Callable[[Path], None] | None, int]] = {
    "no-model-credentials": (GOOD, NO_MODEL, None, 2),
    "default-soul-not-loaded": (GOOD.replace("wren", "nobody"), {}, None, 1),
    "two-souls-no-default": (GOOD.replace("default_soul: wren\n", ""), {}, None, 1),
    "no-adapter-enabled": (GOOD.replace("true", "false"), {}, None, 1),
    "no-soul-loaded": (GOOD, {}, _broken_souls, 1),
    "newer-database": (GOOD, {}, _newer_database, 1),
}


def soulbot(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`soulbot COMMAND` as the operator faults' test runs it: no capability to
    ignore file modes, nothing on stdin, the model of MODEL_ENV unless `env` says."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SOULBOT_", "ANTHROPIC_"))}
    return subprocess.run(
        [sys.executable, "-m", "bot", command, "--log-format", "json"],
        cwd=cwd, env=environ | MODEL_ENV | env, stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=50, check=False, preexec_fn=without_override,
    )  # fmt: skip


def agree(cwd: Path, config: str, env: dict[str, str], code: int) -> None:
    """`run` exits `code` with one `error:` line; `check` exits 1 listing that line."""
    (cwd / "soulbot.yaml").write_text(config.format(data=cwd / "box" / "data"))
    try:
        run = soulbot("run", cwd, env)
        check = soulbot("check", cwd, env)
    finally:
        (cwd / "box").chmod(0o700)
    assert run.returncode == code, run.stderr[-2000:]
    last = run.stderr.splitlines()[-1]
    assert last.startswith("error: "), run.stderr[-2000:]
    assert check.returncode == 1, check.stdout + check.stderr[-2000:]
    errors = check.stdout.split("\nerrors:\n", 1)[1]
    assert f"  - {last.removeprefix('error: ')}\n" in errors, check.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_check_fails_on_each_operator_fault_with_runs_line(
    fault: str, tmp_path: Path, hold_lock: Callable[[Path], None]
) -> None:
    with_fault(tmp_path, fault, hold_lock)
    agree(tmp_path, GOOD, {}, 2)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", list(CASES))
def test_check_fails_on_each_refused_config_with_runs_line(case: str, tmp_path: Path) -> None:
    config, env, prepare, code = CASES[case]
    example_souls(tmp_path)
    (tmp_path / "box").mkdir()
    if prepare is not None:
        prepare(tmp_path)
    agree(tmp_path, config, env, code)


def test_a_config_run_serves_passes_check(tmp_path: Path) -> None:
    """The cases' base config is one `run` serves: each case breaks one thing."""
    example_souls(tmp_path)
    (tmp_path / "box").mkdir()
    (tmp_path / "soulbot.yaml").write_text(GOOD.format(data=tmp_path / "box" / "data"))
    run = soulbot("run", tmp_path, {})
    check = soulbot("check", tmp_path, {})
    assert run.returncode == 0, run.stderr[-2000:]
    assert check.returncode == 0, check.stdout + check.stderr[-2000:]
