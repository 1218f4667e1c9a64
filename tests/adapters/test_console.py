"""The terminal chat under a real pseudo-terminal: `soulbot chat` as a process on
a pty (its controlling terminal, so Ctrl-C is the terminal's own SIGINT), against
the fake model process. Line editing (readline) turns echo off while it reads;
however the chat ends, the terminal must be as it was before. While it stops, the
terminal shows one line per step, and a Ctrl-C then quits at once. A failed turn
shows once, as its reply, with its cause in one line (the terminal's user is the
operator); no log line is printed into the chat (the log goes to a file while it
runs). While a reply is pending, "Wren is thinking…" shows, and however the wait
ends it is erased. Replies' Markdown is rendered for the terminal (`render`, and the
adapter on a stream that is or is not a terminal)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import select
import socket
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.console_adapter import BOLD, ERASE_LINE, NORMAL, ConsoleAdapter, render
from bot.prompts import APOLOGY
from bot.types import Inbound, Outbound
from tests.fakes.process import FakeProcess
from tests.kit import example_souls

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="a POSIX terminal")
WHERE = "(model.base_url / ANTHROPIC_BASE_URL)"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeProcess]:
    with FakeProcess() as process:
        yield process


class Terminal:
    """A pty whose slave end is `soulbot chat`'s stdin, stdout, stderr and
    controlling terminal; the test types on the master end."""

    def __init__(self, cwd: Path, fake_url: str, config: str = "") -> None:
        example_souls(cwd)
        (cwd / "soulbot.yaml").write_text("default_soul: wren\nmodel: {max_retries: 0}\n" + config)
        self.master, self.slave = os.openpty()
        self.before = termios.tcgetattr(self.slave)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SOULBOT_", "ANTHROPIC_", "NO_COLOR"))}  # fmt: skip
        env |= {"ANTHROPIC_BASE_URL": fake_url, "ANTHROPIC_API_KEY": "test-key", "TERM": "xterm"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bot", "chat"], cwd=cwd, env=env,
            stdin=self.slave, stdout=self.slave, stderr=self.slave,
            start_new_session=True,  # then make the pty its controlling terminal
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )  # fmt: skip
        self.screen = b""
        self._seen = 0  # where the next read_until looks from

    def read_until(self, text: bytes, within: float = 15.0) -> None:
        """Read until `text` shows after what the last call found."""
        deadline = time.monotonic() + within
        while (found := self.screen.find(text, self._seen)) < 0:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {text!r} on the terminal: {self.screen[-400:]!r}")
            if select.select([self.master], [], [], min(left, 0.1))[0]:
                self.screen += os.read(self.master, 4096)
        self._seen = found + len(text)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def wait(self, within: float = 20.0) -> int:
        """The exit code; what is left on the terminal is read meanwhile, so a
        full pty buffer never blocks the process."""
        deadline = time.monotonic() + within
        while self.proc.poll() is None and time.monotonic() < deadline:
            if select.select([self.master], [], [], 0.05)[0]:
                try:
                    self.screen += os.read(self.master, 4096)
                except OSError:
                    break
        return self.proc.wait(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


def final_lines(screen: bytes) -> list[str]:
    """The terminal's lines as `screen` leaves them: a carriage return goes back
    to the line's start, an erase blanks the line (or its end); other escapes
    (bold, readline's modes) change no text."""
    lines = []
    for raw in screen.decode(errors="replace").split("\n"):
        line, col = "", 0
        for token in re.split(r"(\x1b\[[0-9;?]*[A-Za-z]|\r)", raw):
            if token == "\r":
                col = 0
            elif token == "\x1b[2K":
                line = " " * col
            elif token == "\x1b[K":
                line = line[:col]
            elif not token.startswith("\x1b"):
                line = line[:col].ljust(col) + token + line[col + len(token) :]
                col += len(token)
        lines.append(line.rstrip())
    return lines


def log_lines(screen: bytes) -> list[str]:
    """The lines of `screen` that are log lines (console or JSON format)."""
    log_line = re.compile(r'\d{4}-\d\d-\d\dT\d\d:\d\d|\[(debug|info|warning|error)\s*\]|"event"')
    return [line for line in final_lines(screen) if log_line.search(line)]


def chat_once(terminal: Terminal) -> None:
    """Say hello; wait for the answer and the prompt after it."""
    terminal.read_until(b"you> ")
    terminal.type(b"hello\r")
    terminal.read_until(b"Wren> ")
    terminal.read_until(b"you> ", within=5.0)  # the prompt again, after the answer


@pytest.mark.timeout(40)
@pytest.mark.parametrize("keys", [b"\x03", b"\x04", b"/quit\r"], ids=["ctrl-c", "ctrl-d", "quit"])
def test_the_terminal_is_given_back_as_it_was(
    tmp_path: Path, fake: FakeProcess, keys: bytes
) -> None:
    terminal = Terminal(tmp_path, fake.url)
    try:
        chat_once(terminal)
        reading = termios.tcgetattr(terminal.slave)
        assert not reading[3] & termios.ECHO  # readline reads the line itself meanwhile
        terminal.type(keys)
        assert terminal.wait() == 0
        after = termios.tcgetattr(terminal.slave)
    finally:
        terminal.close()
    assert after == terminal.before


@pytest.mark.timeout(40)
@pytest.mark.parametrize(
    ("keys", "force"),
    [(b"\x03", b"again"), (b"/quit\r", b"twice")],  # the end of input is no signal
    ids=["ctrl-c", "quit"],
)
def test_the_stop_shows_one_line_per_step(
    tmp_path: Path, fake: FakeProcess, keys: bytes, force: bytes
) -> None:
    terminal = Terminal(tmp_path, fake.url)
    try:
        chat_once(terminal)
        terminal.type(keys)
        terminal.read_until(
            b"\rStopping. Ctrl-C %s quits at once (your messages are kept).\r\n" % force
        )
        terminal.read_until(b"\rsaving reflections...\r\n")
        terminal.read_until(b"\rsaving memory... 1 wiki\r\n")  # the console user's wiki
        terminal.read_until(b"\rStopped.\r\n")
        assert terminal.wait() == 0
    finally:
        terminal.close()
    assert b"not finished" not in terminal.screen


@pytest.mark.timeout(40)
def test_a_second_ctrl_c_during_the_stop_quits_at_once(tmp_path: Path, fake: FakeProcess) -> None:
    terminal = Terminal(tmp_path, fake.url)
    try:
        chat_once(terminal)
        fake.configure(latency_s=30.0)  # the shutdown compile's model call hangs
        terminal.type(b"\x03")
        terminal.read_until(b"saving memory... 1 wiki")
        pressed = time.monotonic()
        terminal.type(b"\x03")
        terminal.read_until(b"Quitting now: your messages are kept")
        assert terminal.wait() == 1
        assert time.monotonic() - pressed < 10.0
        after = termios.tcgetattr(terminal.slave)
    finally:
        fake.configure(latency_s=0.0)
        terminal.close()
    assert b"Stopped." not in terminal.screen
    assert after == terminal.before


@pytest.mark.timeout(40)
def test_a_failed_turn_shows_once_as_its_reply_with_its_cause(tmp_path: Path) -> None:
    """The model unreachable: the apology, and the cause under it in one line for
    the operator; no log line in the chat (not the failure's, not the failed
    memory save's at the quit): they are in the log file, which one line names."""
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    terminal = Terminal(tmp_path, closed)
    log_file = tmp_path / "data" / "logs" / "soulbot.log"
    try:
        terminal.read_until(f"The log goes to {log_file} while the chat runs".encode())
        terminal.read_until(b"you> ")
        terminal.type(b"hello\r")
        terminal.read_until(f"Wren> {APOLOGY}\r\n".encode())
        cause = f"model unreachable: connection refused at {closed} {WHERE}"
        terminal.read_until(f"      why: {cause}\r\n".encode())
        terminal.type(b"/quit\r")
        terminal.read_until(b"Stopped.")
        assert terminal.wait() == 0
    finally:
        terminal.close()
    assert terminal.screen.count(APOLOGY.encode()) == 1
    assert terminal.screen.count(b"The log goes to") == 1
    assert log_lines(terminal.screen) == []
    assert b"turn.failed" not in terminal.screen
    assert b"Traceback" not in terminal.screen
    logged = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert {"turn.failed", "wiki.compile_failed"} <= {line["event"] for line in logged}


THINKING = "Wren is thinking…".encode()


@pytest.mark.timeout(40)
def test_a_pending_reply_shows_who_is_thinking_until_it_comes(
    tmp_path: Path, fake: FakeProcess
) -> None:
    terminal = Terminal(tmp_path, fake.url)
    try:
        terminal.read_until(b"you> ")
        terminal.type(b"hello\r")
        terminal.read_until(ERASE_LINE.encode() + THINKING)
        terminal.read_until(ERASE_LINE.encode())  # erased before the reply is written
        terminal.read_until(b"Wren> ")
        terminal.read_until(b"you> ")
        terminal.type(b"/quit\r")
        assert terminal.wait() == 0
    finally:
        terminal.close()
    assert not [line for line in final_lines(terminal.screen) if "thinking" in line]
    assert log_lines(terminal.screen) == []


@pytest.mark.timeout(40)
@pytest.mark.parametrize("keys", [b"\x03", b"\x04"], ids=["ctrl-c", "ctrl-d"])
def test_a_pending_reply_cut_short_leaves_no_indicator(
    tmp_path: Path, fake: FakeProcess, keys: bytes
) -> None:
    """The stop cancels the turn that waits on a hung model: the indicator is
    erased, and the terminal is as it was."""
    terminal = Terminal(tmp_path, fake.url, "memory: {compile: {shutdown_wait_s: 0.2}}\n")
    try:
        terminal.read_until(b"you> ")
        fake.script({"kind": "hang", "seconds": 30})
        terminal.type(b"hello\r")
        terminal.read_until(THINKING)
        terminal.type(keys)
        terminal.read_until(b"Stopped.")
        assert terminal.wait() == 0
        after = termios.tcgetattr(terminal.slave)
    finally:
        terminal.close()
    assert after == terminal.before
    assert not [line for line in final_lines(terminal.screen) if "thinking" in line]


@pytest.mark.timeout(40)
def test_markdown_is_rendered_on_the_terminal(tmp_path: Path, fake: FakeProcess) -> None:
    """A command's table without its fence lines; the model's bold as bold, its
    code without backticks."""
    terminal = Terminal(tmp_path, fake.url)
    try:
        chat_once(terminal)
        terminal.type(b"/soul usage\r")
        terminal.read_until(b"TOTAL")
        terminal.read_until(b"you> ")
        terminal.type(b"say **this** and `that`\r")
        terminal.read_until(b"Wren> echo: ")
        terminal.read_until(b"you> ")
        terminal.type(b"/quit\r")
        assert terminal.wait() == 0
    finally:
        terminal.close()
    shown = terminal.screen.decode()
    assert "```" not in shown
    assert "\n        TOTAL " in shown.replace("\r", "")  # the table, under "Wren> ", indented
    assert f"say {BOLD}this{NORMAL} and that" in shown


USAGE = "```\nSOUL  CALLS\nwren  2\n```"


@pytest.mark.parametrize(
    ("markdown", "ansi", "shown"),
    [
        (USAGE, False, "  SOUL  CALLS\n  wren  2"),
        ("Today:\n~~~python\nx = 1\n\nprint(x)\n~~~\ndone", False,
         "Today:\n  x = 1\n\n  print(x)\ndone"),
        ("```\nunclosed\n**kept**", True, "  unclosed\n  **kept**"),
        ("a **bold** word", True, f"a {BOLD}bold{NORMAL} word"),
        ("a **bold** word", False, "a bold word"),
        ("run `soulbot **check**` now", True, "run soulbot **check** now"),
        ("**bold with `code`**", True, f"{BOLD}bold with code{NORMAL}"),
        (r"no soul named \*\*x\*\* or a\_b or \`c\`", True, "no soul named **x** or a_b or `c`"),
        (r"`a\b` stays C:\Users", False, r"a\b stays C:\Users"),
        ("```x``` is inline, `` `y` `` too", False, "x is inline, `y` too"),
        ("2 ** 3 and a*b", True, "2 ** 3 and a*b"),
    ],
    ids=["table", "tilde-fence", "unclosed-fence", "bold", "bold-plain", "code", "code-in-bold",
         "escapes", "backslash-in-code", "fence-inline", "no-markup"],
)  # fmt: skip
def test_render(markdown: str, ansi: bool, shown: str) -> None:
    assert render(markdown, ansi) == shown


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stdout", [_Tty, io.StringIO], ids=["terminal", "pipe"])
async def test_the_indicator_is_drawn_and_erased_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch, stdout: type[io.StringIO]
) -> None:
    """On a pipe, the reply only: no line drawn and erased in a file, no cause
    (a program reads it; the log has the failure)."""
    monkeypatch.setenv("TERM", "xterm")
    out = stdout()
    console = ConsoleAdapter("Wren", stdin=io.StringIO(), stdout=out)
    chat = Inbound("console", "me", "me", "me", "hello", is_dm=True)
    async with console.typing(chat):
        drawn = out.getvalue()
    await console.send(Outbound("console", "me", APOLOGY, cause="model unreachable: x"))
    reply = f"Wren> {APOLOGY}\n      why: model unreachable: x\n"
    if stdout is _Tty:
        assert drawn == "Wren is thinking…"  # nothing was on the line: no erase first
        assert out.getvalue() == drawn + ERASE_LINE + reply
    else:
        assert drawn == ""
        assert out.getvalue() == f"Wren> {APOLOGY}\n"


