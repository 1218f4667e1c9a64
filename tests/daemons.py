"""`soulbot run` as a child process, for tests and benchmarks that need more
than one: its JSON log lines gathered as they come, waited on by event name."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def daemon_env(model_url: str, **extra: str) -> dict[str, str]:
    """The environment of a daemon that asks the model at `model_url`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SOULBOT_"))}
    return env | {"ANTHROPIC_BASE_URL": model_url, "ANTHROPIC_API_KEY": "test-key"} | extra


class RunningDaemon:
    """One `soulbot run --config <config>` in `cwd`. `events` holds its log
    lines (JSON objects; other lines as {"event": <text>})."""

    def __init__(self, cwd: Path, config: Path, env: Mapping[str, str]) -> None:
        self._cwd, self._config, self._env = cwd, config, dict(env)
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self.events: list[dict[str, Any]] = []

    async def start(self, timeout: float = 60.0) -> None:  # noqa: ASYNC109
        """Start it and wait for `daemon.started`. Raises TimeoutError, or
        RuntimeError when it exits first (with its last lines)."""
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", "--config", str(self._config),
            "--log-format", "json", cwd=self._cwd, env=self._env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        self._reader = asyncio.create_task(self._read())
        await self.wait_for("daemon.started", timeout=timeout)

    @property
    def pid(self) -> int:
        """Its process id. Raises RuntimeError before `start`."""
        if self._proc is None:
            raise RuntimeError("the daemon is not started")
        return self._proc.pid

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        while line := await self._proc.stderr.readline():
            text = line.decode()
            self.events.append(json.loads(text) if text.startswith("{") else {"event": text})
            self._changed.set()
        self._changed.set()

    def named(self, event: str) -> list[dict[str, Any]]:
        """Its log lines of `event`, in order."""
        return [e for e in self.events if e.get("event") == event]

    async def wait_for(self, event: str, count: int = 1, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """Wait until it has logged `event` `count` times."""
        async with asyncio.timeout(timeout):
            while len(self.named(event)) < count:
                if self._reader is not None and self._reader.done():
                    tail = [e.get("event") for e in self.events[-10:]]
                    raise RuntimeError(f"the daemon exited before {event}: {tail}")
                self._changed.clear()
                await self._changed.wait()

    async def kill(self) -> None:
        """SIGKILL it (a crash: nothing of its stop runs) and wait until it is gone."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
            if self._reader is not None:
                await self._reader

    async def stop(self, timeout: float = 60.0) -> int:  # noqa: ASYNC109
        """SIGTERM, then its exit code (killed when it outlasts `timeout`)."""
        proc = self._proc
        if proc is None:
            return 0
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(timeout):
                code = await proc.wait()
                if self._reader is not None:
                    await self._reader
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return code
