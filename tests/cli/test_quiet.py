"""Where a person reads: `check`, `prompt` and `chat` with stderr a terminal show
warnings and errors, no info lines; JSON lines keep info. discord.py's voice
warnings never show (soulbot has no voice)."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.kit import example_souls
from tests.run_cli import MODEL_ENV

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "soulbot.example.yaml"
VOICE = ("PyNaCl is not installed, voice will NOT be supported",
         "davey is not installed, voice will NOT be supported")  # fmt: skip


def _environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SOULBOT_")}
    return {**environ, **MODEL_ENV, **(extra or {})}


def on_a_terminal(
    *args: str, cwd: Path, stdin: str = "", env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run soulbot with stderr a pseudo-terminal: (exit code, stdout, stderr)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", *args],
        cwd=cwd, env=_environ(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=slave, text=True,
    )  # fmt: skip
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:  # a full terminal buffer would block the child
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed its end
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        out, _ = proc.communicate(stdin, timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(timeout=10)
        os.close(master)
    return proc.returncode, out, b"".join(chunks).decode().replace("\r\n", "\n")


def piped(
    *args: str, cwd: Path, stdin: str = "", env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run soulbot with stderr a pipe (JSON lines by default)."""
    result = subprocess.run(
        [sys.executable, "-m", "bot", *args], cwd=cwd, env=_environ(env), input=stdin,
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    return result.returncode, result.stdout, result.stderr


def levels(stderr: str) -> set[str]:
    """The levels of the console lines in `stderr` (`[info     ]` -> info)."""
    found = set()
    for line in stderr.splitlines():
        if "[" in line and "]" in line:
            found.add(line.split("[", 1)[1].split("]", 1)[0].strip())
    return found


def json_events(stderr: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


@pytest.fixture
def example(tmp_path: Path) -> Path:
    example_souls(tmp_path)
    shutil.copy(EXAMPLE, tmp_path / "soulbot.yaml")
    soul_md = tmp_path / "workspaces" / "twinkle" / "SOUL.md"  # one warning to see
    soul_md.write_text(soul_md.read_text().replace("---\n", "---\ndefaultMod: calm\n", 1))
    return tmp_path


def test_check_on_a_terminal_shows_warnings_not_info(example: Path) -> None:
    code, out, err = on_a_terminal("check", cwd=example)
    assert code == 0, out + err
    assert "2 soul(s) loaded, no errors" in out
    assert "soul.loaded" not in err and "info" not in levels(err)
    assert "soul.warning" in err and "warning" in levels(err)


def test_check_with_json_logs_keeps_info(example: Path) -> None:
    code, _, err = on_a_terminal("check", "--log-format", "json", cwd=example)
    assert code == 0
    events = json_events(err)
    assert {"soul.loaded", "soul.warning"} <= {e["event"] for e in events}
    code, _, err = piped("check", cwd=example)  # not a terminal: JSON, info kept
    assert code == 0
    assert "soul.loaded" in {e["event"] for e in json_events(err)}


def test_check_with_console_logs_into_a_pipe_is_quiet_too(example: Path) -> None:
    code, _, err = piped("check", "--log-format", "console", cwd=example)
    assert code == 0
    assert "soul.loaded" not in err and "soul.warning" in err


def test_prompt_on_a_terminal_shows_no_info(example: Path) -> None:
    code, out, err = on_a_terminal("prompt", "wren", cwd=example)
    assert code == 0, err
    assert "block 1/" in out
    assert "soul.loaded" not in err and "info" not in levels(err)
    code, _, err = piped("prompt", "wren", cwd=example)
    assert code == 0 and "soul.loaded" in {e["event"] for e in json_events(err)}


def test_a_command_not_read_in_the_terminal_keeps_info(example: Path) -> None:
    """`soul epoch` loads the souls too, and says so at info in a console."""
    _, _, err = on_a_terminal("soul", "epoch", "wren", cwd=example)
    assert "soul.loaded" in err and "info" in levels(err)


def test_chat_on_a_terminal_shows_no_info_and_json_keeps_it(example: Path) -> None:
    from tests.fakes.process import FakeProcess

    with FakeProcess() as fake:
        env = {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "k"}
        code, out, err = on_a_terminal("chat", "wren", cwd=example, stdin="hi\n/quit\n", env=env)
        assert code == 0, err
        assert "Wren> " in out
        assert "info" not in levels(err), err
        assert "daemon.started" not in err
        code, _, err = piped(
            "chat", "wren", "--log-format", "json", cwd=example, stdin="/quit\n", env=env
        )
        assert code == 0, err
        assert "daemon.started" in {e["event"] for e in json_events(err)}


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_discord_voice_warnings_are_dropped(fmt: str) -> None:
    """discord.py's two voice lines go; its other warnings, and anyone else's
    line of the same words, stay (in a process of its own: the set-up is global)."""
    code = (
        "import logging, sys; from bot.app.logs import configure_logging;"
        f"configure_logging({fmt!r});"
        "log = logging.getLogger('discord.client');"
        f"[log.warning(text) for text in {VOICE!r}];"
        "log.warning('a warning that is kept');"
        f"logging.getLogger('mine').warning({VOICE[0]!r})"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 2, lines
    assert "a warning that is kept" in lines[0] and "discord.client" in lines[0]
    assert VOICE[0] in lines[1] and "mine" in lines[1]


def test_a_discord_client_says_nothing_of_voice() -> None:
    """A real discord.py client, made after soulbot's logging set-up (the library
    warns once a process, when PyNaCl or davey is missing)."""
    code = (
        "from bot.app.logs import configure_logging; configure_logging('json');"
        "import discord; discord.Client(intents=discord.Intents.default())"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "voice" not in result.stderr
