"""`soulbot compile` and `soulbot memory recall | import | pages | forget`."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from bot.app.preflight import OPERATOR_FAULT, missing_credentials
from bot.cli.beside import refuse_beside_a_daemon
from bot.cli.common import common_options, fail, load_registry, setup
from bot.config.schema import Config
from bot.errors import InvalidKeyError, SoulbotError
from bot.types import Scope

T = TypeVar("T")
SCOPE_HELP = (
    "Memory scope: shared, user:<platform>:<id>, chat:<platform>:<id> or "
    "member:<platform>:<server>:<id>."
)
_SCOPE = click.option("--scope", default="shared", show_default=True, help=SCOPE_HELP)
_SCOPE_OR_PICK = click.option(
    "--scope",
    default=None,
    help=SCOPE_HELP + " Default: the soul's only scope with traces (shared when none has any).",
)

if TYPE_CHECKING:  # the runtime (and the model SDK) is imported when a command runs
    from bot.app.runtime import Runtime
    from bot.memory.compile import CompileResult


def _run(config: Config, work: Callable[[Runtime], Awaitable[T]]) -> T:
    """Open the runtime (no adapters), run `work`, close. Exits 1 on SoulbotError."""
    from bot.app.runtime import Runtime

    registry, _ = load_registry(config)

    async def main() -> T:
        runtime = await Runtime.open(config, registry, [])
        try:
            return await work(runtime)
        finally:
            await runtime.memory.drain(30)
            await runtime.close()

    try:
        return asyncio.run(main())
    except SoulbotError as exc:
        fail(str(exc))
        raise


async def _pick_scope(runtime: Runtime, soul: str, scope: str | None) -> str:
    """`scope` when given; else the soul's only scope holding traces (said on
    stderr), or shared when none holds any. Raises SoulbotError for a soul that
    is not loaded, and one naming every scope with its trace count, one a line,
    when several hold traces."""
    if scope is not None:
        return scope
    if runtime.registry.get(soul) is None:
        known = ", ".join(s.id for s in runtime.registry.all()) or "none"
        raise SoulbotError(f"no soul with id '{soul}' is loaded (loaded: {known})")
    store = runtime.memory.store
    counts = [(name, await store.count(soul, name)) for name in await store.scopes_after(soul, {})]
    held = [(name, count) for name, count in counts if count]
    if not held:
        click.echo(f"{soul} has no traces yet: looking in the shared scope", err=True)
        return "shared"
    if len(held) == 1:
        click.echo(f"scope {held[0][0]}: the only one where {soul} has traces", err=True)
        return held[0][0]
    width = max(len(name) for name, _ in held)
    lines = "".join(
        f"\n  --scope {name.ljust(width)}  {count} trace{'s' if count > 1 else ''}"
        for name, count in held
    )
    raise SoulbotError(f"{soul} has traces in {len(held)} scopes: pick one{lines}")


def _check_scope(scope: str) -> None:
    try:
        place = Scope.parse(scope).per_member
    except InvalidKeyError:
        place = True
    if place:  # a per-member place keeps nothing of its own: its members' scopes do
        fail(
            "--scope: expected shared, user:<platform>:<id>, chat:<platform>:<id> or "
            f"member:<platform>:<server>:<id>, got {scope!r}"
        )


@click.command("compile")
@click.argument("soul", required=False)
@click.option("--scope", default=None, help=SCOPE_HELP + " Default: every scope with new traces.")
@common_options
def compile_command(soul: str | None, scope: str | None, config_path: Path | None,
                    log_format: str | None) -> None:  # fmt: skip
    """Fold new traces into the memory wikis (of SOUL, or of every soul)."""
    config = setup(config_path, log_format)
    if scope is not None:
        _check_scope(scope)
    problem = missing_credentials(config)
    if problem:
        fail(problem, OPERATOR_FAULT)

    async def work(runtime: Runtime) -> list[CompileResult | tuple[str, str, str]]:
        souls = [soul] if soul else None
        wikis = await runtime.memory.pending_wikis(souls, scope)
        results: list[CompileResult | tuple[str, str, str]] = []
        show = sys.stderr.isatty()
        with click.progressbar(wikis, label="compiling", file=sys.stderr if show else None,
                               item_show_func=lambda w: w and f"{w[0]} {w[1]}") as bar:  # fmt: skip
            for soul_id, name in bar:
                try:
                    results.append(await runtime.memory.compile_one(soul_id, name))
                except Exception as exc:
                    results.append((soul_id, name, f"{type(exc).__name__}: {exc}"))
        return results

    results = _run(config, work)
    rows = [("SOUL", "SCOPE", "PAGES", "TRACES", "CONFLICTS", "RESULT")]
    failed = False
    for result in results:
        if isinstance(result, tuple):
            rows.append((result[0], result[1], "-", "-", "-", "failed: " + result[2]))
            failed = True
        else:
            pages, traces = str(len(result.pages)), str(result.traces)
            done = f"ok, {result.duration_ms:.0f} ms"
            rows.append(
                (result.soul, result.scope, pages, traces, str(len(result.conflicts)), done)
            )
    if len(rows) == 1:
        click.echo("Nothing to compile: no wiki has new traces.")
        return
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if failed:
        raise SystemExit(1)


@click.group()
def memory() -> None:
    """Look into and manage the memory of a soul."""


def _route(soul: str, scope: str) -> Any:
    from bot.types import Route

    return Route(soul=soul, scope=scope, session=f"cli:{scope}", user="", is_dm=scope != "shared")


@memory.command()
@click.argument("soul")
@click.argument("query")
@_SCOPE_OR_PICK
@common_options
def recall(soul: str, query: str, scope: str | None, config_path: Path | None,
           log_format: str | None) -> None:  # fmt: skip
    """Print the recall block the model would see for QUERY."""
    config = setup(config_path, log_format)
    if scope is not None:
        _check_scope(scope)

    async def work(runtime: Runtime) -> str:
        route = _route(soul, await _pick_scope(runtime, soul, scope))
        return await runtime.memory.recall(route, query, None)

    block = _run(config, work)
    click.echo(block or "(nothing recalled)")


def _timestamp(value: Any, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:  # a time without an offset is UTC, as in a page's front matter
            return parsed.replace(tzinfo=parsed.tzinfo or UTC).timestamp()
    raise SoulbotError(f"{where}: created_at: expected unix seconds or an ISO-8601 time")


def _read_jsonl(path: Path, soul: str, scope: str) -> list[Any]:
    from bot.memory.store import NewTrace

    traces = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SoulbotError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise SoulbotError(f"{where}: expected an object with a text string")
        speaker = row.get("speaker")
        if speaker not in (None, "user", "assistant"):
            raise SoulbotError(f"{where}: speaker: expected user, assistant or null")
        entities = row.get("entities", [])
        if not isinstance(entities, list) or not all(isinstance(e, str) for e in entities):
            raise SoulbotError(f"{where}: entities: expected a list of strings")
        traces.append(NewTrace(soul, scope, f"import:{scope}", speaker, str(row.get("name", "")),
                               row["text"], _timestamp(row.get("created_at"), where),
                               tuple(entities)))  # fmt: skip
    return traces


@memory.command("import")
@click.argument("soul")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_SCOPE
@common_options
def import_command(soul: str, file: Path, scope: str, config_path: Path | None,
                   log_format: str | None) -> None:  # fmt: skip
    """Import traces from a JSON-lines FILE (text, speaker, name, created_at, entities)."""
    config = setup(config_path, log_format)
    _check_scope(scope)
    try:
        traces = _read_jsonl(file, soul, scope)
    except SoulbotError as exc:
        fail(str(exc))

    async def work(runtime: Runtime) -> int:
        for start in range(0, len(traces), 5000):
            await runtime.memory.store.add(traces[start : start + 5000])
        return len(traces)

    click.echo(f"imported {_run(config, work)} traces into {soul} {scope}")


@memory.command()
@click.argument("soul")
@_SCOPE_OR_PICK
@common_options
def pages(soul: str, scope: str | None, config_path: Path | None, log_format: str | None) -> None:
    """List the pages of a scope's wiki."""
    config = setup(config_path, log_format)
    if scope is not None:
        _check_scope(scope)

    async def work(runtime: Runtime) -> list[Any]:
        wiki = runtime.memory.wiki(soul, await _pick_scope(runtime, soul, scope))
        if wiki is None:
            raise SoulbotError(f"no soul with id '{soul}' is loaded")
        return await asyncio.to_thread(wiki.list_pages)

    found = _run(config, work)
    if not found:
        click.echo("(no pages)")
    for page in found:
        click.echo(f"{page.id}  [{page.type}]  {page.summary}  (updated {page.updated or '-'})")


@memory.command()
@click.argument("soul")
@click.option("--scope", required=True, help=SCOPE_HELP)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@common_options
def forget(soul: str, scope: str, yes: bool, config_path: Path | None,
           log_format: str | None) -> None:  # fmt: skip
    """Erase a private scope: its traces, its wiki and its conversation history.
    Refused while a daemon serves data_dir or the store: its sessions would
    keep the conversation (`/forget` in the chat erases it there)."""
    config = setup(config_path, log_format)
    _check_scope(scope)
    if scope == "shared":
        fail("the shared scope is the soul's own wiki: edit or delete its files by hand")
    # Its sessions would keep the conversation.
    refuse_beside_a_daemon(config, "forget from the chat with `/forget confirm`, or stop the "
                           "daemon first; nothing was erased")  # fmt: skip
    if not yes:
        click.confirm(f"Erase everything {soul} remembers of {scope}?", abort=True)

    async def work(runtime: Runtime) -> int:
        return await runtime.sessions.forget(_route(soul, scope))

    sessions = _run(config, work)
    click.echo(f"forgot {scope}: its traces, its wiki and the history of {sessions} session(s)")
