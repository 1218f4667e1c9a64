"""The Makefile's pick of the venv's Python, run by make with a PATH that holds
only fake interpreters (shell scripts) in tmp_path."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
NONE_FOUND = "soulbot needs Python 3.11, 3.12 or 3.13: install one, or set PYTHON=..."

pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")

# A fake interpreter: `-c ''` runs; `--version` prints its version; `-m venv DIR`
# makes DIR/bin/python, itself a script that takes anything (`-m pip install`).
FAKE = """#!/bin/sh
case "$1" in
  --version) echo "Python {version}" ;;
  -m) {mkdir} -p "$3/bin" && printf '#!/bin/sh\\n' > "$3/bin/python" &&
      {chmod} +x "$3/bin/python" ;;
esac
"""
# A pyenv shim of a version that is installed but not selected: it is on PATH, and fails.
SHIM = '#!/bin/sh\necho "pyenv: $(basename $0): command not found" >&2\nexit 127\n'


def fake_path(tmp_path: Path, versions: dict[str, str | None]) -> str:
    """A PATH of one folder holding `python3.N` for each key: the fake of that
    version, or a failing shim for None."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tools = {"mkdir": shutil.which("mkdir"), "chmod": shutil.which("chmod")}
    for name, version in versions.items():
        script = bin_dir / name
        script.write_text(SHIM if version is None else FAKE.format(version=version, **tools))
        script.chmod(0o755)
    return str(bin_dir)


def make(
    tmp_path: Path, path: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The repo's Makefile, run in tmp_path/work (so the venv is made there)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTHON", "PYTHONS")
    }
    environ.update(env or {}, PATH=path)
    assert MAKE is not None
    return subprocess.run(
        [MAKE, "--no-print-directory", "-f", str(REPO / "Makefile"), "-C", str(work), *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def picked(result: subprocess.CompletedProcess[str]) -> str:
    """The interpreter a dry run would make the venv with."""
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.endswith(" -m venv .venv")]
    assert len(lines) == 1, result.stdout
    return lines[0].split()[0]


ALL = {"python3.11": "3.11.9", "python3.12": "3.12.4", "python3.13": "3.13.1"}


@pytest.mark.parametrize(
    ("versions", "expected"),
    [
        (ALL, "python3.13"),
        ({"python3.11": "3.11.9", "python3.12": "3.12.4"}, "python3.12"),
        ({"python3.11": "3.11.9"}, "python3.11"),
        ({**ALL, "python3.13": None}, "python3.12"),  # a shim that does not run is passed over
    ],
)
def test_the_newest_python_that_runs_is_picked(
    tmp_path: Path, versions: dict[str, str | None], expected: str
) -> None:
    assert picked(make(tmp_path, fake_path(tmp_path, versions), "-n", ".venv/bin/python")) == (
        expected
    )


def test_python_given_overrides_the_pick(tmp_path: Path) -> None:
    path = fake_path(tmp_path, ALL)
    assert picked(make(tmp_path, path, "-n", ".venv/bin/python", "PYTHON=python3.11")) == (
        "python3.11"
    )
    given = make(tmp_path, path, "-n", ".venv/bin/python", env={"PYTHON": "python3.12"})
    assert picked(given) == "python3.12"


def test_no_python_found_is_one_clear_line(tmp_path: Path) -> None:
    path = fake_path(tmp_path, {"python3.13": None})
    result = make(tmp_path, path, ".venv/bin/python")
    assert result.returncode != 0
    assert len(result.stderr.splitlines()) == 1
    assert NONE_FOUND in result.stderr
    assert not (tmp_path / "work" / ".venv").exists()
    assert make(tmp_path, path, "-n", "clean").returncode == 0  # only the venv needs one


def test_making_the_venv_says_which_python_once(tmp_path: Path) -> None:
    path = fake_path(tmp_path, ALL)
    made = make(tmp_path, path, ".venv/bin/python")
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines()[0] == "creating .venv with python3.13 (Python 3.13.1)"
    assert sum("creating" in line for line in made.stdout.splitlines()) == 1
    assert (tmp_path / "work" / ".venv" / "bin" / "python").is_file()
    again = make(tmp_path, str(tmp_path / "nothing"), ".venv/bin/python")
    assert again.returncode == 0, again.stderr  # made: no Python is looked for
    assert "creating" not in again.stdout


def test_make_run_passes_soulbot_yaml_else_the_example(tmp_path: Path) -> None:
    path = fake_path(tmp_path, ALL)
    (tmp_path / "work").mkdir()
    shutil.copy(REPO / "pyproject.toml", tmp_path / "work")
    shutil.copytree(REPO / "requirements", tmp_path / "work" / "requirements")  # the lock

    def run_line() -> str:
        result = make(tmp_path, path, "-n", "run")
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()[-1]

    assert run_line() == ".venv/bin/soulbot run --config deploy/soulbot.example.yaml"
    (tmp_path / "work" / "soulbot.yaml").write_text("{}\n")
    assert run_line() == ".venv/bin/soulbot run --config soulbot.yaml"


def make_fake(port: int) -> subprocess.Popen[str]:
    """`make fake PORT=port` in the checkout, in a process group of its own (see
    `stopped`); skipped when the checkout's venv is not installed and current."""
    assert MAKE is not None
    if subprocess.run([MAKE, "-C", str(REPO), "-q", ".venv/.installed-dev"]).returncode != 0:
        pytest.skip("the checkout's .venv is not installed (make .venv/.installed-dev)")
    return subprocess.Popen(
        [MAKE, "--no-print-directory", "-C", str(REPO), "fake", f"PORT={port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


@contextlib.contextmanager
def stopped(fake: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """`fake`, its whole group (make, the server) stopped when the block ends."""
    try:
        yield fake
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(fake.pid, signal.SIGTERM)
        fake.communicate(timeout=10)


def test_make_fake_listens_on_the_port_given_and_says_what_to_type_next() -> None:
    """The demo model answers at the URL of the command `make fake` prints."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with stopped(make_fake(port)) as fake:
        assert fake.stdout is not None
        shown = [fake.stdout.readline().rstrip("\n") for _ in range(3)]
        assert shown[0] == f"PORT {port}", shown
        *assignments, program, target = shown[2].split()
        assert (program, target) == ("make", "run")
        env = dict(word.split("=", 1) for word in assignments)
        assert env == {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}", "ANTHROPIC_API_KEY": "any"}
        body = {"model": "demo", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
        request = urllib.request.Request(
            env["ANTHROPIC_BASE_URL"] + "/v1/messages",
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json", "x-api-key": env["ANTHROPIC_API_KEY"]},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = json.load(response)
        assert "(demo) I heard: hi" in answer["content"][0]["text"]


def test_make_fake_fails_when_its_port_is_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with stopped(make_fake(taken.getsockname()[1])) as fake:
            out, err = fake.communicate(timeout=30)
    assert fake.returncode != 0
    assert "address already in use" in err
    assert "make run" not in out
