"""`soulbot store migrate`: a whole store copied to the other engine, SQLite to
PostgreSQL or back (bot/storage/migrate.py holds the how)."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bot.app.owner import own_every_instance
from bot.app.preflight import OPERATOR_FAULT
from bot.cli.common import common_options, fail, setup
from bot.config.schema import Config
from bot.errors import SoulbotError, StorageError
from bot.storage import postgres
from bot.storage.db import DB_NAME, open_conn, store_target
from bot.storage.migrate import BATCH_ROWS, Derived, Report, migrate
from bot.storage.sql import Conn

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar

URL_HELP = "sqlite:///relative/path.db, sqlite:////absolute/path.db or postgresql://user@host/db"


def derived(config: Config, clock: Callable[[], float] = time.time) -> Derived:
    """How a target rebuilds what it derives from the rows copied: the text
    index as the trace store makes it, and today's budget totals charged by the
    Ledger of `config` (its admins decide whose turns are an admin's)."""
    from bot.memory import textindex  # imported when a command needs them
    from bot.model.usage import admin_users, day_charges

    admins = admin_users(config.admins)

    def budgets(conn: Conn) -> tuple[str, dict[tuple[str, str], int]]:
        day = datetime.fromtimestamp(clock(), UTC).strftime("%Y-%m-%d")
        return day, {(kind, who): n for (kind, who), n in day_charges(conn, day, admins).items()}

    return Derived(index=textindex.index, budgets=budgets)


def _parse(url: str, option: str, config: Config) -> Path | str:
    """The store a `--from` or `--to` URL names (a SQLite file's path, or the
    PostgreSQL URL). Raises click.BadParameter for another URL."""
    if postgres.is_postgres(url) or (url.startswith("sqlite:///") and url != "sqlite:///"):
        return store_target(config.data_dir, url)
    raise click.BadParameter(f"expected {URL_HELP}", param_hint=option)


def _shown(target: Path | str) -> str:
    """A store for a person: a file's path, or the URL without its password."""
    return postgres.shown(target) if isinstance(target, str) else str(target)


class _Bar:
    """The copy's progress on stderr (rows copied of rows in all, and the
    table being copied), drawn only when stderr is a terminal."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack
        self._bar: ProgressBar[str | None] | None = None

    def start(self, total: int) -> None:
        if sys.stderr.isatty():
            self._bar = self._stack.enter_context(
                click.progressbar(
                    length=total,
                    label="copying",
                    file=sys.stderr,
                    show_pos=True,
                    item_show_func=lambda table: table,
                )
            )

    def advance(self, table: str, rows: int) -> None:
        if self._bar is not None:
            self._bar.update(rows, current_item=table)


def _table(report: Report) -> str:
    """The count check: table, source rows, target rows, ok."""
    lines = [("table", "source rows", "target rows", "ok")]
    lines += [
        (c.table, f"{c.source:,}", f"{c.target:,}", "ok" if c.ok else "DIFFERS")
        for c in report.counts
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    return "\n".join(
        "  ".join(
            [line[0].ljust(widths[0]), line[1].rjust(widths[1]), line[2].rjust(widths[2]), line[3]]
        ).rstrip()
        for line in lines
    )


@contextlib.contextmanager
def _opened(target: Path | str) -> Iterator[Conn]:
    """A connection to `target`, schema in place, closed at the end. Exits 2
    when the store cannot be reached or used, 1 for one of a newer soulbot."""
    try:
        conn = open_conn(target)
    except StorageError as exc:
        fail(str(exc), OPERATOR_FAULT)
    except SoulbotError as exc:
        fail(str(exc))
    try:
        yield conn
    finally:
        conn.close()


@click.group()
def store() -> None:
    """The store: the database of history, traces, usage and pairing."""


@store.command(name="migrate")
@click.option(
    "--from",
    "source_url",
    metavar="URL",
    help=f"The store to copy ({URL_HELP}). Default: this config's (store.url, or "
    "data_dir's soulbot.db).",
)
@click.option("--to", "target_url", metavar="URL", required=True, help=f"Where to ({URL_HELP}).")
@click.option(
    "--batch-rows",
    type=click.IntRange(min=1),
    default=BATCH_ROWS,
    show_default=True,
    help="Rows copied per transaction on the target.",
)
@common_options
def migrate_command(
    source_url: str | None,
    target_url: str,
    batch_rows: int,
    config_path: Path | None,
    log_format: str | None,
) -> None:
    """Copy a whole store to another database: SQLite to PostgreSQL, or back.

    Stop the daemon first, and every other process writing to the source: what
    it writes meanwhile may be left behind. (When either side is this config's
    store or data_dir/soulbot.db, migrate holds data_dir for every instance,
    so it refuses while a daemon of it serves, and none starts meanwhile.)

    Running it again copies nothing twice, and finishes a copy that was
    stopped. The target's tables are made when missing; a target that is the
    source, or holds another store, is refused. At the end the rows of every
    table are counted on both sides: exit 1 when a count differs (also on a
    refusal), 2 when a store cannot be reached or used.
    """
    config = setup(config_path, log_format)
    if source_url is None:
        source = store_target(config.data_dir, config.store.url)
    else:
        source = _parse(source_url, "--from", config)
    target = _parse(target_url, "--to", config)
    if isinstance(source, Path) and not source.is_file():
        fail(f"{source}: no store there to migrate (give its path with --from)")
    ours = {_key(config.data_dir / DB_NAME), _key(store_target(config.data_dir, config.store.url))}
    with contextlib.ExitStack() as stack:
        if {_key(source), _key(target)} & ours:  # no daemon of data_dir serves or starts
            try:
                stack.enter_context(own_every_instance(config.data_dir, config.instance))
            except OSError as exc:
                fail(f"{exc.filename or config.data_dir}: {exc.strerror or exc}")
            except SoulbotError as exc:
                fail(str(exc))
        src = stack.enter_context(_opened(source))
        dst = stack.enter_context(_opened(target))
        report = _copy(
            src, dst, derived(config), batch_rows, f"{_shown(source)} to {_shown(target)}"
        )
    click.echo(_table(report))
    click.echo(f"{report.added:,} row(s) copied from {_shown(source)} to {_shown(target)}")
    if not report.ok:
        differ = ", ".join(c.table for c in report.counts if not c.ok)
        fail(
            f"the row counts differ ({differ}): the source changed since an earlier copy, or "
            "the target holds rows of its own; migrate into an empty database"
        )


def _key(target: Path | str) -> Path | str:
    """A store as compared: a SQLite file's real path, or the URL."""
    return target.resolve() if isinstance(target, Path) else target


def _copy(source: Conn, target: Conn, derive: Derived, batch_rows: int, what: str) -> Report:
    """`migrate` with the progress bar; exits 1 with one line when it refuses
    or a statement fails (the batches done are kept: running again goes on)."""
    import psycopg

    try:
        with contextlib.ExitStack() as stack:  # the bar is closed before a line is printed
            return migrate(source, target, derive, batch_rows=batch_rows, progress=_Bar(stack))
    except SoulbotError as exc:
        fail(f"cannot migrate {what}: {exc}")
    except (sqlite3.Error, psycopg.Error) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fail(f"migrate of {what} stopped: {reason} (run it again to go on from there)")
