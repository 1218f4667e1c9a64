"""`soulbot config-reference`: the configuration reference, from the schema."""

from __future__ import annotations

import click

from bot.config.reference import render_reference


@click.command("config-reference")
def config_reference() -> None:
    """Print the configuration reference (markdown) generated from the config
    schema; docs/configuration.md is this output."""
    click.echo(render_reference(), nl=False)
