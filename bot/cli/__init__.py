"""The `soulbot` command and its subcommands (`soulbot --help` lists them)."""

from __future__ import annotations

import click

from bot import __version__
from bot.cli.backup import backup, restore
from bot.cli.health import health
from bot.cli.memory import compile_command, memory
from bot.cli.reference import config_reference
from bot.cli.serve import chat, run
from bot.cli.souls import check, init, prompt, soul
from bot.cli.store import store
from bot.cli.usage import usage
from bot.cli.web import web_login


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="soulbot")
def main() -> None:
    """soulbot: a persona with a life on Discord and Telegram."""


for command in (
    run,
    chat,
    check,
    prompt,
    init,
    soul,
    usage,
    compile_command,
    memory,
    health,
    backup,
    restore,
    store,
    config_reference,
    web_login,
):
    main.add_command(command)
