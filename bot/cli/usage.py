"""`soulbot usage`: the usage ledger as a table."""

from __future__ import annotations

import time
from pathlib import Path

import click

from bot.app.preflight import OPERATOR_FAULT
from bot.cli.common import common_options, fail, setup
from bot.errors import StorageError
from bot.model.usage import usage_table
from bot.storage.db import open_conn, store_target


@click.command()
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
    config = setup(config_path, log_format)
    target = store_target(config.data_dir, config.store.url)
    if isinstance(target, Path) and not target.is_file():
        click.echo(f"No usage recorded yet ({target} does not exist).")
        return
    try:
        conn = open_conn(target)
    except StorageError as exc:
        fail(str(exc), OPERATOR_FAULT)
    try:
        click.echo(usage_table(conn, days=days, by=by, now=time.time()))
    finally:
        conn.close()
