"""The `soulbot` command: run | chat | check | prompt | init | usage."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import structlog

from adapters.base import Adapter
from bot import __version__
from bot.config import Config, ConsoleConfig, DiscordConfig, TelegramConfig, load_config
from bot.db import DB_NAME, connect
from bot.errors import SoulbotError
from bot.logs import LogFormat, configure_logging, default_format
from bot.soul.persona import persona_from_legacy
from bot.soul.prompt import estimate_tokens, system_blocks
from bot.soul.registry import ReloadReport, SoulRegistry
from bot.soul.workspace import create_workspace
from bot.usage import usage_table

log = structlog.get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_CONFIG = Path("soulbot.yaml")


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


def _setup(
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


def _registry(config: Config) -> tuple[SoulRegistry, ReloadReport]:
    registry = SoulRegistry(config.workspaces)
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="soulbot")
def main() -> None:
    """soulbot: a persona with a life on Discord and Telegram."""


def _adapters(config: Config, soul_name: str, on_eof: Callable[[], None]) -> list[Adapter]:
    """The adapters this config enables."""
    from adapters.console_adapter import ConsoleAdapter

    platforms = {
        "discord": config.adapters.discord.token.get_secret_value(),
        "telegram": config.adapters.telegram.token.get_secret_value(),
    }
    for name, token in platforms.items():
        if token:
            log.warning("adapter.unavailable", adapter=name, reason="not part of this build yet")
    return [ConsoleAdapter(soul_name, on_eof=on_eof)] if console_enabled(config) else []


def console_enabled(config: Config) -> bool:
    """`adapters.console.enabled`, with `auto` on when no platform token is set."""
    console = config.adapters.console.enabled
    tokens = (config.adapters.discord.token, config.adapters.telegram.token)
    return console is True or (console == "auto" and not any(t.get_secret_value() for t in tokens))


async def _serve(config: Config, registry: SoulRegistry, console_only: bool) -> int:
    # The runtime pulls in the model SDK (a second to import): only run and chat need it.
    from bot.daemon import Daemon
    from bot.runtime import Runtime, pick_default_soul
    from bot.scheduler import Scheduler, nightly_trigger

    stop: list[Callable[[], None]] = []
    default = registry.get(pick_default_soul(config, registry))
    name = default.name if default else "soul"
    adapters = _adapters(config, name, lambda: stop[0]())
    if not adapters:
        raise SoulbotError(
            "no adapter is enabled: set a platform token or adapters.console.enabled"
        )
    runtime = await Runtime.open(config, registry, adapters)
    # Everything loaded so far lives as long as the process: keep it out of the
    # collector's way (fewer, shorter pauses under load).
    gc.freeze()
    trigger = nightly_trigger(config.memory.compile.cron, config.memory.compile.timezone)
    daemon = Daemon(runtime, Scheduler(trigger))
    stop.append(daemon.request_stop if console_only or len(adapters) == 1 else lambda: None)
    return await daemon.serve()


def _start(config: Config, registry: SoulRegistry, console_only: bool = False) -> None:
    from bot.runtime import missing_credentials

    if not registry.all():
        click.echo("error: no soul loaded; `soulbot check` lists what failed", err=True)
        raise SystemExit(1)
    problem = missing_credentials(config)
    if problem:
        click.echo(f"error: {problem}", err=True)
        raise SystemExit(2)
    try:
        code = asyncio.run(_serve(config, registry, console_only))
    except SoulbotError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
    raise SystemExit(code)


@main.command()
@common_options
def run(config_path: Path | None, log_format: str | None) -> None:
    """Run the daemon until SIGTERM or Ctrl-C (a terminal chat when no platform is set)."""
    config = _setup(config_path, log_format, lambda c: sys.stdin.isatty() and console_enabled(c))
    registry, _ = _registry(config)
    _start(config, registry)


@main.command()
@click.argument("soul", required=False)
@common_options
def chat(soul: str | None, config_path: Path | None, log_format: str | None) -> None:
    """Chat with SOUL (default: default_soul) in the terminal; /reset, /quit."""
    config = _setup(config_path, log_format, lambda c: True)
    registry, _ = _registry(config)
    if soul is not None and registry.get(soul) is None:
        known = ", ".join(s.id for s in registry.all()) or "none"
        click.echo(f"error: no soul with id '{soul}' is loaded (loaded: {known})", err=True)
        raise SystemExit(1)
    console = config.adapters.model_copy(
        update={"console": ConsoleConfig(enabled=True), "discord": DiscordConfig(),
                "telegram": TelegramConfig()}
    )  # fmt: skip
    only = config.model_copy(
        update={"default_soul": soul or config.default_soul, "bindings": (), "adapters": console}
    )
    _start(only, registry, console_only=True)


@main.command()
@click.option(
    "--days",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="UTC days to cover, today included.",
)
@click.option(
    "--by",
    type=click.Choice(["soul", "source", "day", "model"]),
    default="soul",
    show_default=True,
    help="Group rows by this key.",
)
@common_options
def usage(days: int, by: str, config_path: Path | None, log_format: str | None) -> None:
    """Print model usage and cost from the ledger, with totals."""
    config = _setup(config_path, log_format)
    path = config.data_dir / DB_NAME
    if not path.is_file():
        click.echo(f"No usage recorded yet ({path} does not exist).")
        return
    conn = connect(path)
    try:
        click.echo(usage_table(conn, days=days, by=by, now=time.time()))
    finally:
        conn.close()


@main.command()
@common_options
def check(config_path: Path | None, log_format: str | None) -> None:
    """Load the config and every soul; list them, and every error (exit 1)."""
    config = _setup(config_path, log_format)
    registry, report = _registry(config)
    rows = [("ID", "NAME", "FILES", "PROMPT TOKENS")]
    for soul in registry.all():
        size = sum(estimate_tokens(b.text) for b in system_blocks(soul))
        rows.append((soul.id, soul.name, " ".join(soul.files), str(size)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    warnings = [w for soul in registry.all() for w in soul.warnings]
    if warnings:
        click.echo("\nwarnings:")
        for warning in warnings:
            click.echo(f"  {warning}")
    errors = [failure.error for failure, _ in report.failed]
    errors += reference_errors(config, registry)
    if errors:
        click.echo("\nerrors:")
        for error in errors:
            for i, line in enumerate(error.split("\n")):
                click.echo(f"  {'-' if i == 0 else ' '} {line}")
        raise SystemExit(1)
    click.echo(f"\n{len(rows) - 1} soul(s) loaded, no errors")


@main.command()
@click.argument("soul")
@common_options
def prompt(soul: str, config_path: Path | None, log_format: str | None) -> None:
    """Print SOUL's system prompt exactly as it is sent, block by block."""
    config = _setup(config_path, log_format)
    registry, _ = _registry(config)
    found = registry.get(soul)
    if found is None:
        known = ", ".join(s.id for s in registry.all()) or "none"
        click.echo(f"error: no soul with id '{soul}' is loaded (loaded: {known})", err=True)
        raise SystemExit(1)
    blocks = system_blocks(found)
    for i, block in enumerate(blocks, 1):
        click.echo(f"──────── block {i}/{len(blocks)}: {block.kind} ────────")
        click.echo(block.text)


@main.command()
@click.argument("name")
@click.option(
    "--from-json",
    "legacy",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Write SOUL.md from a legacy JSON persona definition.",
)
@common_options
def init(name: str, legacy: Path | None, config_path: Path | None, log_format: str | None) -> None:
    """Create workspaces/NAME/ with every workspace file."""
    config = _setup(config_path, log_format)
    try:
        persona = None
        if legacy is not None:
            try:
                data = json.loads(legacy.read_text(encoding="utf-8"))
            except (ValueError, OSError) as exc:
                raise SoulbotError(f"{legacy}: not a readable JSON persona: {exc}") from None
            if not isinstance(data, dict):
                raise SoulbotError(f"{legacy}: a JSON persona must be an object")
            persona = persona_from_legacy(data, str(legacy))
        folder = create_workspace(config.workspaces, name, persona)
    except SoulbotError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
    click.echo(f"created {folder}; edit {folder / 'SOUL.md'}, then run `soulbot check`")
