"""`soulbot check`, `prompt`, `init` and `soul rollback|epoch`: souls and their workspaces,
and what `check` says will run (paths, platforms, tokens)."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import stat
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from bot.app.owner import serving
from bot.app.preflight import (
    OPERATOR_FAULT,
    console_enabled,
    pick_default_soul,
    platforms,
    refusals,
    store_refusals,
)
from bot.chat.history import read_mood
from bot.chat.places import heartbeat_blocked
from bot.cli.beside import refuse_beside_a_daemon
from bot.cli.common import (
    absolute,
    command_path,
    common_options,
    fail,
    load_registry,
    reference_errors,
    seed_workspaces,
    setup,
)
from bot.cli.model_part import model_part
from bot.cli.web import exposed_line
from bot.config.notes import scope_notes
from bot.config.schema import Config
from bot.errors import SoulbotError, StorageError
from bot.memory.wiki import Wiki
from bot.soul.loader import Soul
from bot.soul.persona import persona_from_legacy, soul_id
from bot.soul.prompt import current_mood, estimate_tokens, mood_block, system_blocks
from bot.soul.registry import SoulRegistry
from bot.soul.soulfile import new_epoch, rollback_soul
from bot.soul.soullock import Check, SoulLocks, unchecked
from bot.soul.workspace import create_workspace
from bot.storage.db import Database, open_conn, store_target
from bot.storage.postgres import shown


@click.command()
@click.option(
    "--online",
    is_flag=True,
    help="Ask the platforms whose token is set: Telegram (getMe: the token, privacy mode) "
    "and Discord (the token, the Message Content intent); and the model (a 1-token call: "
    "who answers; a tiny forced tool call: whether tools work). Without it nothing is sent "
    "to them (a PostgreSQL store is asked, read-only, what `soulbot run` would meet there).",
)
@common_options
def check(online: bool, config_path: Path | None, log_format: str | None) -> None:
    """Load the config and every soul; list them, the paths used, the platforms that will
    start, the model, the warnings (links out of a soul folder, a data_dir others may open,
    a model name with no price), notes (souls whose heartbeat never writes SOUL.md), and
    every error (exit 1): each reason `soulbot run` would stop at once (a PostgreSQL store's
    included: the server, or a live process on it this one cannot run beside), a token that
    cannot be one, and with --online what the platforms and the model say."""
    config = setup(config_path, log_format)
    registry, report = load_registry(config)
    refused = [refusal.line for refusal in [*refusals(config, registry), *store_refusals(config)]]
    rows = [("ID", "NAME", "FILES", "PROMPT TOKENS")]
    for soul in registry.all():
        size = sum(estimate_tokens(b.text) for b in system_blocks(soul))
        rows.append((soul.id, soul.name, " ".join(soul.files), str(size)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    _part("paths", _paths(config))
    _part("platforms", _platforms(config))
    model = model_part(config, online)
    _part("model", model.lines)
    warnings = [w for soul in registry.all() for w in [*soul.warnings, *_links_out(soul)]]
    served = serving(config.data_dir, config.instance)  # refused by `run`, but not by a restart
    served_by = [f"{served} (`soulbot run` stops at once while it serves)"] if served else []
    warnings += _open_data_dir(config) + served_by + model.warnings + exposed_line(config)
    _part("warnings", warnings)
    shapes = _token_problems(config)
    asked = _ask(config, shapes) if online else _not_asked(config, shapes)
    _part("notes", scope_notes(config) + _heartbeat_notes(config, registry) + asked.notes)
    errors = [failure.error for failure, _ in report.failed]
    errors += refused + reference_errors(config, registry)
    errors += list(shapes.values()) + asked.errors + model.errors
    if errors:
        click.echo("\nerrors:")
        for error in errors:
            for i, line in enumerate(error.split("\n")):
                click.echo(f"  {'-' if i == 0 else ' '} {line}")
        raise SystemExit(1)
    click.echo(f"\n{len(rows) - 1} soul(s) loaded, no errors")


def _part(title: str, lines: list[str]) -> None:
    """A blank line, `title:` and the lines indented; nothing when there are none."""
    if lines:
        click.echo(f"\n{title}:")
        for line in lines:
            click.echo(f"  {line}")


def _paths(config: Config) -> list[str]:
    """The folders soulbot uses, as the absolute paths they are (relative ones
    are taken from the working directory)."""
    data_dir = str(absolute(config.data_dir))
    if not config.data_dir.exists():
        data_dir += " (not there yet: `soulbot run` makes it)"
    lines = [f"workspaces: {absolute(config.workspaces)}", f"data_dir: {data_dir}"]
    target = store_target(config.data_dir, config.store.url)
    store = shown(target) if isinstance(target, str) else f"SQLite, {absolute(target)}"
    lines.append(f"store: {store}" + (f" (instance {config.instance})" if config.instance else ""))
    if not (config.workspaces.is_absolute() and config.data_dir.is_absolute()):
        lines.append(f"(relative paths are taken from the folder soulbot starts in: {Path.cwd()})")
    return lines


def _platforms(config: Config) -> list[str]:
    """Which adapters `soulbot run` starts with this config and environment, and why."""
    telegram, discord = config.adapters.telegram, config.adapters.discord
    lines = []
    if telegram.token.get_secret_value():
        webhook = telegram.webhook
        how = (
            f"webhook at {webhook.url} (updates taken on {webhook.listen}, path {webhook.path})"
            if webhook.url
            else "polling"
        )
        lines.append(f"telegram: on, {how}")
    else:
        lines.append("telegram: off (adapters.telegram.token is not set)")
    if discord.token.get_secret_value():
        count, ids = discord.shard_count, discord.shard_ids
        if count is None:
            lines.append("discord: on, one connection (unsharded)")
        elif ids is None:
            lines.append(f"discord: on, all {count} shards")
        else:
            lines.append(f"discord: on, shards {', '.join(map(str, ids))} of {count}")
    else:
        lines.append("discord: off (adapters.discord.token is not set)")
    enabled = config.adapters.console.enabled
    why = (
        f"adapters.console.enabled is auto and {'no' if console_enabled(config) else 'a'} "
        "platform token is set"
        if enabled == "auto"
        else f"adapters.console.enabled: {str(enabled).lower()}"
    )
    if console_enabled(config):
        lines.append(f"terminal chat: on ({why})")
    else:
        lines.append(f"terminal chat: off ({why}; `soulbot chat` opens one anyway)")
    if platforms(config):
        return lines
    return [*lines, "nothing will start: `soulbot run` stops at once (see errors)"]


def _heartbeat_notes(config: Config, registry: SoulRegistry) -> list[str]:
    """One line per soul with heartbeat regions whose heartbeat can never write
    its SOUL.md under this config, saying why."""
    souls = [soul.id for soul in registry.all() if soul.heartbeat is not None]
    if not souls:
        return []
    if not config.heartbeat.enabled:
        return [
            "heartbeat.enabled is false: no soul reflects or writes its SOUL.md (souls with "
            f"heartbeat regions: {', '.join(souls)})"
        ]
    try:
        default = pick_default_soul(config, registry)
    except SoulbotError:
        return []  # one of `refusals`: where each soul answers is not known yet
    on = platforms(config)
    notes = (heartbeat_blocked(config, soul, default, on) for soul in souls)
    return [note for note in notes if note]


# BotFather's tokens: the bot's number, ':', then 35 of A-Z a-z 0-9 _ - (123456789:AA...).
_TELEGRAM_TOKEN = re.compile(r"\d{5,}:[A-Za-z0-9_-]{30,}")
# The Developer Portal's: three base64url parts separated by dots (the bot's id, a
# timestamp, a signature).
_DISCORD_TOKEN = re.compile(r"[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{20,}")
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_-]*")


def _token_problems(config: Config) -> dict[str, str]:
    """The error for each platform (`telegram`, `discord`) whose token is set in a
    shape no token of it has: the key and what is wrong, never the token."""
    problems = {}
    telegram = config.adapters.telegram.token.get_secret_value()
    if telegram and not _TELEGRAM_TOKEN.fullmatch(telegram):
        problems["telegram"] = (
            "adapters.telegram.token: not a Telegram bot token: "
            f"{_telegram_flaw(telegram)}; BotFather's look like 123456789:AA... (the bot's "
            "number, ':', then 35 letters, digits, - and _)"
        )
    discord = config.adapters.discord.token.get_secret_value()
    if discord and not _DISCORD_TOKEN.fullmatch(discord):
        problems["discord"] = (
            f"adapters.discord.token: not a Discord bot token: {_discord_flaw(discord)}; "
            "copy it from the Developer Portal, Bot page (Reset Token)"
        )
    return problems


def _telegram_flaw(token: str) -> str:
    number, colon, secret = token.partition(":")
    if not colon:
        return "it has no ':'"
    if not (number.isascii() and number.isdigit() and len(number) >= 5):
        return "what comes before ':' is not the bot's number"
    if not _TOKEN_CHARS.fullmatch(secret):
        return "what comes after ':' has characters other than letters, digits, - and _"
    return f"what comes after ':' is {len(secret)} characters long"


def _discord_flaw(token: str) -> str:
    if token.lower().startswith("bot "):
        return "it starts with 'Bot ': set the token alone"
    parts = token.split(".")
    if len(parts) != 3:
        return (
            f"it has {len(parts)} part(s) separated by '.', a bot token has 3 (the Client "
            "Secret and the Application ID are not the token)"
        )
    if not all(_TOKEN_CHARS.fullmatch(part) for part in parts):
        return "it has characters other than letters, digits, - and _ between its dots"
    sizes = ", ".join(str(len(part)) for part in parts)
    return f"its parts are too short for a bot token ({sizes} characters)"


@dataclass(frozen=True)
class _Asked:
    """What the platforms said (or that they were not asked)."""

    notes: list[str]
    errors: list[str]


def _not_asked(config: Config, shapes: dict[str, str]) -> _Asked:
    """A note naming what `--online` would ask, when a platform has a token of the
    right shape."""
    asks = {
        "telegram": "Telegram (getMe: the token, privacy mode)",
        "discord": "Discord (the token, the Message Content intent)",
    }
    askable = [asks[name] for name in _tokened(config, shapes)]
    if not askable:
        return _Asked([], [])
    return _Asked([f"no platform was asked: with --online, check asks {' and '.join(askable)}"], [])


def _tokened(config: Config, shapes: dict[str, str]) -> list[str]:
    """The platforms whose token is set, in the right shape."""
    tokens = {"telegram": config.adapters.telegram.token, "discord": config.adapters.discord.token}
    return [name for name, t in tokens.items() if t.get_secret_value() and name not in shapes]


def _ask(config: Config, shapes: dict[str, str]) -> _Asked:
    """Ask Telegram and Discord, at once, what only they know: privacy mode, the
    Message Content intent (and so whether they take the token). A platform that
    does not answer is a note; a token of the wrong shape is not sent."""
    from adapters.discord_probe import message_content_intent
    from adapters.telegram_adapter import privacy_mode_on
    from adapters.texts import PRIVACY_MODE

    telegram, discord = config.adapters.telegram, config.adapters.discord
    asked = _tokened(config, shapes)
    questions: dict[str, Coroutine[Any, Any, bool | None]] = {}
    if "telegram" in asked:
        token = telegram.token.get_secret_value()
        questions["telegram"] = privacy_mode_on(token, telegram.base_url)
    if "discord" in asked:
        token = discord.token.get_secret_value()
        questions["discord"] = message_content_intent(token, discord.api_base_url)

    async def at_once() -> dict[str, bool | None]:
        answers = await asyncio.gather(*questions.values())
        return dict(zip(questions, answers, strict=True))

    answers = asyncio.run(at_once()) if questions else {}
    notes, errors = [], []
    if "telegram" in answers and answers["telegram"] is None:
        notes.append("telegram: no answer to getMe (Telegram unreachable, or the token refused)")
    elif answers.get("telegram"):
        notes.append(f"telegram: {PRIVACY_MODE}")
    if "discord" in answers and answers["discord"] is None:
        notes.append(
            "discord: no answer about the application (Discord unreachable, or the token refused)"
        )
    elif answers.get("discord") is False:
        errors.append(
            "adapters.discord: the Message Content intent is off: turn it on in the Developer "
            "Portal, Bot page"
        )
    return _Asked(notes, errors)


def _links_out(soul: Soul) -> list[str]:
    """One line per link under the soul's memory/ that leads out of its folder."""
    return [
        f"{link}: a link to {target}, outside the soul folder: soulbot neither reads nor "
        "writes through it"
        for link, target in Wiki(soul.folder / "memory", shared=True).links_out()
    ]


