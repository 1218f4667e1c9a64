"""SOUL.md regions (docs/heartbeat.md): the parts of a self-writing SOUL.md.

A region starts at a marker line, `<!-- SOUL_META -->`, `<!-- SOUL_CORE -->`,
`<!-- SOUL_MEMORY -->` or `<!-- SOUL_AUTOBIOGRAPHY -->` (alone on its line,
spaces around it allowed), and runs to the next marker line or the end of the
file. What comes before the first marker (the front matter, a title) is the
preamble. A SOUL.md without markers has no regions: no heartbeat, never written.
Each marker appears at most once. Only `\\n` ends a line (files are read with
`\\n` line ends): a line or paragraph separator, a form feed or a file
separator inside a line never starts a line, a marker or a META field.

META holds `- key: value` lines: `name`, `version`, `created`, `last_updated`,
`update_count`, `epoch` and the heartbeat's parameters, with defaults when
absent (`HeartbeatParams`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.errors import RegionError

META, CORE, MEMORY, AUTOBIOGRAPHY = "SOUL_META", "SOUL_CORE", "SOUL_MEMORY", "SOUL_AUTOBIOGRAPHY"
NAMES = (META, CORE, MEMORY, AUTOBIOGRAPHY)
_MARKER = re.compile(r"^[ \t]*<!--[ \t]*(SOUL_[A-Z]+)[ \t]*-->[ \t]*$")
_META_LINE = re.compile(r"^[-*]\s+([A-Za-z_][\w-]*)\s*:\s*(.*?)\s*$")


@dataclass
class Regions:
    """A SOUL.md cut at its markers: `preamble`, then (marker line, region
    name, body) in file order. `render()` gives the file back byte for byte."""

    preamble: str
    parts: list[tuple[str, str, str]]

    def get(self, name: str) -> str | None:
        return next((body for _, n, body in self.parts if n == name), None)

    def set(self, name: str, body: str) -> None:
        """Replace the body of region `name`. Raises KeyError when it is absent."""
        for i, (marker, n, _) in enumerate(self.parts):
            if n == name:
                self.parts[i] = (marker, n, body)
                return
        raise KeyError(name)

    def render(self) -> str:
        return self.preamble + "".join(marker + body for marker, _, body in self.parts)


def split_lines(text: str) -> list[str]:
    """The lines of `text`, each with its `\\n` (the last may have none); unlike
    `str.splitlines`, no other character ends a line."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def parse_regions(text: str) -> Regions | None:
    """The regions of a SOUL.md text; None when it has no marker.

    Raises RegionError for an unknown SOUL_ marker or one that appears twice.
    """
    lines = split_lines(text)
    starts: list[tuple[int, str]] = []
    for number, line in enumerate(lines):
        match = _MARKER.match(line.rstrip("\r\n"))
        if match is None:
            continue
        name = match.group(1)
        if name not in NAMES:
            raise RegionError(
                f"line {number + 1}: unknown region marker {name} "
                f"(the markers are {', '.join(NAMES)})"
            )
        if any(name == seen for _, seen in starts):
            raise RegionError(f"line {number + 1}: the {name} marker appears a second time")
        starts.append((number, name))
    if not starts:
        return None
    parts = []
    for index, (number, name) in enumerate(starts):
        end = starts[index + 1][0] if index + 1 < len(starts) else len(lines)
        parts.append((lines[number], name, "".join(lines[number + 1 : end])))
    return Regions("".join(lines[: starts[0][0]]), parts)


def _is_marker(line: str) -> bool:
    match = _MARKER.match(line.rstrip("\r\n"))
    return match is not None and match.group(1) in NAMES


def strip_markers(text: str) -> str:
    """`text` without its region marker lines (what the prompt shows)."""
    return "".join(line for line in split_lines(text) if not _is_marker(line))


def meta_fields(body: str) -> dict[str, str]:
    """The `- key: value` lines of a META body, in order (the first of a key wins)."""
    fields: dict[str, str] = {}
    for line in body.split("\n"):
        match = _META_LINE.match(line.strip())
        if match and match.group(1) not in fields:
            fields[match.group(1)] = match.group(2)
    return fields


def set_meta(body: str, values: dict[str, str]) -> str:
    """The META body with `values` set: a key's line is rewritten in place, a
    new key is added after the last `- key: value` line."""
    lines = split_lines(body)
    left = dict(values)
    last = -1
    for i, line in enumerate(lines):
        match = _META_LINE.match(line.strip())
        if match is None:
            continue
        last = i
        key = match.group(1)
        if key in left:
            ending = line[len(line.rstrip("\r\n")) :] or "\n"
            indent = line[: len(line) - len(line.lstrip())]
            lines[i] = f"{indent}- {key}: {left.pop(key)}{ending}"
    added = [f"- {key}: {value}\n" for key, value in left.items()]
    if last >= 0 and not lines[last].endswith("\n"):
        lines[last] += "\n"
    if last < 0:  # no field yet: after a leading blank line, if any
        last = 0 if lines and not lines[0].strip() else -1
    return "".join(lines[: last + 1] + added + lines[last + 1 :])


@dataclass(frozen=True)
class HeartbeatParams:
    """The heartbeat's parameters from META (docs/heartbeat.md)."""

    min_conversation_tokens: int = 50
    max_autobiography_entries: int = 10
    summarize_oldest: int = 5
    min_importance: float = 0.5

    @classmethod
    def from_meta(cls, fields: dict[str, str]) -> HeartbeatParams:
        """Raises RegionError naming a field that is not a number in range."""
        values: dict[str, int | float] = {}
        for key, kind, low, high in (
            ("min_conversation_tokens", int, 0, 1_000_000),
            ("max_autobiography_entries", int, 2, 1000),
            ("summarize_oldest", int, 2, 1000),
            ("min_importance", float, 0.0, 1.0),
        ):
            if key not in fields:
                continue
            try:
                value = kind(fields[key])
            except ValueError:
                raise RegionError(
                    f"SOUL_META: {key}: expected a number, got {fields[key]!r}"
                ) from None
            if not low <= value <= high:
                raise RegionError(f"SOUL_META: {key}: expected {low} to {high}, got {value}")
            values[key] = value
        params = cls(**values)  # type: ignore[arg-type]
        if params.summarize_oldest > params.max_autobiography_entries:
            raise RegionError(
                "SOUL_META: summarize_oldest must not be more than max_autobiography_entries"
            )
        return params
