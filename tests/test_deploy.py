"""deploy/Dockerfile, deploy/compose.yaml and deploy/soulbot.service, read and checked
without Docker or the network (`systemd-analyze verify` when it is installed)."""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

from tests.kit import example_souls

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
SECRETS = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "TELEGRAM_TOKEN", "DISCORD_TOKEN")
DAEMON = ["soulbot", "run", "--log-format", "json"]


def instructions(keyword: str) -> list[str]:
    """The arguments of each `keyword` instruction of the Dockerfile, in order
    (`\\` continuations joined, comments dropped)."""
    found, pending = [], ""
    for raw in (DEPLOY / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
        elif line and not line.startswith("#"):
            name, _, args = (pending + line).partition(" ")
            pending = ""
            if name.upper() == keyword:
                found.append(args.strip())
    return found


def argv(args: str) -> list[str]:
    """A command in exec form (a JSON list) or shell form."""
    return list(json.loads(args)) if args.startswith("[") else shlex.split(args)


def copies() -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY, flags such as --chown dropped."""
    pairs = []
    for args in instructions("COPY"):
        *sources, dest = (word for word in argv(args) if not word.startswith("--"))
        pairs.append((sources, dest))
    return pairs


WORKDIR = PurePosixPath(instructions("WORKDIR")[-1])
VOLUMES = {WORKDIR / "workspaces", WORKDIR / "data"}
ENV = dict(word.split("=", 1) for args in instructions("ENV") for word in shlex.split(args))


def test_the_image_runs_the_daemon_as_a_user_that_is_not_root() -> None:
    assert instructions("FROM") == ["python:3.11-slim"]
    assert instructions("USER")[-1].split(":")[0] not in ("root", "0")
    assert instructions("STOPSIGNAL") == ["SIGTERM"]
    assert argv(instructions("ENTRYPOINT")[-1]) + argv(instructions("CMD")[-1]) == DAEMON
    [healthcheck] = instructions("HEALTHCHECK")
    assert argv(healthcheck.partition(" CMD ")[2])[:2] == ["soulbot", "health"]
    assert {PurePosixPath(v) for args in instructions("VOLUME") for v in argv(args)} == VOLUMES
    assert ENV["PYTHONUNBUFFERED"] == "1"
    config = [WORKDIR / dest for sources, dest in copies() if sources[0].endswith("example.yaml")]
    assert config == [PurePosixPath(ENV["SOULBOT_CONFIG"])]


def test_every_copy_source_exists_and_is_in_the_build_context() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    rules = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert rules[0] == "*", ".dockerignore leaves out everything, then lets in what is copied"
    sent = [rule[1:] for rule in rules if rule.startswith("!")]
    for source in (source for sources, _ in copies() for source in sources):
        assert (ROOT / source).exists(), f"COPY {source}: not in the repo"
        assert any(source == s or source.startswith(s + "/") for s in sent), source
    assert not {".git", ".venv", "data", "soulbot.yaml", "tests"} & {s.split("/")[0] for s in sent}


def test_the_image_layout_passes_soulbot_check(tmp_path: Path) -> None:
    """Replays the COPYs under tmp_path; `soulbot check` from the WORKDIR with the
    image's SOULBOT_CONFIG, as in the container."""
    image = tmp_path / "image"
    for sources, dest in copies():
        target = image / (WORKDIR / dest).relative_to("/")
        for source in map(ROOT.joinpath, sources):
            if source == ROOT / "workspaces":  # as committed, not a local run's souls
                source = example_souls(tmp_path / "committed")
            if source.is_dir():
                skip = shutil.ignore_patterns("__pycache__", "soul.lock", "backups")
                shutil.copytree(source, target, ignore=skip)
            else:
                into = target / source.name if dest.endswith("/") else target
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, into)
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    env["SOULBOT_CONFIG"] = str(image / PurePosixPath(ENV["SOULBOT_CONFIG"]).relative_to("/"))
    check, cwd = [sys.executable, "-m", "bot", "check"], image / WORKDIR.relative_to("/")
    result = subprocess.run(check, cwd=cwd, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_builds_the_image_and_passes_the_secrets() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    service = compose["services"]["soulbot"]
    context = (DEPLOY / service["build"]["context"]).resolve()
    assert context == ROOT
    assert (context / service["build"]["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    assert service["environment"] == {name: f"${{{name}:-}}" for name in SECRETS}
    mounts = dict(volume.split(":")[:2] for volume in service["volumes"])
    assert {PurePosixPath(target) for target in mounts.values()} == VOLUMES
    assert set(mounts) <= set(compose["volumes"])
    assert service["restart"] == "unless-stopped"
    grace = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", service["stop_grace_period"])
    assert grace, "stop_grace_period: minutes and seconds, such as 3m or 2m30s"
    assert int(grace[1] or 0) * 60 + int(grace[2] or 0) > 60
    assert service["logging"]["driver"] == "json-file"
    assert {"max-size", "max-file"} <= set(service["logging"]["options"])


def test_the_unit_runs_the_daemon_and_stops_it_gracefully() -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read_string((DEPLOY / "soulbot.service").read_text())
    assert parser["Install"]["WantedBy"] == "multi-user.target"
    service = parser["Service"]
    assert (service["Type"], service["Restart"]) == ("simple", "on-failure")
    assert service["User"] not in ("root", "0")
    command = shlex.split(service["ExecStart"])
    assert [Path(command[0]).name, *command[1:]] == DAEMON
    assert service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) > 60
    writable = {f"{service['WorkingDirectory']}/{name}" for name in ("data", "workspaces")}
    assert set(service["ReadWritePaths"].split()) == writable


def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    text = (DEPLOY / "soulbot.service").read_text()
    soulbot = Path(sys.executable).with_name("soulbot")
    text = text.replace("/opt/soulbot/.venv/bin/soulbot", str(soulbot))
    text = text.replace("/opt/soulbot", str(tmp_path)).replace("/etc/soulbot", str(tmp_path))
    unit = tmp_path / "soulbot.service"
    unit.write_text(text)
    result = subprocess.run(
        [tool, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=30
    )
    # Other units on the host may draw warnings of their own: only ours count.
    ours = [line for line in result.stderr.splitlines() if "soulbot.service" in line]
    assert result.returncode == 0 and not ours, result.stderr
