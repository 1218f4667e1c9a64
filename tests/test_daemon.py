"""`soulbot run` as a process: it starts, logs JSON lines, and stops on a signal."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def _start(cwd: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOULBOT_")}
    return subprocess.Popen(
        [sys.executable, "-m", "bot", "run", "--log-format", "json"],
        cwd=cwd,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )


def _wait_for(proc: subprocess.Popen[str], event: str) -> dict[str, Any]:
    assert proc.stderr is not None
    for line in proc.stderr:  # the pytest timeout bounds this wait
        entry = json.loads(line)
        if entry["event"] == event:
            return entry
    raise AssertionError(f"the daemon exited without logging {event}")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_run_serves_until_a_signal(tmp_path: Path, signum: signal.Signals) -> None:
    shutil.copytree(REPO / "workspaces", tmp_path / "workspaces")
    proc = _start(tmp_path)
    try:
        started = _wait_for(proc, "daemon.started")
        assert started["souls"] == ["wren"]
        proc.send_signal(signum)
        assert _wait_for(proc, "daemon.stopping")["signal"] == signum.name
        _wait_for(proc, "daemon.stopped")
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(30)
def test_run_refuses_to_start_without_a_soul(tmp_path: Path) -> None:
    (tmp_path / "workspaces" / "broken").mkdir(parents=True)
    (tmp_path / "workspaces" / "broken" / "SOUL.md").write_text("---\nname: [x\n---\n")
    proc = _start(tmp_path)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1
    assert "no soul loaded" in err
    assert any(
        json.loads(line)["event"] == "soul.load_failed"
        for line in err.splitlines()
        if line.startswith("{")
    )
