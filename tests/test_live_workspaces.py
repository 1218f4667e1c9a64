"""The suite stays green after a person uses the bot in the checkout (issue 16):
in a clone of the repo, `soulbot init Juniper`, a heartbeat's SOUL.md edit and
its backups, then the tests that once copied the live workspaces/ pass there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Tests that read the live folder and failed in a used checkout (test_deploy's image
# layout passed, with the person's soul in it).
ONCE_FAILING = [
    "tests/cli/test_cli.py::test_check_the_example_config",
    "tests/cli/test_cli.py::test_check_in_the_repo_as_the_readme_says",
    "tests/cli/test_cli.py::test_check_reports_a_binding_to_an_unknown_soul",
    "tests/cli/test_cli.py::test_prompt_of_an_unknown_soul",
    "tests/cli/test_cli.py::test_soul_rollback_and_epoch",
    "tests/cli/test_cli.py::test_check_warns_about_links_out_of_a_soul_and_an_open_data_dir",
    "tests/test_hostile_inputs.py::test_run_and_check_with_a_soul_nested_1000_deep",
    "tests/soul/test_heartbeat.py::test_a_new_rule_goes_after_the_last_items_continuation_lines",
    "tests/test_deploy.py::test_the_image_layout_passes_soulbot_check",
]


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=30
    ).stdout


def clone_with_this_tree(clone: Path) -> None:
    """A clone of REPO (its HEAD, so the committed example souls) with the working
    tree's code and tests over it, so that what runs is this tree's, committed or
    not; workspaces/ stays as committed."""
    git("clone", "-q", str(REPO), str(clone))
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        if name.startswith("workspaces/"):
            continue
        source, target = REPO / name, clone / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        elif target.is_file():  # deleted in the working tree
            target.unlink()


def use_the_bot(clone: Path, env: dict[str, str]) -> None:
    """What a person's first runs leave in workspaces/: a new soul, a heartbeat's
    edit of twinkle's SOUL.md (a dated line and a rule) and its daily backup."""
    init = subprocess.run(
        [sys.executable, "-m", "bot", "init", "Juniper"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert init.returncode == 0, init.stdout + init.stderr
    souls = sorted(p.name for p in (clone / "workspaces").iterdir())
    assert len(souls) == 3 and "juniper" in [s.lower() for s in souls], souls
    soul_md = clone / "workspaces" / "twinkle" / "SOUL.md"
    original = soul_md.read_text(encoding="utf-8")
    backups = clone / "workspaces" / "twinkle" / "memory" / ".meta" / "backups"
    backups.mkdir(parents=True)
    (backups / "SOUL.md.2026-11-01").write_text(original, encoding="utf-8")
    edited = original.replace(
        "   autobiography first.\n", "   autobiography first.\n5. Ask before advice.\n", 1
    ).replace("(Empty at first", "- [2026-11-02 10:00] Met Ann.\n(Empty at first", 1)
    assert edited.count("\n") == original.count("\n") + 2, "the example twinkle changed shape"
    soul_md.write_text(edited, encoding="utf-8")
    status = git("status", "--porcelain", "--ignored", "-uall", "workspaces", cwd=clone)
    assert "workspaces/twinkle/SOUL.md" in status and ".meta/backups/" in status, status


@pytest.mark.timeout(120)
def test_the_suite_ignores_a_used_checkouts_workspaces(tmp_path: Path) -> None:
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: nothing to clone")
    clone = tmp_path / "clone"
    clone_with_this_tree(clone)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOULBOT_", "PYTEST_"))}
    env["PYTHONPATH"] = str(clone)
    use_the_bot(clone, env)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *ONCE_FAILING, "-q", "-p", "no:cacheprovider"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{len(ONCE_FAILING)} passed" in result.stdout, result.stdout[-2000:]
