"""`soulbot health`: is `soulbot run` serving? (The container health check.)"""

from __future__ import annotations

from pathlib import Path

import click

from bot.app.health import MAX_AGE_S, check_health, health_path
from bot.cli.common import common_options, fail, setup
from bot.config.schema import Config


@click.command()
@click.option(
    "--max-age",
    "max_age_s",
    type=click.FloatRange(min=1),
    default=MAX_AGE_S,
    show_default=True,
    help="Seconds after which the health file counts as stale.",
)
@common_options
def health(max_age_s: float, config_path: Path | None, log_format: str | None) -> None:
    """Exit 0 when the daemon of this config is serving, 1 (with the reason) when not:
    its health file missing or stale, its process gone, an adapter deaf (connected
    but nothing received for `health.deaf_after_s`), or the store stalled (a call
    waiting past `health.store_stalled_after_s`)."""
    config = setup(config_path, log_format)
    path, limits = health_path(config), config.health
    try:
        click.echo(check_health(path, max_age_s, deaf_after_s=limits.deaf_after_s,
                                stalled_after_s=limits.store_stalled_after_s))  # fmt: skip
    except RuntimeError as exc:
        fail(str(exc) + _relative_hint(config, path))


def _relative_hint(config: Config, path: Path) -> str:
    """For a health file not found: where a relative `data_dir` was taken from, and
    what to do; empty when `data_dir` is absolute or the file is there."""
    if config.data_dir.is_absolute() or path.exists():
        return ""
    return (
        f" (data_dir {config.data_dir} is taken from the folder health runs in, {Path.cwd()},"
        " as `soulbot run` takes it from the folder it starts in: run health in that folder,"
        " or make data_dir absolute)"
    )
