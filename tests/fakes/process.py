"""The fake Anthropic server as a separate process, for daemon subprocess tests
and benchmarks, with its HTTP control endpoints wrapped."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


class FakeProcess:
    """`python -m tests.fakes.anthropic_fake` on a free port. Use as a context manager."""

    def __init__(
        self, latency_s: float = 0.0, min_cache_tokens: int = 1024, demo: bool = False
    ) -> None:
        """`demo`: the demo model of `make fake` (tests/fakes/demo.py)."""
        self._args = [
            sys.executable, "-m", "tests.fakes.anthropic_fake", "--port", "0",
            "--latency", str(latency_s), "--min-cache-tokens", str(min_cache_tokens),
            *(["--demo"] if demo else []),
        ]  # fmt: skip
        self._proc: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> FakeProcess:
        self._proc = subprocess.Popen(
            self._args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()  # blocks until the server listens
        if not line.startswith("PORT "):
            self._proc.kill()
            raise RuntimeError(f"the fake server did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"
        return self

    @property
    def pid(self) -> int:
        """The server's process id. Raises RuntimeError outside `with`."""
        if self._proc is None:
            raise RuntimeError("the fake server is not started")
        return self._proc.pid

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def script(self, *replies: dict[str, Any]) -> None:
        self._call("POST", "/_fake/script", list(replies))

    def configure(self, **settings: Any) -> None:
        self._call("POST", "/_fake/config", settings)

    def requests(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/_fake/requests")
        return result
