"""Where the `soulbot` command looks when it is not told: the config it falls back
to (as `make run` does), the memory scope it picks, the soul folder `init` makes
and the command it says to run next. A subprocess, real files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.kit import example_souls
from tests.run_cli import soulbot

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "soulbot.example.yaml"
FALLBACK = (
    "no ./soulbot.yaml: using deploy/soulbot.example.yaml "
    "(copy it to ./soulbot.yaml to make it yours)"
)
SCRIPT = Path(sys.executable).parent / "soulbot"  # the console script of this venv


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The repo as cloned: the example config under deploy/, no ./soulbot.yaml."""
    example_souls(tmp_path)
    (tmp_path / "deploy").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "deploy" / EXAMPLE.name)
    return tmp_path


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A copy of the example config (as ./soulbot.yaml) and workspaces in tmp_path."""
    example_souls(tmp_path)
    shutil.copy(EXAMPLE, tmp_path / "soulbot.yaml")
    return tmp_path


# -- the config: ./soulbot.yaml, else the example config, else the defaults ----------


def test_without_soulbot_yaml_the_example_config_is_used_and_said(checkout: Path) -> None:
    fallback = soulbot("check", cwd=checkout)
    explicit = soulbot("check", "--config", "deploy/soulbot.example.yaml", cwd=checkout)
    assert fallback.returncode == 0, fallback.stdout + fallback.stderr
    assert fallback.stdout == explicit.stdout  # what `make run` passes
    assert [row.split()[0] for row in fallback.stdout.splitlines()[1:3]] == ["twinkle", "wren"]
    assert fallback.stderr.splitlines()[0] == FALLBACK
    assert FALLBACK not in explicit.stderr
    assert all(json.loads(line) for line in fallback.stderr.splitlines()[1:])  # the rest: logs


def test_chat_in_a_checkout_talks_to_the_default_soul_as_make_run_does(checkout: Path) -> None:
    from tests.fakes.process import FakeProcess

    with FakeProcess() as fake:
        env = {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "k"}
        result = subprocess.run(
            [sys.executable, "-m", "bot", "chat"], cwd=checkout, input="hello\n/quit\n",
            env={**os.environ, **env}, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert any(line.startswith("Wren> echo: ") for line in result.stdout.splitlines())
    assert FALLBACK in result.stderr
    assert "default_soul" not in result.stderr


def test_run_in_a_checkout_stops_only_for_the_credentials(checkout: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOULBOT_", "ANTHROPIC_"))}
    result = subprocess.run(
        [sys.executable, "-m", "bot", "run"], cwd=checkout, env=env, input="",
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "ANTHROPIC_API_KEY" in result.stderr and "default_soul" not in result.stderr


def test_soulbot_yaml_and_an_explicit_config_come_before_the_example(checkout: Path) -> None:
    (checkout / "soulbot.yaml").write_text("default_soul: twinkle\n")
    own = soulbot("check", cwd=checkout)
    assert own.returncode == 0 and FALLBACK not in own.stderr
    (checkout / "soulbot.yaml").unlink()
    (checkout / "other.yaml").write_text("default_soul: wren\n")
    named = soulbot("check", cwd=checkout, env={"SOULBOT_CONFIG": "other.yaml"})
    assert named.returncode == 0 and FALLBACK not in named.stderr


def test_without_either_the_built_in_defaults_as_before(tmp_path: Path) -> None:
    example_souls(tmp_path)
    result = soulbot("check", cwd=tmp_path)
    assert result.returncode == 1  # no default_soul, and two souls: as `run` refuses
    assert "- default_soul: set it to one of the loaded souls (twinkle, wren)" in result.stdout
    assert FALLBACK not in result.stderr
    events = [json.loads(line)["event"] for line in result.stderr.splitlines()]
    assert "config.default_used" in events


# -- memory recall / pages without --scope -----------------------------------------


def _import(example: Path, scope: str, *texts: str) -> None:
    rows = [{"text": text, "speaker": "user", "name": "Ann", "created_at": 1760434300}
            for text in texts]  # fmt: skip
    file = example / f"{scope.replace(':', '-')}.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = soulbot("memory", "import", "wren", file.name, "--scope", scope, cwd=example)
    assert result.returncode == 0, result.stderr


def _said(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The stderr lines that are not log lines."""
    return [line for line in result.stderr.splitlines() if not line.startswith("{")]


def test_recall_and_pages_pick_the_only_scope_with_traces(example: Path) -> None:
    _import(example, "user:telegram:42", "I adopted a greyhound named Pepper")
    recalled = soulbot("memory", "recall", "wren", "my greyhound", cwd=example)
    assert recalled.returncode == 0, recalled.stderr
    assert "I adopted a greyhound named Pepper" in recalled.stdout
    assert _said(recalled) == ["scope user:telegram:42: the only one where wren has traces"]
    pages = soulbot("memory", "pages", "wren", cwd=example)
    assert pages.returncode == 0, pages.stderr
    assert _said(pages) == ["scope user:telegram:42: the only one where wren has traces"]
    assert pages.stdout.strip() == "(no pages)"  # not compiled yet; the shared wiki has some