@pytest.mark.parametrize(
    ("stdout", "no_color", "bold"),
    [(_Tty, None, True), (_Tty, "1", False), (io.StringIO, None, False)],
    ids=["terminal", "no-color", "pipe"],
)
async def test_the_adapter_renders_bold_only_where_it_shows(
    monkeypatch: pytest.MonkeyPatch, stdout: type[io.StringIO], no_color: str | None, bold: bool
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    if no_color is not None:
        monkeypatch.setenv("NO_COLOR", no_color)
    out = stdout()
    console = ConsoleAdapter("Wren", stdin=io.StringIO(), stdout=out)
    await console.send(Outbound("console", "me", f"**Souls:**\n{USAGE}"))
    souls = f"{BOLD}Souls:{NORMAL}" if bold else "Souls:"
    assert out.getvalue() == f"Wren> {souls}\n        SOUL  CALLS\n        wren  2\n"


@pytest.mark.timeout(40)
def test_a_reminder_comes_while_the_terminal_chat_runs(tmp_path: Path, fake: FakeProcess) -> None:
    terminal = Terminal(tmp_path, fake.url, "reminders: {poll_s: 0.2}\n")
    try:
        terminal.read_until(b"you> ")
        fake.script(
            {"kind": "tool_use", "name": "set_reminder",
             "input": {"when": "PT2S", "text": "the tea is ready"}},
            {"kind": "text", "text": "I will tell you."},
            {"kind": "text", "text": "Your tea is ready now."},
        )  # fmt: skip
        terminal.type(b"remind me in two seconds that the tea is ready\r")
        terminal.read_until(b"I will tell you.")
        terminal.read_until(b"Your tea is ready now.", within=15.0)  # unasked, from the poll
        terminal.type(b"/quit\r")
        assert terminal.wait() == 0
    finally:
        terminal.close()
    sources = [r for r in fake.requests() if "A reminder you set" in json.dumps(r)]
    assert len(sources) == 1
