"""Split a markdown file into its YAML front matter and its body.

The front matter is read as data with a safe YAML loader. A block whose opening
line names another engine (`---js`, `---javascript`, `---toml`, ...) gives no
fields and is never evaluated. A file whose first line is four or more dashes
has no front matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from bot.errors import SoulLoadError
from bot.storage.yamlfile import describe_error, load_yaml

_YAML_ENGINES = {"", "yaml", "yml"}


@dataclass(frozen=True)
class FrontMatter:
    """What a file's head holds: `fields` (a mapping) and the `body` after it.

    `engine` names a non-YAML block that was skipped, else is None.
    """

    fields: dict[str, Any]
    body: str
    engine: str | None = None


def split_front_matter(text: str, source: str) -> FrontMatter:
    """Split `text` (newlines already `\\n`) into fields and body.

    Raises SoulLoadError, naming `source` and the line, for a block that is
    never closed, for invalid YAML (a missing colon, a tab, a bad indentation in
    plain words: `describe_error`) and for front matter that is not a mapping.
    """
    first, sep, rest = text.partition("\n")
    if not first.startswith("---") or first.startswith("----"):
        return FrontMatter({}, text)
    engine = first[3:].strip().lower()
    lines = rest.split("\n") if sep else []
    try:
        close = next(i for i, line in enumerate(lines) if line.rstrip() == "---")
    except StopIteration:
        raise SoulLoadError(
            f"{source}: the front matter opened on line 1 is never closed by a '---' line"
        ) from None
    body = "\n".join(lines[close + 1 :])
    if engine not in _YAML_ENGINES:
        return FrontMatter({}, body, engine=engine)
    block = "\n".join(lines[:close])
    try:
        fields = load_yaml(block)
    except yaml.YAMLError as exc:
        line, problem = describe_error(exc, block, first_line=2)  # line 1 is the `---`
        where = f" line {line}" if line is not None else ""
        raise SoulLoadError(
            f"{source}{where}: invalid YAML in the front matter: {problem}"
        ) from None
    if fields is None:
        fields = {}
    if not isinstance(fields, dict):
        kind = "a list" if isinstance(fields, list) else f"a single value ({type(fields).__name__})"
        raise SoulLoadError(f"{source}: the front matter must be a mapping of fields, got {kind}")
    return FrontMatter({str(k): v for k, v in fields.items()}, body)