def test_recall_with_traces_in_several_scopes_asks_which(example: Path) -> None:
    _import(example, "user:telegram:42", "I adopted a greyhound named Pepper", "Pepper is 3")
    _import(example, "shared", "Wren likes lanterns")
    for command in (("recall", "wren", "greyhound"), ("pages", "wren")):
        result = soulbot("memory", *command, cwd=example)
        assert result.returncode == 1
        assert _said(result) == [
            "error: wren has traces in 2 scopes: pick one",
            "  --scope shared            1 trace",
            "  --scope user:telegram:42  2 traces",
        ]
        assert result.stdout == ""
    shared = soulbot("memory", "recall", "wren", "lanterns", "--scope", "shared", cwd=example)
    assert shared.returncode == 0, shared.stderr
    assert "Wren likes lanterns" in shared.stdout and "Pepper" not in shared.stdout
    assert _said(shared) == []


def test_with_no_traces_the_shared_wiki_is_shown(example: Path) -> None:
    pages = soulbot("memory", "pages", "wren", cwd=example)
    assert pages.returncode == 0, pages.stderr
    assert _said(pages) == ["wren has no traces yet: looking in the shared scope"]
    assert pages.stdout == soulbot("memory", "pages", "wren", "--scope", "shared",
                                   cwd=example).stdout  # fmt: skip
    unknown = soulbot("memory", "recall", "nobody", "hi", cwd=example)
    assert unknown.returncode == 1
    assert "no soul with id 'nobody' is loaded (loaded: twinkle, wren)" in unknown.stderr


# -- init: the folder is the soul's id; the command to run next ---------------------


def test_init_makes_the_folder_its_id(tmp_path: Path) -> None:
    (tmp_path / "workspaces").mkdir()
    made = soulbot("init", "Juniper", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "workspaces" / "juniper" / "SOUL.md").is_file()
    assert not (tmp_path / "workspaces" / "Juniper").exists()
    assert made.stdout.startswith("created workspaces/juniper (soul id juniper); ")
    prompt = soulbot("prompt", "juniper", cwd=tmp_path)
    assert prompt.returncode == 0, prompt.stderr
    assert "You are Juniper." in prompt.stdout


def test_init_takes_any_name_with_a_slug(tmp_path: Path) -> None:
    (tmp_path / "workspaces").mkdir()
    made = soulbot("init", "Zoë Ünal", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    # A first run: the empty folder got the example souls, then the new one.
    assert "held no soul: copied the example souls twinkle, wren there" in made.stderr
    soul_md = (tmp_path / "workspaces" / "zoe-unal" / "SOUL.md").read_text(encoding="utf-8")
    fields = yaml.safe_load(soul_md.split("---\n")[1])
    assert (fields["name"], fields["agentId"]) == ("Zoë Ünal", "zoe-unal")
    (tmp_path / "soulbot.yaml").write_text("default_soul: zoe-unal\n")
    check = soulbot("check", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    rows = [line.split()[:3] for line in check.stdout.splitlines()]
    assert ["zoe-unal", "Zoë", "Ünal"] in rows and ["wren", "Wren", "SOUL.md"] in rows
    outside = soulbot("init", "../up", cwd=tmp_path)  # a name, never a path
    assert outside.returncode == 0, outside.stderr
    assert (tmp_path / "workspaces" / "up" / "SOUL.md").is_file()
    assert not (tmp_path / "up").exists()
    bad = soulbot("init", "日本", cwd=tmp_path)
    assert bad.returncode == 1
    assert "'日本' cannot name a workspace" in bad.stderr and "Latin letters" in bad.stderr


@pytest.mark.skipif(not SCRIPT.is_file(), reason="soulbot is not installed in this venv")
def test_init_names_the_check_command_as_it_was_run(tmp_path: Path) -> None:
    (tmp_path / "workspaces").mkdir()
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "soulbot").symlink_to(SCRIPT)
    system = {"PATH": "/usr/bin:/bin"}  # no soulbot on it
    by_path = soulbot("init", "Ann", cwd=tmp_path, env=system, program=(".venv/bin/soulbot",))
    assert by_path.returncode == 0, by_path.stderr
    assert by_path.stdout.rstrip().endswith("then run `.venv/bin/soulbot check`")
    on_path = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    found = shutil.which("soulbot", path=on_path["PATH"])
    assert found is not None
    by_name = soulbot("init", "Bea", cwd=tmp_path, env=on_path, program=(found,))
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout.rstrip().endswith("then run `soulbot check`")
    (tmp_path / "my.yaml").write_text("{}\n")
    told = soulbot("init", "Cy", "--config", "my.yaml", cwd=tmp_path, env=on_path,
                   program=(found,))  # fmt: skip
    assert told.stdout.rstrip().endswith("then run `soulbot check --config my.yaml`")
    module = soulbot("init", "Di", cwd=tmp_path)
    assert module.stdout.rstrip().endswith(" -m bot check`")
