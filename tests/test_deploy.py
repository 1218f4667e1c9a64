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
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from bot.config.load import parse_config
from bot.config.schema import Config, split_listen
from tests.run_cli import MODEL_ENV

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


def made_folders() -> list[str]:
    """The folders the Dockerfile's `RUN install -d` lines make (flags dropped)."""
    found = []
    for args in instructions("RUN"):
        words = argv(args)
        if words[:2] == ["install", "-d"]:
            values = {"-o", "-g", "-m"}
            found += [w for i, w in enumerate(words[2:], 2) if words[i - 1] not in values]
    return [word for word in found if not word.startswith("-")]


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
    """Replays the COPYs and the folders made under tmp_path; `soulbot check` from
    the WORKDIR with the image's SOULBOT_CONFIG, as in the container: the empty
    workspaces volume gets the example souls the package ships."""
    image = tmp_path / "image"
    for sources, dest in copies():
        target = image / (WORKDIR / dest).relative_to("/")
        for source in map(ROOT.joinpath, sources):
            if source.is_dir():
                skip = shutil.ignore_patterns("__pycache__", "soul.lock", "backups")
                shutil.copytree(source, target, ignore=skip)
            else:
                into = target / source.name if dest.endswith("/") else target
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, into)
    cwd = image / WORKDIR.relative_to("/")
    assert {WORKDIR / name for name in made_folders()} == VOLUMES
    for name in made_folders():
        (cwd / name).mkdir(parents=True)
    env = {
        k: v for k, v in os.environ.items() if k not in SECRETS
    } | MODEL_ENV  # the key, as set there
    env["SOULBOT_CONFIG"] = str(image / PurePosixPath(ENV["SOULBOT_CONFIG"]).relative_to("/"))
    check = [sys.executable, "-m", "bot", "check"]
    result = subprocess.run(check, cwd=cwd, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "copied the example souls twinkle, wren there" in result.stderr


MOUNTED = VOLUMES | {PurePosixPath(ENV["SOULBOT_CONFIG"])}


def mounts(service: dict) -> list[dict]:
    """The service's volumes in long syntax; a short `src:dst[:mode]` is a bind mount
    when src is a path (starts with . / or ~), else a named volume."""
    found = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target, *_ = volume.split(":")
            kind = "bind" if source.startswith((".", "/", "~")) else "volume"
            volume = {"type": kind, "source": source, "target": target}
        found.append(volume)
    return found


def test_compose_builds_the_image_and_passes_the_secrets() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    service = compose["services"]["soulbot"]
    context = (DEPLOY / service["build"]["context"]).resolve()
    assert context == ROOT
    assert (context / service["build"]["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    assert {name: service["environment"][name] for name in SECRETS} == {
        name: f"${{{name}:-}}" for name in SECRETS
    }
    # Bind mounts of the repo root's folders and config, no named volumes.
    assert {PurePosixPath(mount["target"]) for mount in mounts(service)} == MOUNTED
    assert all(mount["type"] == "bind" for mount in mounts(service))
    assert "volumes" not in compose
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


# The deploying guide's walk-through (docs/deploying.md), checked against the files it drives.

COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
# The files `-f` may combine: compose.yaml first, then an override.
BASE = ("compose.yaml",)
WITH_POSTGRES = ("compose.yaml", "compose.postgres.yaml")
WITH_WEBHOOK = ("compose.yaml", "compose.webhook.yaml")
SERVICE = COMPOSE["services"]["soulbot"]


def deploying() -> str:
    """The deploying guide, docs/deploying.md."""
    return (ROOT / "docs" / "deploying.md").read_text()


def compose_steps() -> list[str]:
    """The set-up commands of the README's Docker Compose part that make files in the
    checkout (cp, mkdir, install), in order: inline `code` and code-block lines."""
    part = deploying().partition("\n## Docker Compose\n")[2].partition("\n## Anything else\n")[0]
    assert part, "docs/deploying.md has a Docker Compose section"
    found = []
    for match in re.finditer(r"```[a-z]*\n(.*?)```|`([^`]+)`", part, flags=re.DOTALL):
        lines = match[1].splitlines() if match[1] is not None else [" ".join(match[2].split())]
        for line in lines:
            command = line.split("#")[0].strip()
            if re.match(r"(cp|mkdir|install) ", command):
                found.append(command)
    return found


def replay_compose_steps(checkout: Path) -> None:
    """A copy of what a clone holds (deploy/; no workspaces/, which git ignores),
    then the README's set-up commands run in it."""
    shutil.copytree(DEPLOY, checkout / "deploy")
    steps = compose_steps()
    assert steps, "the README shows the commands that make ./soulbot.yaml and ./data"
    for command in steps:
        words = shlex.split(command)
        assert not {"sudo", ".."} & set(words), command
        assert not any(word.startswith("/") and word != "/dev/null" for word in words), command
        subprocess.run(words, cwd=checkout, check=True, capture_output=True, timeout=10)


def bind_sources(project_dir: Path) -> dict[PurePosixPath, Path]:
    """Target -> host path of every bind mount, resolved as Compose resolves it: against
    the project directory, which is the compose file's folder (deploy/) when none is
    given, as with `docker compose -f deploy/compose.yaml` from the root."""
    assert "project_directory" not in COMPOSE  # no such key: nothing moves the base
    return {
        PurePosixPath(mount["target"]): (project_dir / mount["source"]).resolve()
        for mount in mounts(SERVICE)
        if mount["type"] == "bind"
    }


def test_every_bind_mount_exists_after_the_readme_steps(tmp_path: Path) -> None:
    checkout = tmp_path / "soulbot"
    sources = bind_sources(checkout / "deploy")
    assert set(sources) == MOUNTED
    assert all(source.parent == checkout for source in sources.values()), sources
    replay_compose_steps(checkout)
    for target, source in sources.items():
        assert source.exists(), f"{target}: {source} is not there after the README's steps"
        is_config = target == PurePosixPath(ENV["SOULBOT_CONFIG"])
        assert source.is_file() if is_config else source.is_dir(), source
    # A missing source is an error, never an empty folder Docker makes in its place.
    for mount in mounts(SERVICE):
        assert mount.get("bind", {}).get("create_host_path") is False, mount
    config = next(m for m in mounts(SERVICE) if m["target"] == ENV["SOULBOT_CONFIG"])
    assert config.get("read_only") is True
    # What the container then sees: the config from the mount, relative paths from its
    # WORKDIR, where ./workspaces and ./data are the mounts.
    env = {
        k: v for k, v in os.environ.items() if k not in SECRETS
    } | MODEL_ENV  # the key, as set there
    env["SOULBOT_CONFIG"] = str(sources[PurePosixPath(ENV["SOULBOT_CONFIG"])])
    check = [sys.executable, "-m", "bot", "check"]
    result = subprocess.run(
        check, cwd=checkout, env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr


def compose_config(checkout: Path, files: tuple[str, ...], env: dict[str, str]) -> Any:
    """The soulbot service as `docker compose -f deploy/<file>... config` gives it in
    `checkout` (no image is built). Skips the test where Compose is not installed."""
    docker = shutil.which("docker")
    version = docker and subprocess.run(
        [docker, "compose", "version"], capture_output=True, text=True, timeout=30
    )
    if not docker or not version or version.returncode != 0:
        pytest.skip("docker compose is not installed")
    chosen = [arg for name in files for arg in ("-f", f"deploy/{name}")]
    result = subprocess.run(
        [docker, "compose", *chosen, "config", "--format", "json"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["services"]["soulbot"]


def test_docker_compose_config_resolves_the_mounts_the_same_way(tmp_path: Path) -> None:
    """The same resolution by Compose itself, where it is installed (no image is built)."""
    checkout = tmp_path / "soulbot"
    replay_compose_steps(checkout)
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    service = compose_config(checkout, BASE, env)
    resolved = {PurePosixPath(m["target"]): Path(m["source"]) for m in service["volumes"]}
    assert resolved == bind_sources(checkout / "deploy")
    assert service["user"] == "10001:10001"


def test_compose_runs_as_the_image_user_unless_told_otherwise() -> None:
    [image_user] = instructions("USER")[-1:]
    user = re.fullmatch(r"\$\{SOULBOT_UID:-(\d+)\}:\$\{SOULBOT_GID:-(\d+)\}", SERVICE["user"])
    assert user, "user: ${SOULBOT_UID:-<uid>}:${SOULBOT_GID:-<gid>}"
    assert f"{user[1]}:{user[2]}" == image_user
    words = " ".join(deploying().split())
    assert "SOULBOT_UID" in words and f"chown -R {image_user} data workspaces" in words


USER_FILES = (
    "soulbot.yaml",
    "deploy/soulbot.yaml",
    ".env",
    "deploy/.env",
    "data/soulbot.db",
    "data/memory/wren/index.md",
    "backups/soulbot-backup-20260504-030201.tar.gz",
    "soulbot-backup-20260504-030201.tar.gz",
    "data.before-restore-20260504-030201/soulbot.db",
    "workspaces.before-restore-20260504-030201/wren/SOUL.md",
    "workspaces/wren/memory/.meta/backups/SOUL.md",
    "workspaces/wren/memory/.meta/soul.lock",
    "workspaces/wren/SOUL.md",
    "workspaces/wren/memory/index.md",
    "workspaces/juniper/SOUL.md",
)
SHIPPED = ("deploy/soulbot.example.yaml", "bot/soul/examples/wren/SOUL.md", "bot/__init__.py")


def dockerignored(path: str, rules: list[str]) -> bool:
    """Whether the build context leaves `path` out, as Docker reads .dockerignore: the
    last line that matches the path or one of its parent folders wins; `!` lets in."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    out = False
    for rule in rules:
        pattern = rule.removeprefix("!").strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
        regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        regex = re.sub(r"\\\[(.*?)\\\]", r"[\1]", regex)
        if any(re.fullmatch(regex, prefix) for prefix in prefixes):
            out = not rule.startswith("!")
    return out


def test_git_and_the_build_context_leave_out_the_users_files() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    rules = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    for path in USER_FILES:
        assert dockerignored(path, rules), f".dockerignore sends {path}"
    for path in SHIPPED:
        assert not dockerignored(path, rules), f".dockerignore leaves out {path}"
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("git or the checkout's .git is missing: .gitignore not checked")
    # Only the repo's .gitignore: no global excludes file (core.excludesFile).
    ask = [git, "-c", "core.excludesFile=", "check-ignore", "--no-index", "--verbose", "--"]
    result = subprocess.run(
        ask + list(USER_FILES + SHIPPED), cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    matched = {line.split("\t")[-1]: line for line in result.stdout.splitlines()}
    assert sorted(set(USER_FILES) - set(matched)) == [], ".gitignore misses these"
    assert sorted(set(SHIPPED) & set(matched)) == [], ".gitignore hides these"
    assert all(line.startswith(".gitignore:") for line in matched.values()), matched


def config_env_names() -> set[str]:
    """The ${NAME} the example config reads, in its values (not its comments)."""

    def strings(node: object) -> list[str]:
        if isinstance(node, dict):
            return [s for value in node.values() for s in strings(value)]
        if isinstance(node, list):
            return [s for value in node for s in strings(value)]
        return [node] if isinstance(node, str) else []

    example = yaml.safe_load((DEPLOY / "soulbot.example.yaml").read_text())
    return {name for s in strings(example) for name in re.findall(r"\$\{(\w+)", s)}


def test_the_readme_systemd_recipe_makes_the_env_file_the_unit_reads() -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read_string((DEPLOY / "soulbot.service").read_text())
    service = parser["Service"]
    env_file = service["EnvironmentFile"].removeprefix("-")
    folder = str(PurePosixPath(env_file).parent)
    section = deploying()
    lines = section.splitlines()

    def first(pattern: str) -> int:
        found = [i for i, line in enumerate(lines) if re.search(pattern, line)]
        assert found, f"the Deploying section has no line matching {pattern!r}"
        return found[0]

    made = first(rf"install -d\b.*\s{re.escape(folder)}/?(\s|$)")
    written = first(rf"install -m 600 /dev/null {re.escape(env_file)}(\s|$)")
    assert made < written, f"{folder} is made after {env_file} is written into it"
    # The env file's lines: every name the example config reads, but those the unit
    # sets itself (Environment=).
    set_by_unit = {word.split("=")[0] for word in shlex.split(service["Environment"])}
    shown = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=", section, flags=re.MULTILINE))
    assert {"ANTHROPIC_API_KEY", "TELEGRAM_TOKEN", "DISCORD_TOKEN"} <= shown
    assert sorted(config_env_names() - set_by_unit - shown) == []


def test_the_readme_walks_through_the_docker_tasks() -> None:
    section = deploying()
    words = " ".join(section.split())  # a command may wrap in the source
    compose = "docker compose -f deploy/compose.yaml"
    for command in (
        "cp deploy/soulbot.example.yaml soulbot.yaml",
        f"{compose} logs -f",
        f"{compose} up -d --build",
        f"{compose} run --rm soulbot init",
        f"{compose} run --rm soulbot check",
        f"{compose} restart",
        "soulbot backup",
        "git pull",
    ):
        assert command in words, command
    assert "## Backups and upgrades" in (ROOT / "docs" / "operations.md").read_text()
    # Numbered steps, in order, for each task.
    for task in ("My own soul", "My config", "See the logs", "Upgrade"):
        body = section.partition(f"*{task}")[2]
        assert body, f"the Docker part has a *{task}* task"
        steps = re.split(r"\n[*#]", body, maxsplit=1)[0]  # to the next task or heading
        numbers = re.findall(r"^(\d+)\. ", steps, flags=re.MULTILINE)
        assert numbers and numbers == [str(n) for n in range(1, len(numbers) + 1)], task


def test_the_postgres_override_gives_soulbot_a_healthy_database_first() -> None:
    override = yaml.safe_load((DEPLOY / "compose.postgres.yaml").read_text())
    postgres, soulbot = override["services"]["postgres"], override["services"]["soulbot"]
    assert postgres["image"].startswith("postgres:")
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    volume = postgres["volumes"][0].split(":")[0]
    assert volume in override["volumes"]  # a named volume: the data outlives the container
    assert soulbot["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    url = soulbot["environment"]["SOULBOT_STORE_URL"]
    db = postgres["environment"]
    assert url == f"postgresql://{db['POSTGRES_USER']}@postgres:5432/{db['POSTGRES_DB']}"
    # The password reaches both through the environment, never in the URL.
    assert "POSTGRES_PASSWORD" in soulbot["environment"]["PGPASSWORD"]
    # The example config reads the store's URL from the variable the override sets.
    assert "${SOULBOT_STORE_URL:-}" in (DEPLOY / "soulbot.example.yaml").read_text()


# What reaches the container: Compose's merge of the files, env_file and environment.

# The names Compose sets itself rather than pass on, by the file that sets them.
DECIDED = {
    "compose.yaml": {"SOULBOT_METRICS_LISTEN": "0.0.0.0:9464"},
    "compose.postgres.yaml": {"SOULBOT_STORE_URL": "postgresql://soulbot@postgres:5432/soulbot"},
    "compose.webhook.yaml": {"TELEGRAM_WEBHOOK_LISTEN": "0.0.0.0:8443"},
}


def code_env_names() -> set[str]:
    """The variables the code reads itself (click's envvar=), besides the config's."""
    return {
        name
        for path in (ROOT / "bot").rglob("*.py")
        for name in re.findall(r"envvar=\"(\w+)\"", path.read_text())
    }


def interpolate(value: str, lookup: Mapping[str, str]) -> str:
    """`value` with ${NAME}, ${NAME:-default}, ${NAME-default} and ${NAME:?error}
    replaced as Compose replaces them. Raises ValueError (Compose refuses to start)."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match[1], match[2], match[3]
        found = lookup.get(name)
        if op == ":?" and not found:
            raise ValueError(f"{name}: {arg}")
        if op == "-":
            return arg if found is None else found
        return found or (arg if op == ":-" else "")

    return re.sub(r"\$\{(\w+)(?:(:-|-|:\?)([^}]*))?\}", one, value)


def merged(files: tuple[str, ...]) -> dict[str, Any]:
    """The soulbot service of these compose files merged in order, as `-f a -f b`
    merges them: environment by name, ports and env_file appended."""
    service: dict[str, Any] = {"environment": {}, "ports": [], "env_file": []}
    for name in files:
        part = yaml.safe_load((DEPLOY / name).read_text())["services"]["soulbot"]
        service["environment"].update(part.get("environment", {}))
        service["ports"] += part.get("ports", [])
        service["env_file"] += part.get("env_file", [])
    return service


def container_env(
    files: tuple[str, ...], dotenv: Mapping[str, str], shell: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The soulbot container's environment, as Compose makes it: the image's ENV,
    then the env_file deploy/.env (`dotenv`), then environment: interpolated from
    the shell, else deploy/.env (the project directory's .env)."""
    service = merged(files)
    env = dict(ENV)
    for entry in service["env_file"]:
        assert (DEPLOY / entry["path"]).resolve() == DEPLOY / ".env"
        env.update(dotenv)
    lookup = {**dotenv, **(shell or {})}
    env.update({k: interpolate(str(v), lookup) for k, v in service["environment"].items()})
    return env


def published(files: tuple[str, ...], dotenv: Mapping[str, str]) -> dict[int, str]:
    """Container port -> the host address that reaches it (`ip:port`)."""
    found = {}
    for mapping in merged(files)["ports"]:
        host_ip, host_port, container = interpolate(mapping, dotenv).split(":")
        found[int(container)] = f"{host_ip}:{host_port}"
    return found


def container_config(files: tuple[str, ...], dotenv: Mapping[str, str]) -> Config:
    """The example config as the container reads it."""
    text = (DEPLOY / "soulbot.example.yaml").read_text()
    return parse_config(text, "soulbot.example.yaml", container_env(files, dotenv))


@pytest.mark.parametrize("files", [BASE, WITH_POSTGRES, WITH_WEBHOOK])
def test_every_variable_soulbot_reads_reaches_the_container(files: tuple[str, ...]) -> None:
    names = config_env_names() | code_env_names()
    assert {"SOULBOT_CONFIG", "SOULBOT_INSTANCE", "TELEGRAM_WEBHOOK_URL"} <= names
    decided = {k: v for name in files for k, v in DECIDED[name].items()}
    dotenv = {name: f"file-{name}" for name in names} | {"POSTGRES_PASSWORD": "pw"}
    env = container_env(files, dotenv)
    assert {n: env[n] for n in names} == {n: decided.get(n, f"file-{n}") for n in names}
    # A name deploy/.env holds that no file lists reaches it too (env_file).
    assert container_env(files, {**dotenv, "ANTHROPIC_LOG": "debug"})["ANTHROPIC_LOG"] == "debug"
    # The shell's value wins over the file's for each name the config reads.
    shell = {name: f"shell-{name}" for name in config_env_names()}
    env = container_env(files, dotenv, shell)
    expected = {n: decided.get(n, f"shell-{n}") for n in config_env_names()}
    expected["SOULBOT_CONSOLE"] = "file-SOULBOT_CONSOLE"  # the image's, unless deploy/.env says
    assert {n: env[n] for n in config_env_names()} == expected


def test_the_metrics_are_published_on_the_hosts_loopback() -> None:
    config = container_config(BASE, {"TELEGRAM_TOKEN": "t"})
    assert config.metrics.listen is not None
    host, port = split_listen(config.metrics.listen)
    assert host == "0.0.0.0"  # every interface of the container: the published port reaches it
    assert published(BASE, {}) == {port: "127.0.0.1:9464"}
    assert published(BASE, {"SOULBOT_METRICS_PORT": "19464"}) == {port: "127.0.0.1:19464"}
    # Without the webhook variant the webhook keeps the config's default, unpublished.
    assert config.adapters.telegram.webhook.listen == "127.0.0.1:8443"


def test_the_webhook_variant_listens_where_its_published_port_reaches() -> None:
    dotenv = {
        "TELEGRAM_TOKEN": "t",
        "TELEGRAM_WEBHOOK_URL": "https://bot.example.org/telegram",
        "TELEGRAM_WEBHOOK_SECRET": "s3cret",
    }
    webhook = container_config(WITH_WEBHOOK, dotenv).adapters.telegram.webhook
    assert webhook.url == dotenv["TELEGRAM_WEBHOOK_URL"]
    assert webhook.secret_token.get_secret_value() == "s3cret"
    host, port = split_listen(webhook.listen)
    assert host == "0.0.0.0"
    ports = published(WITH_WEBHOOK, dotenv)
    assert ports[port] == "127.0.0.1:8443"
    assert len(ports) == 2  # the metrics' too
    # Compose refuses to start the variant without the URL or the secret.
    for name in ("TELEGRAM_WEBHOOK_URL", "TELEGRAM_WEBHOOK_SECRET"):
        with pytest.raises(ValueError, match=f"set {name} in deploy/.env"):
            container_env(WITH_WEBHOOK, {k: v for k, v in dotenv.items() if k != name})


@pytest.mark.parametrize("files", [BASE, WITH_POSTGRES, WITH_WEBHOOK])
def test_docker_compose_config_gives_the_container_the_same(
    tmp_path: Path, files: tuple[str, ...]
) -> None:
    """The environment and ports above, as Compose itself merges them (where it is
    installed), with deploy/.env holding every name."""
    checkout = tmp_path / "soulbot"
    replay_compose_steps(checkout)
    names = config_env_names() | code_env_names()
    dotenv = {name: f"file-{name}" for name in names} | {"POSTGRES_PASSWORD": "pw"}
    (checkout / "deploy" / ".env").write_text("".join(f"{k}={v}\n" for k, v in dotenv.items()))
    shell = {
        k: v
        for k, v in os.environ.items()
        if k not in names | {"SOULBOT_METRICS_PORT", "SOULBOT_WEBHOOK_PORT"}
    }
    service = compose_config(checkout, files, shell)
    expected = container_env(files, dotenv)
    assert {n: service["environment"].get(n) for n in names} == {n: expected[n] for n in names}
    ports = {int(p["target"]): f"{p['host_ip']}:{p['published']}" for p in service["ports"]}
    assert ports == published(files, dotenv)
