"""The import contracts (pyproject.toml, `[tool.importlinter]`) hold, and break
when an import cycle or a forbidden import is added."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the packages and the contracts, to break on purpose."""
    for package in ("bot", "adapters"):
        shutil.copytree(REPO / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    return tmp_path


def _add_line(path: Path, line: str) -> None:
    text = path.read_text()
    head = "from __future__ import annotations\n"
    path.write_text(text.replace(head, f"{head}\n{line}\n", 1))


def test_the_contracts_hold() -> None:
    result = _lint(REPO)
    assert result.returncode == 0, result.stdout
    assert "4 kept, 0 broken" in result.stdout


TYPES_ONLY = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import bot.chat.history"


@pytest.mark.parametrize(
    ("module", "line", "says"),
    [
        # bot.memory.recall imports bot.memory.store: the reverse closes a module cycle.
        ("bot/memory/store.py", "import bot.memory.recall", "No cycles are allowed in bot.memory"),
        # bot.chat imports bot.memory: memory taking chat back, even for types only.
        ("bot/memory/page.py", TYPES_ONLY, "- .memory -> .chat (1 import)"),
        ("adapters/split.py", "import bot.errors", "adapters.split -> bot.errors"),
        ("bot/config/validation.py", "import bot.soul.persona",
         "bot.config.validation -> bot.soul.persona"),
        # bot.model imports nothing of bot.cluster: no cycle, but a room taking one above it.
        ("bot/cluster/leases.py", "import bot.model.usage",
         "bot.cluster is not allowed to import bot.model"),
        # The web console sits above the daemon that runs it: the daemon is given it.
        ("bot/app/daemon.py", "import bot.web.service", "bot.app is not allowed to import bot.web"),
    ],
    ids=["module-cycle", "package-cycle-for-types", "adapter-import", "config-import",
         "upward-import", "app-above-web"],
)  # fmt: skip
def test_an_added_import_breaks_them(tree: Path, module: str, line: str, says: str) -> None:
    _add_line(tree / module, line)
    result = _lint(tree)
    assert result.returncode == 1
    assert "BROKEN" in result.stdout
    assert says in result.stdout
