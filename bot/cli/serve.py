"""`soulbot run` and `soulbot chat`: the daemon, with the terminal chat."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import click
import structlog

from adapters.base import Adapter
from bot.app.preflight import OPERATOR_FAULT, console_enabled, pick_default_soul, refusals
from bot.cli.common import common_options, fail, load_registry, setup
from bot.config.schema import Config, ConsoleConfig, DiscordConfig, TelegramConfig
from bot.errors import SoulbotError, StorageError, TopologyConflict
from bot.soul.registry import SoulRegistry
from bot.storage.db import prepare_data_dir

log = structlog.get_logger(__name__)


def _adapters(config: Config, soul_name: str, on_eof: Callable[[], None]) -> list[Adapter]:
    """The adapters this config enables (a platform is on when its token is set)."""
    from bot.chat.commands import MENU

    adapters: list[Adapter] = []
    telegram, discord = config.adapters.telegram, config.adapters.discord
    if telegram.token.get_secret_value():
        from adapters.telegram_adapter import TelegramAdapter, Webhook
        from bot.config.schema import split_listen

        hook, webhook = telegram.webhook, None
        if hook.url:
            host, port = split_listen(hook.listen)
            webhook = Webhook(hook.url, host, port, hook.path, hook.secret_token.get_secret_value())
        adapters.append(TelegramAdapter(telegram.token.get_secret_value(), telegram.base_url, MENU,
                                        streaming=telegram.streaming, webhook=webhook))  # fmt: skip
    if discord.token.get_secret_value():
        from adapters.discord_adapter import DiscordAdapter

        adapters.append(
            DiscordAdapter(
                discord.token.get_secret_value(),
                command_prefix=discord.command_prefix,
                commands=MENU,
                api_base_url=discord.api_base_url,
                gateway_url=discord.gateway_url,
                streaming=discord.streaming,
                shard_count=discord.shard_count,
                shard_ids=discord.shard_ids,
            )
        )
    if console_enabled(config):
        from adapters.console_adapter import ConsoleAdapter

        adapters.append(
            ConsoleAdapter(soul_name, on_eof=on_eof, files_dir=config.data_dir / "exports")
        )
    return adapters


async def _serve(config: Config, registry: SoulRegistry) -> int:
    # The runtime pulls in the model SDK (a second to import): only run and chat need it.
    from bot.app.daemon import Daemon
    from bot.app.owner import own_data_dir
    from bot.app.runtime import Runtime, settle_gc

    stop: list[Callable[[], None]] = []
    default = registry.get(pick_default_soul(config, registry))
    name = default.name if default else "soul"
    adapters = _adapters(config, name, lambda: stop[0]())
    with own_data_dir(config.data_dir, config.instance):
        runtime = await Runtime.open(config, registry, adapters)
        settle_gc()
        services = []
        if config.web.enabled:
            from bot.web.service import serving_web

            services.append(serving_web)
        daemon = Daemon(runtime, services=services)
        # The end of console input stops the daemon when the console is its only adapter.
        stop.append(daemon.request_stop if len(adapters) == 1 else lambda: None)
        return await daemon.serve()


def _start(config: Config, registry: SoulRegistry) -> None:
    """Serve, or exit with the first of `refusals` (what `soulbot check` lists too)."""
    refused = refusals(config, registry)
    if refused:
        fail(refused[0].line, refused[0].code)
    try:
        prepare_data_dir(config.data_dir)
        code = asyncio.run(_serve(config, registry))
    except (StorageError, TopologyConflict) as exc:  # the operator's: a restart fails the same way
        fail(str(exc), OPERATOR_FAULT)
    except SoulbotError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(1) from None
    raise SystemExit(code)


@click.command()
@common_options
def run(config_path: Path | None, log_format: str | None) -> None:
    """Run the daemon until SIGTERM or Ctrl-C (a terminal chat when no platform is set)."""
    config = setup(config_path, log_format, lambda c: sys.stdin.isatty() and console_enabled(c))
    registry, _ = load_registry(config, make=True)
    _start(config, registry)


@click.command()
@click.argument("soul", required=False)
@common_options
def chat(soul: str | None, config_path: Path | None, log_format: str | None) -> None:
    """Chat with SOUL (default: default_soul) in the terminal; /reset, /quit."""
    config = setup(config_path, log_format, lambda c: True)
    registry, _ = load_registry(config, make=True)
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
    _start(only, registry)
