"""`soulbot check`'s `model:` part: the model's name, where it is served, whether
a key is set (never the key), and with `--online` who answers and whether tool
calls work there (bot/model/probe.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from bot.config.schema import Config, ModelConfig
from bot.model.usage import unpriced_model

ANTHROPIC_API = "https://api.anthropic.com"
NEEDS_TOOLS = (
    "the memory compile and the heartbeat need them and will fail (memory stays in "
    "unfiled notes, no soul writes itself); chat turns still work"
)


@dataclass
class ModelPart:
    """The part's lines, and what check adds to its warnings and errors."""

    lines: list[str]
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def model_part(config: Config, online: bool) -> ModelPart:
    """The `model:` part of check's output for `config` (see the module docstring).
    A missing key and base URL is not said here: it is one of `refusals`."""
    model = config.model
    lines = [f"name: {model.name}", f"served at: {served_at(model.base_url)}"]
    lines.append(f"API key: {'set' if model.api_key.get_secret_value() else 'not set'}")
    if model.fallback:
        at = model.fallback_base_url or model.base_url
        lines.append(f"fallback: {model.fallback} at {served_at(at)}")
    known = [ModelConfig.model_fields["name"].default]
    named = {"model.name": model.name, "model.fallback": model.fallback}
    warnings = [
        warning
        for key, name in named.items()
        if name and (warning := unpriced_model(key, name, known, model.prices))
    ]
    part = ModelPart(lines, warnings)
    reachable = model.api_key.get_secret_value() or model.base_url
    if not online:
        lines.append("not asked: with --online, check makes a 1-token call and a tiny tool call")
    elif reachable:
        _ask(model, part)
    return part


def _ask(model: ModelConfig, part: ModelPart) -> None:
    """Ask the model; add what it said to `part`."""
    from bot.model.probe import probe  # the SDK takes a second to import: only --online needs it

    result = asyncio.run(probe(model))
    where = served_at(model.base_url)
    if result.answered is None:
        part.lines.append(f"answered: no ({result.error})")
        part.errors.append(f"model: {model.name} at {where} did not answer: {result.error}")
        return
    part.lines.append(f"answered: {result.answered} at {where}")
    if result.tools:
        part.lines.append("tool calls: work (a forced tool call came back as one)")
        return
    part.lines.append(f"tool calls: do not work ({result.tools_error})")
    part.warnings.append(
        f"model: tool calls do not work with {model.name} at {where} ({result.tools_error}): "
        f"{NEEDS_TOOLS}"
    )


def served_at(base_url: str | None) -> str:
    """`base_url` without a user or password in it, or the Anthropic API's."""
    if base_url is None:
        return f"{ANTHROPIC_API} (the Anthropic API: model.base_url and ANTHROPIC_BASE_URL unset)"
    parts = urlsplit(base_url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
