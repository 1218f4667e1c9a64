"""The `soulbot` command run as a user runs it: a subprocess of this venv's
Python, with the test's environment minus any SOULBOT_ variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def soulbot(
    *args: str,
    cwd: Path = REPO,
    env: dict[str, str] | None = None,
    program: tuple[str, ...] = (sys.executable, "-m", "bot"),
) -> subprocess.CompletedProcess[str]:
    """`soulbot ARGS` in `cwd` (`program`: how it is started), its output as text."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SOULBOT_")}
    environ.update(env or {})
    return subprocess.run(
        [*program, *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
