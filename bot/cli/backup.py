"""`soulbot backup` and `soulbot restore`: everything a soulbot keeps, in one file
and back (bot/storage/backup.py holds the how)."""

from __future__ import annotations

from pathlib import Path

import click

from bot.app.health import HEALTH_FILE
from bot.app.owner import LOCK_FILE, PID_FILE, instance_file, own_data_dir
from bot.cli.common import common_options, fail, setup
from bot.config.schema import Config
from bot.errors import SoulbotError
from bot.storage.backup import Places, restore_backup, write_backup
from bot.storage.backup_checks import size_text
from bot.storage.postgres import is_postgres

# Under data_dir, what is not data: the daemon's lock, pid and health files, the
# compile locks (bot/memory/service.py) and the terminal chat's exports (copies of a
# wiki handed out).
NOT_DATA = frozenset({LOCK_FILE, PID_FILE, HEALTH_FILE, "locks", "exports"})


def _places(config: Config) -> Places:
    """What a backup of this config holds, and where a restore puts it."""
    mine = {instance_file(name, config.instance) for name in (LOCK_FILE, PID_FILE, HEALTH_FILE)}
    return Places(config.data_dir, config.workspaces, NOT_DATA | mine)


@click.command()
@click.argument("dest", type=click.Path(path_type=Path))
@common_options
def backup(dest: Path, config_path: Path | None, log_format: str | None) -> None:
    """Write one backup file of the database, data_dir and the workspaces
    folder into DEST: a folder (soulbot-backup-YYYYMMDD-HHMMSS.tar.gz, UTC, in
    it) or a file path ending .tar.gz. Safe while the daemon runs."""
    config = setup(config_path, log_format)
    try:
        made = write_backup(_places(config), dest)
    except SoulbotError as exc:
        fail(f"backup failed: {exc}")
    for note in made.notes:
        click.echo(f"warning: {note}", err=True)
    if config.store.url and is_postgres(config.store.url):
        click.echo("note: the database is PostgreSQL's: back it up with pg_dump", err=True)
    files, souls = made.manifest["files"], made.manifest["souls"]
    database = "the database, " if made.manifest["database"] else "no database, "
    click.echo(
        f"backup written: {made.path} ({size_text(made.size)}: {database}{files['data_dir']} "
        f"file(s) of data_dir, {len(souls)} soul folder(s) with {files['workspaces']} file(s))"
    )


@click.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--force",
    is_flag=True,
    help="Move a data_dir or workspaces folder that is not empty aside "
    "(to NAME.before-restore-YYYYMMDD-HHMMSS) instead of refusing.",
)
@common_options
def restore(file: Path, force: bool, config_path: Path | None, log_format: str | None) -> None:
    """Restore the backup FILE into this config's data_dir and workspaces. The
    daemon must be stopped; the restore holds data_dir, so none starts meanwhile."""
    config = setup(config_path, log_format)
    try:
        restored = restore_backup(
            _places(config),
            file,
            force=force,
            hold=lambda: own_data_dir(config.data_dir, config.instance),
        )
    except OSError as exc:  # data_dir cannot be made to take its lock
        fail(f"restore failed: {exc.filename or config.data_dir}: {exc.strerror or exc}")
    except SoulbotError as exc:
        fail(f"restore failed: {exc}")
    made = restored.manifest
    into = " and ".join(map(str, restored.folders))
    aside = "".join(f"; the old {old} is now at {new}" for old, new in restored.aside)
    click.echo(
        f"restored {file} (soulbot {made.get('soulbot', '?')}, schema {made.get('schema')}, "
        f"made {made.get('created', '?')}) into {into}{aside}"
    )
