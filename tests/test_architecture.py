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
    assert "3 kept, 0 broken" in result.stdout


def test_a_module_cycle_breaks_them(tree: Path) -> None:
    # bot.memory.store is imported by bot.memory.recall: the reverse closes a cycle.
    _add_line(tree / "bot/memory/store.py", "import bot.memory.recall")
    result = _lint(tree)
    assert result.returncode == 1
    assert "No cycles are allowed in bot.memory" in result.stdout


def test_a_package_cycle_behind_type_checking_breaks_them(tree: Path) -> None:
    # bot.chat imports bot.memory; memory taking chat back, even for types only, is a cycle.
    types_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import bot.chat.history"
    _add_line(tree / "bot/memory/page.py", types_only)
    result = _lint(tree)
    assert result.returncode == 1
    assert "- .memory -> .chat (1 import)" in result.stdout


def test_an_adapter_importing_more_of_bot_than_its_types_breaks_them(tree: Path) -> None:
    _add_line(tree / "adapters/split.py", "import bot.errors")
    result = _lint(tree)
    assert result.returncode == 1
    assert "adapters.split -> bot.errors" in result.stdout


def test_the_config_importing_a_domain_module_breaks_them(tree: Path) -> None:
    _add_line(tree / "bot/config/validation.py", "import bot.soul.persona")
    result = _lint(tree)
    assert result.returncode == 1
    assert "bot.config.validation -> bot.soul.persona" in result.stdout
