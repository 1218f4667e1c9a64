"""A safe YAML loader that also refuses a key given twice in one mapping.

PyYAML's safe loader keeps the last of two equal keys without a word; in a
config or a front matter that hides a mistake, so it is an error here.
"""

from __future__ import annotations

from typing import Any

import yaml


class _StrictLoader(yaml.SafeLoader):
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
    """Parse YAML data (no Python tags). Raises yaml.YAMLError."""
    return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
