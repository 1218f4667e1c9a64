from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

GOOD_SOUL = """---
name: Aria
agentId: aria
role: Support agent
hexaco:
  honestyHumility: 0.85
  openness: 0.65
hardLimits:
  - Never share internal pricing
---
## Who You Are
You are Aria.
"""

MakeSoul = Callable[..., Path]


@pytest.fixture
def make_soul(tmp_path: Path) -> MakeSoul:
    """Write a soul folder under tmp_path/workspaces: `files` maps a path in
    the folder to its text."""

    def make(
        folder: str = "aria",
        soul: str | bytes | None = GOOD_SOUL,
        files: dict[str, str] | None = None,
    ) -> Path:
        root = tmp_path / "workspaces" / folder
        root.mkdir(parents=True)
        if soul is not None:
            data = soul if isinstance(soul, bytes) else soul.encode()
            (root / "SOUL.md").write_bytes(data)
        for name, text in (files or {}).items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return root

    return make
