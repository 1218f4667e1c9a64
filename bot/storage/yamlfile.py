"""A safe YAML loader that refuses what a config or a front matter never needs.

PyYAML's safe loader keeps the last of two equal keys without a word; in a
config or a front matter that hides a mistake, so it is an error here. So are
anchors and aliases (`&name`, `*name`, the `<<` merge that uses them): an alias
shares a node, and a 600-byte file of aliases to aliases is gigabytes once
anything walks it as a tree (the config's `${ENV}` interpolation does). And so
is nesting deeper than MAX_DEPTH: the composer recurses, and a few thousand
brackets would end in RecursionError. Each refusal is a yaml.YAMLError with the
line it is on (`problem_mark`), like any other YAML error.
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


class _StrictLoader(yaml.SafeLoader):
    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        mark = cast(Mark, event.start_mark)
        if isinstance(event, yaml.AliasEvent):
            problem = f"an alias (*{event.anchor}) is not allowed: {_NO_ALIASES}"
            raise yaml.composer.ComposerError(None, None, problem, mark)
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            problem = f"an anchor (&{anchor}) is not allowed: {_NO_ALIASES}"
            raise yaml.composer.ComposerError(None, None, problem, mark)
        if self._depth >= MAX_DEPTH:
            problem = f"nested deeper than {MAX_DEPTH} levels"
            raise yaml.composer.ComposerError(None, None, problem, mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

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


def load_yaml(text: str) -> Any:
    """Parse YAML data (no Python tags, no anchors or aliases, no key given
    twice, at most MAX_DEPTH levels deep). Raises yaml.YAMLError."""
    return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
