"""Log lines where the terminal chat shows (`configure_logging(..., chat=True)`, which
`soulbot chat` and `run` set when the chat and stderr are the terminal): what a
reply of that chat already tells is not printed again; every other line is, with
an exception in one field rather than a traceback. (The whole chat on a pty:
tests/adapters/test_console.py.) Each case runs in a process of its own: the
set-up is global."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-ant-api03-VERYsecretKEY-0123456789"


def logged(chat: bool, body: str) -> list[str]:
    """The console lines `body` logs (with `log`, `bound`) under `chat`."""
    code = "\n".join(
        [
            "import structlog",
            "from structlog.contextvars import bound_contextvars as bound",
            "from bot.app.logs import configure_logging",
            f"configure_logging('console', 'info', [{SECRET!r}], chat={chat})",
            "log = structlog.get_logger('t')",
            body,
        ]
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stderr.splitlines()


TURNS = """
with bound(soul="wren", session="console:root"):
    log.warning("turn.failed", error_class="APIConnectionError")
    log.warning("history.write_failed", error_class="OperationalError")
with bound(soul="wren", session="telegram:42"):
    log.warning("turn.failed", error_class="APIConnectionError")
log.warning("command.refused", platform="console", command="soul status")
log.warning("command.refused", platform="discord", command="soul status")
"""


def test_what_the_chats_reply_says_is_not_printed_again() -> None:
    lines = logged(True, TURNS)
    assert len(lines) == 3, lines
    assert "history.write_failed" in lines[0] and "session=console:root" in lines[0]
    assert "turn.failed" in lines[1] and "session=telegram:42" in lines[1]
    assert "command.refused" in lines[2] and "platform=discord" in lines[2]


def test_without_the_chat_every_line_is_printed() -> None:
    lines = logged(False, TURNS)
    assert [line.split("]", 1)[1].split()[0] for line in lines] == [
        "turn.failed", "history.write_failed", "turn.failed", "command.refused", "command.refused",
    ]  # fmt: skip


FAILURE = f"""
try:
    raise RuntimeError("the gateway said no to {SECRET}")
except RuntimeError:
    log.exception("shutdown.task_failed", task="compile")
    log.exception("router.failed", error="said already")
"""


def test_in_the_chat_an_exception_is_one_field_not_a_traceback() -> None:
    lines = logged(True, FAILURE)
    assert len(lines) == 2, lines
    assert "shutdown.task_failed" in lines[0]
    assert "error='RuntimeError: the gateway said no to [redacted]'" in lines[0]
    assert "router.failed" in lines[1] and "error='said already'" in lines[1]
    assert SECRET not in "\n".join(lines)
    whole = logged(False, FAILURE)  # elsewhere, the traceback
    assert "Traceback (most recent call last):" in whole and len(whole) > 6
