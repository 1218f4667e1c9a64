"""What every `soulbot` command shares: options, config and logging set-up,
the soul registry, and the commands' own error exit."""

from __future__ import annotations

import os
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

log = structlog.get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_CONFIG = Path("soulbot.yaml")
# The exit code of a fault only the operator can fix (no credentials, a data_dir or a
# database soulbot cannot use): the systemd unit does not restart on it.
OPERATOR_FAULT = 2


def common_options(func: F) -> F:
    """`--config` and `--log-format` on every command."""
    func = click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path),
        envvar="SOULBOT_CONFIG",
        help="Config file (default: ./soulbot.yaml when present, else built-in defaults). "
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
    secrets (warnings and worse only when `quiet(config)`: a chat in the terminal
    is not for log lines). Exits 1 with the error on a bad config."""
    fmt: LogFormat = (
        "console" if (log_format or default_format(sys.stderr)) == "console" else "json"
    )
    configure_logging(fmt)
    if config_path is None and DEFAULT_CONFIG.is_file():
        config_path = DEFAULT_CONFIG
    try:
        config = load_config(config_path, os.environ)
    except SoulbotError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
    if config_path is None:
        log.info("config.default_used", reason="no --config given and no ./soulbot.yaml")
    level = config.log_level
    if quiet(config) and level in ("debug", "info"):
        level = "warning"
    configure_logging(fmt, level, config.secrets())
    return config


def load_registry(config: Config) -> tuple[SoulRegistry, ReloadReport]:
    registry = SoulRegistry(config.workspaces, config.souls.max_prompt_tokens)
    try:
        report = registry.reload_all()
    except SoulbotError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
    return registry, report


def reference_errors(config: Config, registry: SoulRegistry) -> list[str]:
    """Config keys that name a soul that is not loaded."""
    known = {s.id for s in registry.all()}
    listed = ", ".join(sorted(known)) or "none"
    named = [("default_soul", config.default_soul)]
    named += [(f"bindings[{i}].soul", b.soul) for i, b in enumerate(config.bindings)]
    return [
        f"{key}: no soul with id '{value}' is loaded (loaded: {listed})"
        for key, value in named
        if value is not None and value not in known
    ]


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `error: message` on stderr and exit with `code`."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code) from None
