"""What `soulbot run` refuses before it serves, said once for `run` and `check`.

`refusals` lists every reason `run` (and `chat`) would stop before serving, each
as the one line `run` prints after `error: ` and the code it exits with: 2
(`OPERATOR_FAULT`) for what only the operator can fix and a restart cannot (no
model credentials, a data_dir or a SQLite database soulbot cannot use: the
systemd unit does not restart on it), 1 for the rest (no soul loaded, no
default soul, no adapter enabled, a database of a newer soulbot). `run` prints
the first and exits; `check` lists them all among its errors, so the two
cannot disagree. Nothing here makes or changes a file, and nothing is sent to
the platforms (they are asked only once `run` starts, or by `check --online`).

`store_refusals` is what `run` meets once it connects to a shared (PostgreSQL)
store: a server it cannot reach or use, or a live process it cannot run beside
(bot/cluster/topology.py), each a line and exit 2. `check` asks the server for
them on a read-only connection that registers nothing; `run` meets them itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.cluster import topology
from bot.config.schema import Config
from bot.errors import SoulbotError, StorageError
from bot.soul.registry import SoulRegistry
from bot.storage.db import store_problem, store_target

# The exit code of a fault only the operator can fix (no credentials, a data_dir or a
# database soulbot cannot use): the systemd unit does not restart on it.
OPERATOR_FAULT = 2
# The no-key trial: the Makefile's demo model server (tests/fakes/demo.py) on this port.
DEMO_URL = "http://127.0.0.1:8765"


@dataclass(frozen=True)
class Refusal:
    """One reason `run` stops before serving: the line it prints (after
    `error: `) and its exit code."""

    line: str
    code: int = 1


def refusals(config: Config, registry: SoulRegistry) -> list[Refusal]:
    """Every reason `run` would stop before serving with `config` and the souls
    of `registry`, in the order `run` meets them (see the module docstring)."""
    if not registry.all():
        where = config.workspaces.resolve()
        return [Refusal(f"no soul loaded from {where}; `soulbot check` lists what failed")]
    found = []
    if problem := missing_credentials(config):
        found.append(Refusal(problem, OPERATOR_FAULT))
    stored = store_problem(config.data_dir, config.store.url)
    if stored is not None:
        code = OPERATOR_FAULT if isinstance(stored, StorageError) else 1
        found.append(Refusal(str(stored), code))
    try:
        pick_default_soul(config, registry)
    except SoulbotError as exc:
        found.append(Refusal(str(exc)))
    if not platforms(config):
        found.append(
            Refusal(
                "adapters: no adapter is enabled: set adapters.telegram.token or "
                "adapters.discord.token, or adapters.console.enabled: true"
            )
        )
    return found


def store_refusals(config: Config) -> list[Refusal]:
    """What `run` would stop at once connected to `config`'s PostgreSQL store,
    asked read-only (see the module docstring); nothing on SQLite, where one
    process serves and `refusals` checks the file."""
    target = store_target(config.data_dir, config.store.url)
    if not isinstance(target, str):
        return []
    try:
        line = topology.refusal(target, topology.Process.of(config), config.store.timeouts())
    except StorageError as exc:
        return [Refusal(str(exc), OPERATOR_FAULT)]
    return [Refusal(line, OPERATOR_FAULT)] if line else []


def missing_credentials(config: Config) -> str | None:
    """The one line to print when the model cannot be reached, else None."""
    if config.model.api_key.get_secret_value() or config.model.base_url:
        return None
    return (
        "model: no credentials: set ANTHROPIC_API_KEY (or model.api_key, or model.base_url "
        "for a gateway or local server) and start again; to try soulbot without a key, run "
        f"`make fake` (a demo model on {DEMO_URL}) and start with "
        f"ANTHROPIC_BASE_URL={DEMO_URL} ANTHROPIC_API_KEY=any"
    )


def pick_default_soul(config: Config, registry: SoulRegistry) -> str:
    """`default_soul`, or the only soul loaded. Raises SoulbotError otherwise."""
    ids = [s.id for s in registry.all()]
    if config.default_soul is not None:
        if config.default_soul not in ids:
            raise SoulbotError(
                f"default_soul: no soul with id '{config.default_soul}' is loaded "
                f"(loaded: {', '.join(ids) or 'none'})"
            )
        return config.default_soul
    if len(ids) == 1:
        return ids[0]
    raise SoulbotError(f"default_soul: set it to one of the loaded souls ({', '.join(ids)})")


def console_enabled(config: Config) -> bool:
    """`adapters.console.enabled`, with `auto` on when no platform token is set."""
    console = config.adapters.console.enabled
    tokens = (config.adapters.discord.token, config.adapters.telegram.token)
    return console is True or (console == "auto" and not any(t.get_secret_value() for t in tokens))


def platforms(config: Config) -> list[str]:
    """The adapters `run` starts with `config`: a platform whose token is set,
    and the terminal chat when `console_enabled`."""
    adapters = config.adapters
    tokens = {"telegram": adapters.telegram.token, "discord": adapters.discord.token}
    on = [name for name, token in tokens.items() if token.get_secret_value()]
    return [*on, "console"] if console_enabled(config) else on
