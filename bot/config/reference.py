"""The configuration reference (docs/configuration.md), generated from the config
schema: every key path with its type, default and the docstring under its field
in bot/config.py. `soulbot config-reference` prints it; a test keeps the file
in docs/ equal to it, so the reference cannot drift from the code."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

from bot.config.schema import Binding, Config, Price

_HEAD = """# Configuration reference

Generated from the config schema by `soulbot config-reference`; do not edit by
hand. soulbot reads `soulbot.yaml` (or `--config PATH`, or `$SOULBOT_CONFIG`).
Every string value may be `${NAME}` or `${NAME:-default}` from the environment.
An unknown key or a wrong value stops soulbot with an error naming the key path.
`deploy/soulbot.example.yaml` shows every key with a comment.
"""


def _type(annotation: Any) -> str:
    """A reader's name for a field's type."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [_type(a) for a in args if a is not type(None)]
        return " \\| ".join(names) + (" \\| `null`" if type(None) in args else "")
    if origin is tuple:
        item = args[0]
        if isinstance(item, type) and issubclass(item, BaseModel):
            return "list of entries (below)"
        return f"list of {_type(item)}"
    if origin is dict:
        return f"mapping of text to {_type(args[1])}"
    if annotation is SecretStr:
        return "secret text"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "price" if annotation is Price else "section"
    simple: dict[Any, str] = {str: "text", int: "integer", float: "number", Path: "path",
                              bool: "`true` \\| `false`"}  # fmt: skip
    return simple.get(annotation) or str(getattr(annotation, "__name__", annotation))


def _default(value: Any) -> str:
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None:
        return "`null`"
    if isinstance(value, tuple):
        return "`[]`" if not value else "<br>".join(f"`{v}`" for v in value)
    if isinstance(value, Path):
        value = str(value)
    if value == "" or value == {}:
        return '`""`' if value == "" else "`{}`"
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _rows(model: type[BaseModel], prefix: str) -> list[tuple[str, Any, str]]:
    """(markdown row, a nested section model or None, its key path) per field."""
    rows = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        doc = " ".join((field.description or "").split())
        annotation = field.annotation
        default = _default(field.default)
        if model is Price and name.startswith("cache_"):
            default = "from `input`"
        row = f"| `{path}` | {_type(annotation)} | {default} | {doc} |"
        is_model = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        rows.append((row, annotation if is_model else None, path))
    return rows


def render_reference() -> str:
    """The whole reference as markdown."""
    parts = [_HEAD]

    def section(title: str, model: type[BaseModel], prefix: str, intro: str = "") -> None:
        rows = _rows(model, prefix)
        text = [f"\n## {title}\n"]
        if intro or model.__doc__:
            text.append(" ".join((intro or model.__doc__ or "").split()) + "\n")
        text += ["| key | type | default | what it does |", "|---|---|---|---|"]
        text += [row for row, nested, _ in rows if nested is None or nested is Price]
        parts.append("\n".join(text) + "\n")
        for _, nested, path in rows:
            if nested is not None and nested is not Price:
                section(f"`{path}`", nested, f"{path}.")

    section("Top level", Config, "", "The keys at the top of the file.")
    section("`bindings[]` entries", Binding, "bindings[].")
    section("`model.prices` entries", Price, "model.prices.<model>.")
    return "".join(parts)
