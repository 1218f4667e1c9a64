"""`soulbot check`, `prompt`, `init` and `soul rollback|epoch`: souls and their workspaces."""

from __future__ import annotations

import asyncio
import json
import shlex
import stat
from collections.abc import Callable
from pathlib import Path

import click
from click.core import ParameterSource

from bot.cli.common import (
    command_path,
    common_options,
    fail,
    load_registry,
    reference_errors,
    setup,
)
from bot.config.notes import scope_notes
from bot.config.schema import Config
from bot.errors import SoulbotError
from bot.memory.wiki import Wiki
from bot.soul.loader import Soul
from bot.soul.persona import persona_from_legacy, soul_id
from bot.soul.prompt import estimate_tokens, system_blocks
from bot.soul.registry import SoulRegistry
from bot.soul.soulfile import new_epoch, rollback_soul
from bot.soul.workspace import create_workspace


@click.command()
@common_options
def check(config_path: Path | None, log_format: str | None) -> None:
    """Load the config and every soul; list them, their warnings (links out of a
    soul folder, a data_dir others may open among them), and every error (exit 1)."""
    config = setup(config_path, log_format)
    registry, report = load_registry(config)
    rows = [("ID", "NAME", "FILES", "PROMPT TOKENS")]
    for soul in registry.all():
        size = sum(estimate_tokens(b.text) for b in system_blocks(soul))
        rows.append((soul.id, soul.name, " ".join(soul.files), str(size)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    warnings = [w for soul in registry.all() for w in [*soul.warnings, *_links_out(soul)]]
    warnings += _open_data_dir(config)
    if warnings:
        click.echo("\nwarnings:")
        for warning in warnings:
            click.echo(f"  {warning}")
    notes = scope_notes(config) + _platform_notes(config)
    if notes:
        click.echo("\nnotes:")
        for note in notes:
            click.echo(f"  {note}")
    errors = [failure.error for failure, _ in report.failed]
    errors += reference_errors(config, registry)
    if errors:
        click.echo("\nerrors:")
        for error in errors:
            for i, line in enumerate(error.split("\n")):
                click.echo(f"  {'-' if i == 0 else ' '} {line}")
        raise SystemExit(1)
    click.echo(f"\n{len(rows) - 1} soul(s) loaded, no errors")


def _platform_notes(config: Config) -> list[str]:
    """What a platform does not let the bot see, when it can be asked (Telegram's
    privacy mode, by getMe; nothing when Telegram cannot be reached)."""
    telegram = config.adapters.telegram
    if not telegram.token.get_secret_value():
        return []
    from adapters.telegram_adapter import privacy_mode_on
    from adapters.texts import PRIVACY_MODE

    token = telegram.token.get_secret_value()
    on = asyncio.run(privacy_mode_on(token, telegram.base_url))
    return [f"telegram: {PRIVACY_MODE}"] if on else []


def _links_out(soul: Soul) -> list[str]:
    """One line per link under the soul's memory/ that leads out of its folder."""
    return [
        f"{link}: a link to {target}, outside the soul folder: soulbot neither reads nor "
        "writes through it"
        for link, target in Wiki(soul.folder / "memory", shared=True).links_out()
    ]


def _open_data_dir(config: Config) -> list[str]:
    """A line when data_dir exists and is not a folder, or its group or others
    have any access to it (even search alone reaches a file of an older soulbot
    that is not private)."""
    path = config.data_dir
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return []
    if not stat.S_ISDIR(info.st_mode):
        return [f"{path}: data_dir is not a folder: `soulbot run` stops at once (exit 2)"]
    mode = stat.S_IMODE(info.st_mode)
    if not mode & 0o077:
        return []
    return [
        f"{path}: data_dir is open to group or others (mode {mode:o}); it holds private "
        f"data: chmod 700 {path}"
    ]


@click.command()
@click.argument("soul")
@common_options
def prompt(soul: str, config_path: Path | None, log_format: str | None) -> None:
    """Print SOUL's system prompt exactly as it is sent, block by block."""
    config = setup(config_path, log_format)
    registry, _ = load_registry(config)
    found = registry.get(soul)
    if found is None:
        known = ", ".join(s.id for s in registry.all()) or "none"
        click.echo(f"error: no soul with id '{soul}' is loaded (loaded: {known})", err=True)
        raise SystemExit(1)
    blocks = system_blocks(found)
    for i, block in enumerate(blocks, 1):
        click.echo(f"──────── block {i}/{len(blocks)}: {block.kind} ────────")
        click.echo(block.text)


@click.command()
@click.argument("name")
@click.option(
    "--from-json",
    "legacy",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Write SOUL.md from a legacy JSON persona definition.",
)
@common_options
def init(name: str, legacy: Path | None, config_path: Path | None, log_format: str | None) -> None:
    """Create a soul named NAME in workspaces/ID/ with every workspace file; ID, the
    soul's id, is made of NAME's Latin letters and digits ("Zoë Ünal" -> zoe-unal).
    The line printed after names the check command to run next, as this one was run."""
    config = setup(config_path, log_format)
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
    ident = soul_id(persona) if persona is not None else folder.name
    check_command = f"{command_path()} check"
    source = click.get_current_context().get_parameter_source("config_path")
    if config_path is not None and source is ParameterSource.COMMANDLINE:
        check_command += f" --config {shlex.quote(str(config_path))}"
    named = f" (soul id {ident})" if ident else ""
    click.echo(f"created {folder}{named}; edit {folder / 'SOUL.md'}, then run `{check_command}`")


@click.group()
def soul() -> None:
    """A soul's self-written SOUL.md: roll it back, or start a new epoch.

    A running daemon sees the change after `/soul reload` (or a restart).
    """


@soul.command()
@click.argument("name")
@click.argument("day", metavar="YYYY-MM-DD")
@common_options
def rollback(name: str, day: str, config_path: Path | None, log_format: str | None) -> None:
    """Restore the backup of DAY of soul NAME's SOUL.md (the current file is kept
    as a backup too)."""
    _file_op(config_path, log_format, lambda registry: rollback_soul(registry, name, day))


@soul.command()
@click.argument("name")
@common_options
def epoch(name: str, config_path: Path | None, log_format: str | None) -> None:
    """Start a new epoch of soul NAME: the autobiography is cleared, the core and
    the memory kept."""
    _file_op(config_path, log_format, lambda registry: new_epoch(registry, name))


def _file_op(
    config_path: Path | None, log_format: str | None, op: Callable[[SoulRegistry], str]
) -> None:
    config = setup(config_path, log_format)
    registry, _ = load_registry(config)
    try:
        click.echo(op(registry))
    except SoulbotError as exc:
        fail(str(exc))
