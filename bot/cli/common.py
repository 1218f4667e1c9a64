"""What every `soulbot` command shares: options, config and logging set-up,
the soul registry, and the commands' own error exit."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import structlog

from bot.app.logs import LogFormat, configure_logging, default_format
from bot.config.load import load_config
from bot.config.schema import Config
from bot.errors import SoulbotError
from bot.soul.registry import ReloadReport, SoulRegistry
from bot.soul.seeding import seed_examples

log = structlog.get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_CONFIG = Path("soulbot.yaml")
# Without ./soulbot.yaml, what `make run` runs: the example config, when it is there.
EXAMPLE_CONFIG = Path("deploy/soulbot.example.yaml")
# The commands whose output a person reads in the terminal: their log lines there
# are warnings and worse (see `setup`).
PERSON_READS = frozenset({"check", "prompt", "chat"})


def common_options(func: F) -> F:
    """`--config` and `--log-format` on every command."""
    func = click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path),
        envvar="SOULBOT_CONFIG",
        help="Config file (default: ./soulbot.yaml when present, else "
        "./deploy/soulbot.example.yaml when present, else built-in defaults). "
        "Env: SOULBOT_CONFIG.",
    )(func)
    func = click.option(
        "--log-format",
        type=click.Choice(["json", "console"]),
        default=None,
        help="Log lines on stderr: json (default when stderr is not a terminal) or console.",
    )(func)
    return func


def setup(
    config_path: Path | None,
    log_format: str | None,
    quiet: Callable[[Config], bool] = lambda config: False,
) -> Config:
    """Configure logging, read the config, reconfigure logging with its level and
    secrets. Exits 1 with the error on a bad config.

    Where a person reads the log lines (the console format: stderr a terminal, or
    `--log-format console`), they are warnings and worse only for the commands of
    PERSON_READS and when `quiet(config)` (the terminal chat is on): a chat or a
    check in the terminal is not for info lines. JSON lines keep the configured
    level. When the terminal chat is on and stderr is that terminal, the lines its
    replies already tell (a failed turn's apology) are not printed into it too.

    With no `config_path` the config is ./soulbot.yaml when it is a file, else
    deploy/soulbot.example.yaml under the working directory when it is one (as
    `make run` does; one line on stderr says so), else the built-in defaults.
    """
    fmt: LogFormat = (
        "console" if (log_format or default_format(sys.stderr)) == "console" else "json"
    )
    configure_logging(fmt)
    if config_path is None and DEFAULT_CONFIG.is_file():
        config_path = DEFAULT_CONFIG
    elif config_path is None and EXAMPLE_CONFIG.is_file():
        config_path = EXAMPLE_CONFIG
        click.echo(
            f"no ./{DEFAULT_CONFIG}: using {EXAMPLE_CONFIG} "
            f"(copy it to ./{DEFAULT_CONFIG} to make it yours)",
            err=True,
        )
    try:
        config = load_config(config_path, os.environ)
    except SoulbotError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
    level = config.log_level
    chatting = quiet(config)
    if fmt == "console" and level in ("debug", "info") and (_person_reads() or chatting):
        level = "warning"
    in_chat = fmt == "console" and chatting and sys.stderr.isatty()
    configure_logging(fmt, level, config.secrets(), chat=in_chat)
    if config_path is None:  # logged at the level just set
        log.info(
            "config.default_used",
            reason=f"no --config given, no ./{DEFAULT_CONFIG} and no ./{EXAMPLE_CONFIG}",
        )
    return config


def _person_reads() -> bool:
    """Whether the command running is one of PERSON_READS."""
    context = click.get_current_context(silent=True)
    return context is not None and context.command.name in PERSON_READS


def load_registry(config: Config, make: bool = False) -> tuple[SoulRegistry, ReloadReport]:
    """The souls of `config.workspaces` (the example souls copied in first when
    it holds none, made when missing with `make`: `seed_workspaces`), loaded.
    Exits 1 with the error when the folder cannot be read (one that does not
    exist, or is no folder, shown by its absolute path: `folder_problem`)."""
    seed_workspaces(config, make)
    registry = SoulRegistry(config.workspaces, config.souls.max_prompt_tokens)
    try:
        report = registry.reload_all()
    except SoulbotError as exc:
        fail(folder_problem("workspaces", config.workspaces) or str(exc))
    return registry, report


def seed_workspaces(config: Config, make: bool) -> None:
    """Copy the example souls into `config.workspaces` when it holds no soul (a
    first run: bot/soul/seeding.py; a missing folder is made only with `make`),
    saying so in one line on stderr. Exits 1 when the folder cannot be written."""
    try:
        copied = seed_examples(config.workspaces, make)
    except OSError as exc:
        fail(f"workspaces: cannot copy the example souls into {absolute(config.workspaces)}: {exc}")
    if copied:
        click.echo(
            f"workspaces: {absolute(config.workspaces)} held no soul: copied the example "
            f"souls {', '.join(copied)} there, yours to edit",
            err=True,
        )


def absolute(path: Path) -> Path:
    """The absolute path `path` resolves to (a relative one is taken from the
    working directory; `..` and links resolved)."""
    return path.resolve()


def folder_problem(key: str, path: Path) -> str | None:
    """`key: /abs/path does not exist` (or `is not a folder`) when the folder of
    config key `key` is not there, with the folder a relative path is taken from;
    None when it is a folder."""
    if path.is_dir():
        return None
    what = "is not a folder" if path.exists() else "does not exist"
    line = f"{key}: {absolute(path)} {what}"
    if not path.is_absolute():
        line += f" (relative paths are taken from the folder soulbot starts in: {Path.cwd()})"
    if key == "workspaces" and not path.exists():
        line += "; `soulbot run`, `chat` or `init` make it, with the example souls"
    return line


def reference_errors(config: Config, registry: SoulRegistry) -> list[str]:
    """The bindings that name a soul that is not loaded (`default_soul` is one
    of `refusals`)."""
    known = {s.id for s in registry.all()}
    listed = ", ".join(sorted(known)) or "none"
    named = [(f"bindings[{i}].soul", b.soul) for i, b in enumerate(config.bindings)]
    return [
        f"{key}: no soul with id '{value}' is loaded (loaded: {listed})"
        for key, value in named
        if value is not None and value not in known
    ]


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `error: message` on stderr and exit with `code`."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code) from None


def command_path() -> str:
    """How to run this soulbot again from the working directory: `soulbot` when
    that name on PATH is the program running now, else the path it was run by
    (`.venv/bin/soulbot`, relative to the working directory when under it), or
    `<python> -m bot` when it was run as a module."""
    program = sys.argv[0]
    if Path(program).name == "__main__.py":
        return f"{_shown(sys.executable)} -m bot"
    found = shutil.which("soulbot")
    try:
        if found is not None and Path(found).samefile(program):
            return "soulbot"
    except OSError:
        pass
    return _shown(program)


def _shown(path: str) -> str:
    """`path` relative to the working directory when under it (with a `/`, so a
    shell runs it rather than look it up on PATH), else absolute."""
    absolute = Path(path).absolute()
    try:
        relative = absolute.relative_to(Path.cwd())
    except ValueError:
        return str(absolute)
    return str(relative) if len(relative.parts) > 1 else f"./{relative}"