def _open_data_dir(config: Config) -> list[str]:
    """A line when data_dir is a folder its group or others have any access to
    (even search alone reaches a file of an older soulbot that is not private)."""
    path = config.data_dir
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return []
    if not stat.S_ISDIR(info.st_mode):
        return []  # one of `refusals`
    mode = stat.S_IMODE(info.st_mode)
    if not mode & 0o077:
        return []
    return [
        f"{path}: data_dir is open to group or others (mode {mode:o}); it holds private "
        f"data: chmod 700 {path}"
    ]


def _stored_mood(config: Config, session: str, soul: str) -> str | None:
    """The mood `session` moved to under `soul`, from the store (None: none, or no store)."""
    target = store_target(config.data_dir, config.store.url)
    if isinstance(target, Path) and not target.is_file():
        return None
    try:
        conn = open_conn(target)
    except StorageError as exc:
        fail(str(exc), OPERATOR_FAULT)
    try:
        return read_mood(conn, session, soul)
    finally:
        conn.close()


@click.command()
@click.argument("soul")
@click.option(
    "--session",
    default=None,
    help="A conversation's session key (the `session` of its log lines): its mood, read "
    "from the store, instead of the soul's defaultMood.",
)
@common_options
def prompt(
    soul: str, session: str | None, config_path: Path | None, log_format: str | None
) -> None:
    """Print SOUL's system prompt exactly as it is sent, block by block: the soul's
    blocks (the same for every conversation), then the mood block each conversation
    has of its own, after them (the soul's defaultMood; with --session, that
    conversation's mood)."""
    config = setup(config_path, log_format)
    registry, _ = load_registry(config)
    found = registry.get(soul)
    if found is None:
        known = ", ".join(s.id for s in registry.all()) or "none"
        click.echo(f"error: no soul with id '{soul}' is loaded (loaded: {known})", err=True)
        raise SystemExit(1)
    blocks = [(block.kind, block.text) for block in system_blocks(found)]
    chosen = None if session is None else _stored_mood(config, session, found.id)
    mood = mood_block(found.persona, current_mood(found.persona, chosen))
    if mood is not None:
        whose = "the default" if session is None else "this conversation's"
        blocks.append((f"mood ({whose}; per conversation, after the soul's cached blocks)", mood))
    for i, (kind, text) in enumerate(blocks, 1):
        click.echo(f"──────── block {i}/{len(blocks)}: {kind} ────────")
        click.echo(text)


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
        seed_workspaces(config, make=True)
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

    Refused while a daemon serves data_dir or the store: its live sessions
    would keep the old prompt (`/soul rollback` and `/soul epoch` in the chat
    do it there).
    """


@soul.command()
@click.argument("name")
@click.argument("day", metavar="WHEN")
@common_options
def rollback(name: str, day: str, config_path: Path | None, log_format: str | None) -> None:
    """Restore the backup WHEN (YYYY-MM-DD, or a rollback's YYYY-MM-DDTHHMMSS) of
    soul NAME's SOUL.md (the current file is kept as a backup too)."""
    how = f"roll back from the chat with `/soul rollback {name} {day}`"
    _file_op(config_path, log_format, name, how,
             lambda registry, check: rollback_soul(registry, name, day, check))  # fmt: skip


@soul.command()
@click.argument("name")
@common_options
def epoch(name: str, config_path: Path | None, log_format: str | None) -> None:
    """Start a new epoch of soul NAME: the autobiography is cleared, the core and
    the memory kept."""
    how = f"start it from the chat with `/soul epoch {name}`"
    _file_op(config_path, log_format, name, how,
             lambda registry, check: new_epoch(registry, name, check))  # fmt: skip


def _file_op(
    config_path: Path | None,
    log_format: str | None,
    name: str,
    how: str,
    op: Callable[[SoulRegistry, Check], str],
) -> None:
    """`op`, a write of soul `name`'s SOUL.md, unless a daemon serves the data
    (refused: `how` says what to do instead); on a shared store under the
    soul's lock (bot/soul/soullock.py)."""
    config = setup(config_path, log_format)
    refuse_beside_a_daemon(config, f"{how}, or stop the daemon first; SOUL.md was not changed")
    registry, _ = load_registry(config)
    try:
        click.echo(asyncio.run(_locked(config, name, lambda check: op(registry, check))))
    except SoulbotError as exc:
        fail(str(exc))


async def _locked(config: Config, name: str, op: Callable[[Check], str]) -> str:
    target = store_target(config.data_dir, config.store.url)
    if not isinstance(target, str):  # SQLite: one host, whose file lock is enough
        return op(unchecked)

    db = Database(target, config.store.timeouts())
    await db.open()
    try:
        async with SoulLocks(db).hold(name) as check:
            return await asyncio.to_thread(op, check)
    finally:
        await db.close()
