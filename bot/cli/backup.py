"""`soulbot backup` and `soulbot restore`: everything a soulbot keeps, in one file
and back (bot/storage/backup.py holds the how)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import click

from bot.app.health import HEALTH_FILE
from bot.app.owner import LOCK_FILE, PID_FILE, instance_file, instances, own_every_instance
from bot.cli.beside import check_the_store
from bot.cli.common import common_options, fail, setup
from bot.config.schema import Config
from bot.errors import SoulbotError
from bot.storage.backup import Places, restore_backup, write_backup
from bot.storage.backup_checks import size_text
from bot.storage.db import store_target
from bot.storage.postgres import shown

# Under data_dir, what is not data: the daemon's lock, pid and health files, the
# wikis' locks (bot/cluster/wikilock.py) and the terminal chat's exports (copies of a
# wiki handed out).
NOT_DATA = frozenset({LOCK_FILE, PID_FILE, HEALTH_FILE, "locks", "exports"})


def _places(config: Config) -> Places:
    """What a backup of this config holds, and where a restore puts it: the
    SQLite file of its store (none for PostgreSQL); every instance's own files
    under data_dir are not data."""
    every = {config.instance, *instances(config.data_dir)}
    mine = {instance_file(n, i) for n in (LOCK_FILE, PID_FILE, HEALTH_FILE) for i in every}
    target = store_target(config.data_dir, config.store.url)
    database = None if isinstance(target, str) else target
    return Places(config.data_dir, config.workspaces, database, NOT_DATA | mine, config.instance)


def _postgres_refusal(url: str) -> str:
    """Why a backup of a PostgreSQL store stops, and the tools that do it."""
    where = shown(url)
    return (
        f"the store is PostgreSQL ({where}), which soulbot does not copy: dump it with its own "
        f"tools (`pg_dump --format=custom --file=soulbot.dump {where}`; back: `pg_restore "
        f"--clean --if-exists --dbname={where} soulbot.dump`), and back up data_dir and "
        "workspaces with `soulbot backup --no-database DEST`"
    )


@click.command()
@click.argument("dest", type=click.Path(path_type=Path))
@click.option(
    "--no-database",
    is_flag=True,
    help="With a PostgreSQL store: back up data_dir and workspaces only "
    "(the database is pg_dump's).",
)
@common_options
def backup(dest: Path, no_database: bool, config_path: Path | None,
           log_format: str | None) -> None:  # fmt: skip
    """Write one backup file of the SQLite database (wherever store.url puts
    it), data_dir and the workspaces folder into DEST: a folder
    (soulbot-backup-YYYYMMDD-HHMMSS.tar.gz, UTC, in it) or a file path ending
    .tar.gz. Safe while the daemon runs. A PostgreSQL store is refused (its
    tools back it up) unless --no-database."""
    config = setup(config_path, log_format)
    places = _places(config)
    if places.database is None and not no_database and config.store.url:
        fail(f"backup failed: {_postgres_refusal(config.store.url)}")
    if places.database is not None and no_database:
        fail(
            f"backup failed: --no-database: the store is the SQLite file {places.database}, "
            "which a backup copies safely while the daemon runs: leave the option out"
        )
    try:
        made = write_backup(places, dest)
    except SoulbotError as exc:
        fail(f"backup failed: {exc}")
    for note in made.notes:
        click.echo(f"warning: {note}", err=True)
    files, souls = made.manifest["files"], made.manifest["souls"]
    database = "the database, " if made.manifest["database"] else "no database, "
    click.echo(
        f"backup written: {made.path} ({size_text(made.size)}: {database}{files['data_dir']} "
        f"file(s) of data_dir, {len(souls)} soul folder(s) with {files['workspaces']} file(s))"
    )


@contextlib.contextmanager
def _every_daemon_stopped(config: Config) -> Iterator[None]:
    """Hold every instance's lock of data_dir; on a shared store, refuse
    (SoulbotError) while a process registered there lives, on any host."""
    with own_every_instance(config.data_dir, config.instance):
        check_the_store(config, "stop it first; nothing was restored")
        yield


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
    """Restore the backup FILE into this config's data_dir, workspaces and
    SQLite database; a backup of another store is refused. Every daemon of
    data_dir must be stopped, whatever its instance (and on a shared store,
    whatever its host); the restore holds them all, so none starts meanwhile."""
    config = setup(config_path, log_format)
    try:
        restored = restore_backup(
            _places(config),
            file,
            force=force,
            hold=lambda: _every_daemon_stopped(config),
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
