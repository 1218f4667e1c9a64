"""The `soulbot` command run as a user runs it: a subprocess of this venv's
Python, with the test's environment minus any SOULBOT_ variable, plus a model
key and base URL (MODEL_ENV) as a user has set them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# A model key and a base URL nothing answers at: `check` passes offline, `run` starts
# (its turns then fail). A test of credentials or of the model sets its own (an empty
# value is unset: the config reads it so).
MODEL_ENV = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}


def soulbot(
    *args: str,
    cwd: Path = REPO,
    env: dict[str, str] | None = None,
    program: tuple[str, ...] = (sys.executable, "-m", "bot"),
) -> subprocess.CompletedProcess[str]:
    """`soulbot ARGS` in `cwd` (`program`: how it is started), its output as text;
    `env` is added to the environment last."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SOULBOT_")}
    environ.update(MODEL_ENV)
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
