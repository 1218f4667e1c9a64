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
