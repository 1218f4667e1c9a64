"""Reading soulbot.yaml: YAML, `${ENV}` interpolation, the SDK's own variables.

Every string value may hold `${NAME}` or `${NAME:-default}` (the default when
NAME is unset or empty), taken from the environment; `$$` writes a literal `$`.
Unknown keys, wrong types and missing values are a `ConfigError` naming the file
and the key path. `model.api_key` and `model.base_url` default to the
ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL variables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from bot.config.schema import Config
from bot.config.validation import format_errors, key_path
from bot.errors import ConfigError
from bot.storage.files import decode_text
from bot.storage.yamlfile import describe_error, load_yaml

_MODEL_ENV = {"api_key": "ANTHROPIC_API_KEY", "base_url": "ANTHROPIC_BASE_URL"}
_REFERENCE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}|\$\{")


def _interpolate(
    node: Any, environ: Mapping[str, str], loc: tuple[int | str, ...], errors: dict[str, str]
) -> Any:
    """`node` with every reference replaced; a bad reference adds an entry to
    `errors` (key path -> message)."""
    if isinstance(node, dict):
        return {k: _interpolate(v, environ, (*loc, str(k)), errors) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate(v, environ, (*loc, i), errors) for i, v in enumerate(node)]
    if not isinstance(node, str) or "$" not in node:
        return node

    def substitute(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "$$":
            return "$"
        name = match.group(1)
        if name is None:
            errors[key_path(loc)] = "malformed ${...} reference; write ${NAME} or ${NAME:-default}"
            return ""
        if environ.get(name):
            return environ[name]
        if match.group(2) is not None:  # as in the shell: unset or empty takes the default
            return match.group(3)
        if name in environ:
            return ""
        errors[key_path(loc)] = (
            f"environment variable {name} is not set (write ${{{name}:-}} to allow it to be empty)"
        )
        return ""

    return _REFERENCE.sub(substitute, node)


def parse_config(text: str, source: str, environ: Mapping[str, str]) -> Config:
    """Parse YAML text into a Config; `source` names the file in errors.

    Raises ConfigError with one line per problem (a YAML syntax error said in
    plain words takes two: `describe_error`).
    """
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        line, problem = describe_error(exc, text)
        where = f" line {line}" if line is not None else ""
        raise ConfigError(f"{source}{where}: invalid YAML: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level")
    unresolved: dict[str, str] = {}
    data = _interpolate(raw, environ, (), unresolved)
    model = data.setdefault("model", {})
    if isinstance(model, dict):  # the SDK's own variables, when the file names none
        for key, variable in _MODEL_ENV.items():
            if key not in model and environ.get(variable):
                model[key] = environ[variable]
    lines = [f"{path}: {message}" for path, message in unresolved.items()]
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        # A value that could not be interpolated is reported once, above.
        lines.extend(format_errors(exc, Config, skip=unresolved.keys()))
    if lines:
        raise ConfigError("\n".join(f"{source}: {line}" for line in lines))
    return config


def load_config(path: Path | None, environ: Mapping[str, str]) -> Config:
    """Read the config file at `path`; `None` gives the defaults.

    Raises ConfigError when the file is missing, unreadable or invalid.
    """
    if path is None:
        return parse_config("", "(defaults)", environ)
    try:
        text = decode_text(path.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 (bad byte at offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
    return parse_config(text, str(path), environ)
