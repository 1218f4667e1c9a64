"""A safe YAML loader that refuses what a config or a front matter never needs.

PyYAML's safe loader keeps the last of two equal keys without a word; in a
config or a front matter that hides a mistake, so it is an error here. So are
anchors and aliases (`&name`, `*name`, the `<<` merge that uses them): an alias
shares a node, and a 600-byte file of aliases to aliases is gigabytes once
anything walks it as a tree (the config's `${ENV}` interpolation does). And so
is nesting deeper than MAX_DEPTH: the composer recurses, and a few thousand
brackets would end in RecursionError. Each refusal is a yaml.YAMLError with the
line it is on (`problem_mark`), like any other YAML error.

Where PyYAML has libyaml, the text is parsed in C: one pass over its events
checks the anchors, aliases and depth, then the C loader builds the data (a
page read on every turn parses its front matter many times faster). A text
the C path refuses is parsed again by the pure-Python loader, whose messages
and line numbers are the ones given, so both paths refuse alike.

`describe_error` puts a syntax error in plain words where it can tell the
cause (a missing colon, a tab, an indentation that does not match), naming the
line at fault, which is not always the one PyYAML names.
"""

from __future__ import annotations

from typing import Any, cast

import yaml
from yaml.error import Mark

# Configs and front matter nest a few levels; 50 is far past them and far below
# Python's recursion limit (the composer takes two frames a level).
MAX_DEPTH = 50
_NO_ALIASES = (
    "YAML anchors and aliases are refused (an alias can grow a small file into gigabytes); "
    "write the value out"
)


def _refusal(event: yaml.Event, depth: int) -> str | None:
    """Why `event` (at collection `depth`) is refused, or None."""
    if isinstance(event, yaml.AliasEvent):
        return f"an alias (*{event.anchor}) is not allowed: {_NO_ALIASES}"
    anchor = getattr(event, "anchor", None)
    if anchor is not None:
        return f"an anchor (&{anchor}) is not allowed: {_NO_ALIASES}"
    if depth > MAX_DEPTH:
        return f"nested deeper than {MAX_DEPTH} levels"
    return None


class _UniqueKeys(yaml.constructor.SafeConstructor):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


class _StrictLoader(_UniqueKeys, yaml.SafeLoader):
    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        problem = _refusal(event, self._depth + 1)
        if problem is not None:
            raise yaml.composer.ComposerError(None, None, problem, cast(Mark, event.start_mark))
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_C_LOADER: type | None = None
if yaml.__with_libyaml__:

    class _StrictCLoader(_UniqueKeys, yaml.CSafeLoader):
        pass

    _C_LOADER = _StrictCLoader


def _check_events(text: str) -> None:
    """Refuse anchors, aliases and depth past MAX_DEPTH, reading the C parser's
    events (collections count as levels, as the composer's nodes do)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        opens = isinstance(event, yaml.CollectionStartEvent)
        problem = _refusal(event, depth + 1 if opens or isinstance(event, yaml.ScalarEvent) else 0)
        if problem is not None:
            raise yaml.composer.ComposerError(None, None, problem, cast(Mark, event.start_mark))
        if opens:
            depth += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def load_yaml(text: str) -> Any:
    """Parse YAML data (no Python tags, no anchors or aliases, no key given
    twice, at most MAX_DEPTH levels deep). Raises yaml.YAMLError."""
    if _C_LOADER is not None:
        try:
            _check_events(text)
            return yaml.load(text, Loader=_C_LOADER)  # a CSafeLoader subclass
        except yaml.YAMLError:
            pass  # refused: the pure parser says why, in its words and with its lines
    return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass


def describe_error(exc: yaml.YAMLError, text: str, first_line: int = 1) -> tuple[int | None, str]:
    """The line of `exc` (raised parsing `text`, whose first line is numbered
    `first_line`) and what is wrong, or None and PyYAML's words when it names no line.

    A missing colon, a tab and an indentation that does not match the lines above
    are said in plain words, with a hint, at the line at fault; PyYAML's own words
    follow on a second line. Any other error is PyYAML's problem, on one line.
    """
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return None, problem
    plain = _plain_words(problem, getattr(exc, "context_mark", None), mark, text.split("\n"))
    if plain is None:
        return mark.line + first_line, problem
    row, words = plain
    where = f"line {mark.line + first_line}, column {mark.column + 1}"
    return row + first_line, f"{words}\n  (the YAML parser: {problem}, at {where})"


_NO_COLON = "this line is not `key: value` (a missing colon?)"
_INDENT = "the indentation does not match the lines above (keys of one mapping line up)"


def _plain_words(
    problem: str, context: Mark | None, mark: Mark, lines: list[str]
) -> tuple[int, str] | None:
    """The row (0-based) at fault and plain words for a syntax error, or None."""
    row = mark.line
    line = lines[row] if row < len(lines) else ""
    if problem.startswith("found character '\\t'"):
        if line[: mark.column].strip():
            return row, "a tab: YAML separates with spaces, not tabs"
        return row, "a tab: YAML indents with spaces"
    if problem == "could not find expected ':'" and context is not None:
        if context.line < len(lines) and ":" not in lines[context.line]:
            return context.line, _NO_COLON
        return None
    if problem.startswith("expected '<document start>'"):
        colonless = _colonless_above(lines, row)
        return None if colonless is None else (colonless, _NO_COLON)
    if problem == "mapping values are not allowed here":
        colonless = _colonless_above(lines, row)
        if colonless is not None:
            return colonless, _NO_COLON
        above = _content_above(lines, row)
        if above is not None and _indent(line) > _indent(lines[above]) and _has_value(lines[above]):
            return row, _INDENT
        if ": " in line[: mark.column]:
            return row, "a value holding ': ' must be quoted (key: \"a: b\")"
        return None
    if problem.startswith("expected <block end>, but found '<block"):
        return row, _INDENT
    return None


def _content_above(lines: list[str], row: int) -> int | None:
    """The row of the nearest line above `row` that is neither blank nor a comment."""
    for above in range(min(row, len(lines)) - 1, -1, -1):
        stripped = lines[above].strip()
        if stripped and not stripped.startswith("#"):
            return above
    return None


def _colonless_above(lines: list[str], row: int) -> int | None:
    """The row of the content line above `row` when it is a bare word or words
    (no colon, not a list item or a flow collection): a key that lost its colon."""
    above = _content_above(lines, row)
    if above is None:
        return None
    stripped = lines[above].strip()
    if ":" in stripped or stripped.startswith(("-", "[", "{", "|", ">", "&", "*", "!", "%")):
        return None
    return above


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _has_value(line: str) -> bool:
    """Whether `line` is `key: value` with a value after the colon (not a comment)."""
    key, colon, value = line.partition(": ")
    return bool(colon and key.strip() and value.strip() and not value.strip().startswith("#"))
