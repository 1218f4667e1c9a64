"""Using the bot in a checkout changes no tracked file, and the suite stays green
there (issue 16). In a clone of this tree, as a person would, against the demo
model: the README's first chat with the example config, `soulbot init Juniper`,
the heartbeat demo (a conversation in the shared scope rewrites twinkle's
SOUL.md), `soulbot backup`; then `git status` shows nothing, and the tests that
once read the live workspaces/ pass there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from tests.fakes.process import FakeProcess

REPO = Path(__file__).resolve().parents[1]

# Tests that read the live folder and failed in a used checkout, and those that run
# soulbot in the checkout itself.
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
    "tests/test_deploy.py::test_every_bind_mount_exists_after_the_readme_steps",
    "tests/test_deploy.py::test_git_and_the_build_context_leave_out_the_users_files",
]
# The environment of the person's shell has none of these (no platform is on).
UNSET = ("SOULBOT_", "PYTEST_", "ANTHROPIC_", "TELEGRAM_", "DISCORD_")
# The README's heartbeat demo config ("The heartbeat").
HEARTBEAT_DEMO = """\
default_soul: twinkle
heartbeat: {idle_minutes: 1}
bindings:
  - {platform: console, soul: twinkle, memory: shared}
"""
# Piped at once, the two lines may reach the model in one turn (one reply, not two):
# the first is long enough for a reflection either way (min_conversation_tokens).
SAID = (
    "I spent the whole weekend repotting my basil and the tomato seedlings on the "
    "balcony, and the lemon tree came inside for the winter; next spring I will grow "
    "peppers and climbing beans along the railing\nthanks, good night\n"
)


def git(*args: str, cwd: Path = REPO) -> str:
    command = ["git", "-c", "user.name=test", "-c", "user.email=test@example.org", *args]
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, check=True, timeout=30
    ).stdout


def clone_of_this_tree(clone: Path) -> None:
    """A clone of REPO whose one new commit is this working tree's files (committed
    or not; never what git ignores), so that `git status` there starts clean."""
    git("clone", "-q", str(REPO), str(clone))
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard")
    names = {name for name in listed.split("\0") if name and (REPO / name).is_file()}
    for name in names:
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, clone / name)
    for name in filter(None, git("ls-files", "-z", cwd=clone).split("\0")):
        if name not in names:
            (clone / name).unlink()
    git("add", "-A", cwd=clone)
    git("commit", "-q", "--allow-empty", "-m", "this tree", cwd=clone)


def soulbot(clone: Path, env: dict[str, str], *args: str, said: str = "") -> str:
    """`soulbot ARGS` in the clone, `said` on its stdin; its stderr. Fails the test
    on a non-zero exit."""
    result = subprocess.run(
        [sys.executable, "-m", "bot", *args], cwd=clone, env=env, input=said,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"soulbot {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stderr


def use_the_bot(clone: Path, env: dict[str, str]) -> None:
    """The README's first steps, as a person takes them."""
    shutil.copy(clone / "deploy" / "soulbot.example.yaml", clone / "soulbot.yaml")
    first = soulbot(clone, env, "run", "--log-format", "json", said=SAID)
    assert "copied the example souls twinkle, wren there" in first, first
    assert list((clone / "data" / "memory").rglob("*.md")), "the chat compiled no wiki"
    soulbot(clone, env, "init", "Juniper")
    assert sorted(p.name for p in (clone / "workspaces").iterdir()) == [
        "juniper", "twinkle", "wren"
    ]  # fmt: skip
    (clone / "soulbot.yaml").write_text(HEARTBEAT_DEMO)
    soulbot(clone, env, "run", "--log-format", "json", said=SAID)
    shipped = resources.files("bot.soul").joinpath("examples", "twinkle", "SOUL.md").read_text()
    written = (clone / "workspaces" / "twinkle" / "SOUL.md").read_text()
    assert "and I want to remember it." in written and written != shipped
    assert list((clone / "workspaces" / "twinkle" / "memory" / ".meta" / "backups").iterdir())
    soulbot(clone, env, "backup", "backups")
    assert len(list((clone / "backups").glob("soulbot-backup-*.tar.gz"))) == 1


@pytest.mark.timeout(240)
def test_using_the_bot_changes_no_tracked_file_and_the_suite_stays_green(
    tmp_path: Path,
) -> None:
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: nothing to clone")
    clone = tmp_path / "clone"
    clone_of_this_tree(clone)
    assert git("status", "--porcelain", cwd=clone) == ""
    env = {k: v for k, v in os.environ.items() if not k.startswith(UNSET)}
    env["PYTHONPATH"] = str(clone)
    with FakeProcess(demo=True) as model:
        env |= {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "any"}
        use_the_bot(clone, env)
    assert git("status", "--porcelain", "-uall", cwd=clone) == ""
    for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"):
        del env[name]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *ONCE_FAILING, "-q", "-p", "no:cacheprovider"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=150, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{len(ONCE_FAILING)} passed" in result.stdout, result.stdout[-2000:]
