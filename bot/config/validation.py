"""Turn pydantic validation errors into short lines that name the key path.

Shared by the config file and a soul's front matter, so both speak the same way:
`adapters.telegram.dm_policy: expected one of open, allowlist, pairing, got 'anyone'`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterable, Sequence
from typing import Any, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from bot.storage.postgres import without_password

# A key whose last name matches holds a secret: `token`, `bot_token`, `api_key`, but not
# `max_tokens` or `input_tokens`.
SECRET_KEY = re.compile(
    r"(^|[._-])(token|api_?key|secret|password|passwd|authorization|auth)$", re.IGNORECASE
)

_EXPECTED = {
    "string_type": "expected a string",
    "string_too_short": "expected a non-empty string",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "list_type": "expected a list",
    "tuple_type": "expected a list",
    "missing": "a value is required",
}


def key_path(loc: Sequence[int | str]) -> str:
    """`('bindings', 0, 'soul')` -> `bindings[0].soul`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def describe_value(value: Any) -> str:
    """A short, safe rendering of a bad value for an error message: a URL's
    password is never in it."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if value is None:
        return "nothing"
    text = repr(without_password(value) if isinstance(value, str) else value)
    return text if len(text) <= 60 else text[:57] + "..."


def _expected(err: ErrorDetails, known_keys: Iterable[str]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return "expected one of " + ", ".join(choices)
    if kind == "extra_forbidden":
        name = str(err["loc"][-1])
        close = difflib.get_close_matches(name, list(known_keys), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown key{hint}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        sign = {
            "greater_than_equal": ">=",
            "greater_than": ">",
            "less_than_equal": "<=",
            "less_than": "<",
        }[kind]
        bound = next(iter(ctx.values()), "?")
        return f"expected a value {sign} {bound}"
    if kind in _EXPECTED:
        return _EXPECTED[kind]
    message = err["msg"]
    return message.removeprefix("Value error, ")


def _unwrap(annotation: Any) -> Any:
    """The model inside `X | None`, `tuple[X, ...]`, `list[X]`, `dict[str, X]`."""
    seen = 0
    while not (isinstance(annotation, type) and issubclass(annotation, BaseModel)) and seen < 5:
        args = [a for a in get_args(annotation) if a not in (type(None), Ellipsis)]
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if models:
            return models[0]
        if not args:
            return annotation
        annotation = args[-1]
        seen += 1
    return annotation


def _model_at(root: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model class that validates the mapping found at `loc`, if any."""
    current: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next(
            (f for name, f in current.model_fields.items() if part in (name, f.alias)), None
        )
        if field is None:
            return None
        current = field.annotation
        current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return current
    return None


def _keys_of(model: type[BaseModel] | None) -> list[str]:
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


def format_errors(
    exc: ValidationError, root: type[BaseModel], skip: Collection[str] = ()
) -> list[str]:
    """One line per error, `path: expected ..., got ...`.

    The bad value is left out when the key looks like a secret (token, api_key,
    authorization, ...). An unknown key gets a hint with the closest allowed key
    of `root`'s schema at that place. Errors at a path in `skip` are left out.
    """
    lines = []
    for err in exc.errors():
        if not err["loc"]:  # a check across fields names its fields itself
            lines.append(_expected(err, ()))
            continue
        path = key_path(err["loc"])
        if path in skip:
            continue
        known = _keys_of(_model_at(root, err["loc"][:-1]))
        text = f"{path}: {_expected(err, known)}"
        if err["type"] not in ("missing", "extra_forbidden") and not SECRET_KEY.search(path):
            text += f", got {describe_value(err.get('input'))}"
        lines.append(text)
    return lines
