"""The terminal chat under a real pseudo-terminal: `soulbot chat` as a process on
a pty (its controlling terminal, so Ctrl-C is the terminal's own SIGINT), against
the fake model process. Line editing (readline) turns echo off while it reads;
however the chat ends, the terminal must be as it was before. While it stops, the
terminal shows one line per step, and a Ctrl-C then quits at once."""

from __future__ import annotations

import fcntl
import os
import select
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.process import FakeProcess
from tests.kit import example_souls

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="a POSIX terminal")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeProcess]:
    with FakeProcess() as process:
        yield process


class Terminal:
    """A pty whose slave end is `soulbot chat`'s stdin, stdout, stderr and
    controlling terminal; the test types on the master end."""

    def __init__(self, cwd: Path, fake_url: str) -> None:
        example_souls(cwd)
        (cwd / "soulbot.yaml").write_text("default_soul: wren\nmodel: {max_retries: 0}\n")
        self.master, self.slave = os.openpty()
        self.before = termios.tcgetattr(self.slave)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SOULBOT_", "ANTHROPIC_"))}
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
