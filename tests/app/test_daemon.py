"""`soulbot run` as a process against the fake model: console in, replies out,
signals, and the shutdown order (docs/conversations.md)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.process import FakeProcess
from tests.kit import example_souls


def daemon_env(fake_url: str) -> dict[str, str]:
    """This environment without soulbot's and the SDK's variables, on the fake model."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOULBOT_", "ANTHROPIC_"))}
    return env | {"ANTHROPIC_BASE_URL": fake_url, "ANTHROPIC_API_KEY": "test-key"}


class Daemon:
    """A `soulbot run` subprocess with the console adapter on its stdin/stdout."""

    def __init__(self, cwd: Path, fake_url: str, wait_s: float = 5.0) -> None:
        example_souls(cwd)
        (cwd / "soulbot.yaml").write_text(
            "default_soul: wren\n"
            f"memory: {{compile: {{shutdown_wait_s: {wait_s}}}}}\n"
            "model: {max_retries: 0}\n"
        )
        env = daemon_env(fake_url)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bot", "run", "--log-format", "json"],
            cwd=cwd, env=env, text=True, bufsize=1,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.events: list[dict[str, Any]] = []
        self.db = cwd / "data" / "soulbot.db"

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_event(self, name: str) -> dict[str, Any]:
        """Read log lines until `name` (the test's timeout bounds the wait)."""
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            entry = json.loads(line)
            self.events.append(entry)
            if entry["event"] == name:
                return entry
        raise AssertionError(f"the daemon exited before logging {name}")

    def read_reply(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def finish(self) -> tuple[int, list[str]]:
        """Wait for exit; the rest of stdout and the events logged until then."""
        out, err = self.proc.communicate(timeout=30)
        self.events += [json.loads(line) for line in err.splitlines() if line.startswith("{")]
        return self.proc.returncode, out.splitlines()

    def names(self) -> list[str]:
        return [e["event"] for e in self.events]


@pytest.fixture
def fake() -> Iterator[FakeProcess]:
    with FakeProcess() as process:
        yield process


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for daemon in started:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()


def start(tmp_path: Path, fake: FakeProcess, daemons: list[Daemon], wait_s: float = 5.0) -> Daemon:
    daemon = Daemon(tmp_path, fake.url, wait_s)
    daemons.append(daemon)
    daemon.wait_event("daemon.started")
    return daemon


@pytest.mark.timeout(60)
def test_run_without_credentials_says_what_to_set(tmp_path: Path) -> None:
    example_souls(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOULBOT_", "ANTHROPIC_"))}
    result = subprocess.run(
        [sys.executable, "-m", "bot", "run"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "ANTHROPIC_API_KEY" in result.stderr and "model.base_url" in result.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_line_is_answered_and_a_signal_stops_cleanly(
    tmp_path: Path, fake: FakeProcess, daemons: list[Daemon], signum: signal.Signals
) -> None:
    daemon = start(tmp_path, fake, daemons)
    daemon.say("hello wren")
    reply = daemon.read_reply()
    assert reply.startswith("Wren> echo:")
    assert "hello wren" in reply + daemon.read_reply()
    daemon.proc.send_signal(signum)
    code, _ = daemon.finish()
    assert code == 0
    assert daemon.names()[-1] == "daemon.stopped"
    assert "shutdown.pending" not in daemon.names()


@pytest.mark.timeout(60)
def test_a_turn_in_flight_is_answered_before_exit(
    tmp_path: Path, fake: FakeProcess, daemons: list[Daemon]
) -> None:
    fake.configure(latency_s=2.0)
    daemon = start(tmp_path, fake, daemons, wait_s=10)
    daemon.say("are you still there?")
    daemon.wait_event("turn.started")
    daemon.proc.send_signal(signal.SIGTERM)
    code, out = daemon.finish()
    assert code == 0, " ".join(daemon.names())
    assert any("are you still there?" in line for line in out)
    names = daemon.names()
    assert names.index("turn.completed") < names.index("daemon.stopped")
    assert "shutdown.pending" not in names


@pytest.mark.timeout(60)
def test_a_wait_shorter_than_the_model_reports_pending(
    tmp_path: Path, fake: FakeProcess, daemons: list[Daemon]
) -> None:
    fake.configure(latency_s=5.0)
    daemon = start(tmp_path, fake, daemons, wait_s=0.5)
    daemon.say("this will not be answered")
    daemon.wait_event("turn.started")
    deadline = time.monotonic() + 10
    while not fake.requests() and time.monotonic() < deadline:  # the turn's request is in
        time.sleep(0.02)
    fake.configure(latency_s=0)  # that request still takes 5 s; the shutdown compile does not
    sent = time.monotonic()
    daemon.proc.send_signal(signal.SIGTERM)
    code, out = daemon.finish()
    elapsed = time.monotonic() - sent
    assert code == 0
    assert elapsed < 4.0, "the daemon waited for the model past shutdown_wait_s"
    pending = [e for e in daemon.events if e["event"] == "shutdown.pending"]
    assert len(pending) == 1 and pending[0]["turns"] == 1
    assert not any("this will not be answered" in line for line in out)
    # The message itself was stored before the turn started: nothing is lost.
    conn = sqlite3.connect(daemon.db)
    stored = [r[0] for r in conn.execute("SELECT content FROM history WHERE role = 'user'")]
    conn.close()
    assert stored == ["this will not be answered"]


@pytest.mark.timeout(60)
def test_a_second_signal_exits_at_once_with_the_store_closed(
    tmp_path: Path, fake: FakeProcess, daemons: list[Daemon]
) -> None:
    fake.configure(latency_s=20.0)
    daemon = start(tmp_path, fake, daemons, wait_s=30)
    daemon.say("slow one")
    daemon.wait_event("turn.started")
    daemon.proc.send_signal(signal.SIGTERM)
    daemon.wait_event("daemon.stopping")
    sent = time.monotonic()
    daemon.proc.send_signal(signal.SIGTERM)
    code, _ = daemon.finish()
    assert time.monotonic() - sent < 5.0
    assert code == 1
    assert "shutdown.forced" in daemon.names()
    assert daemon.names()[-1] == "daemon.stopped"
    # A cleanly closed SQLite database in WAL mode leaves no -wal file behind.
    assert not daemon.db.with_name("soulbot.db-wal").exists()
    conn = sqlite3.connect(daemon.db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


@pytest.mark.timeout(60)
def test_end_of_input_stops_a_console_only_daemon(
    tmp_path: Path, fake: FakeProcess, daemons: list[Daemon]
) -> None:
    daemon = start(tmp_path, fake, daemons)
    daemon.say("one last thing")
    code, out = daemon.finish()  # closes stdin: the end of input
    assert code == 0
    assert any("one last thing" in line for line in out)


@pytest.mark.timeout(60)
def test_run_refuses_to_start_without_a_soul(tmp_path: Path) -> None:
    (tmp_path / "workspaces" / "broken").mkdir(parents=True)
    (tmp_path / "workspaces" / "broken" / "SOUL.md").write_text("---\nname: [x\n---\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOULBOT_")}
    result = subprocess.run(
        [sys.executable, "-m", "bot", "run", "--log-format", "json"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "no soul loaded" in result.stderr
    assert any(
        json.loads(line)["event"] == "soul.load_failed"
        for line in result.stderr.splitlines()
        if line.startswith("{")
    )


@pytest.mark.timeout(60)
def test_a_second_daemon_on_the_same_data_dir_stops_with_one_line(
    tmp_path: Path, fake: FakeProcess, daemons: list[Daemon]
) -> None:
    first = start(tmp_path, fake, daemons)
    env = daemon_env(fake.url)
    second = subprocess.run(
        [sys.executable, "-m", "bot", "run", "--log-format", "json"], cwd=tmp_path, env=env,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert second.returncode == 1
    errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: data is in use by another soulbot (pid {first.proc.pid}): stop it first, "
        "or give this one a data_dir of its own"
    ]
    assert (tmp_path / "data" / "health.json").exists()  # the first one's, left alone
    first.say("still mine?")
    assert first.read_reply().startswith("Wren> echo: ")
