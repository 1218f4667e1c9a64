"""The heartbeat's checks and edits of a SOUL.md text (docs/heartbeat.md), as pure functions.

`validate` turns the model's `save_soul` input into a `Reflection` or raises
`Rejected` with the reason; nothing is written for a rejected call. Every
field must be one line of plain text: no line break, control or format
character of any kind (categories Cc, Cf, Zl, Zp), so no answer can open a
line, a heading or a region of its own, or hide or reorder what it says.

`merge` applies a reflection to the text: a dated line at the top of
AUTOBIOGRAPHY (`- [YYYY-MM-DD HH:MM] reflection`), new facts at the end of
MEMORY's list (de-duplicated), new rules at the end of the list in CORE's rules
section (append only; both after the last item and its continuation lines),
and META's `version` (its last number up one), `last_updated` and
`update_count`. CORE outside the appended rules is checked by hash to be
byte-identical; a mismatch raises `Rejected` and nothing is written.
`fold_plan` / `apply_fold` fold the oldest entries into one `- [history] ...`
line; `start_epoch` clears the autobiography. Only `\\n` ends a line here, as in
`bot/soul/regions.py`.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.errors import Rejected
from bot.prompts import DEFAULT_EMPTY_PHRASES
from bot.soul.regions import (
    AUTOBIOGRAPHY,
    CORE,
    MEMORY,
    META,
    HeartbeatParams,
    Regions,
    meta_fields,
    parse_regions,
    set_meta,
    split_lines,
)

MAX_TEXT = 200
MAX_FACTS = 10
MAX_RULES = 3
MAX_OVERVIEW = 400
SAVE_SOUL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reflection": {
            "type": "string",
            "description": "One sentence, at most 200 characters, that names a concrete fact "
            "or moment from this conversation and what you make of it.",
        },
        "memory_updates": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "fact": {"type": "string", "description": "An objective fact, one line."},
                    "importance": {"type": "number", "minimum": 0, "maximum": 1},
                },
                "required": ["fact", "importance"],
            },
        },
        "rule_updates": {
            "type": "array",
            "items": {"type": "string"},
            "description": "New behaviour boundaries, only when the conversation showed one.",
        },
    },
    "required": ["reflection", "memory_updates", "rule_updates"],
}
_ENTRY = re.compile(r"^- \[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}|history)\] ")
_LIST_ITEM = re.compile(r"^\s*(?:(\d+)[.)]|[-*+])\s+")
_RULES_HEADING = re.compile(r"rule|准则|规则|guideline|boundar", re.IGNORECASE)
_FORGERY = re.compile(r"<!--|-->|SOUL_(?:META|CORE|MEMORY|AUTOBIOGRAPHY)")
# Control (\r \n \v \f \x1c-\x1e U+0085 ...), format (bidi controls, zero-width
# characters, U+FEFF ...), line separator U+2028, paragraph separator U+2029.
_REFUSED = frozenset({"Cc", "Cf", "Zl", "Zp"})


@dataclass(frozen=True)
class Reflection:
    """A checked `save_soul` input: facts at or above `min_importance` only."""

    text: str
    facts: tuple[str, ...]
    rules: tuple[str, ...]
    dropped_facts: int = 0


@dataclass(frozen=True)
class Changes:
    """What one write changed."""

    entries_added: int
    facts_added: int
    rules_added: int
    version: str


def _line(value: object, what: str, limit: int = MAX_TEXT) -> str:
    """`value` stripped, when it is one safe line of at most `limit` characters.

    Raises Rejected naming `what` and the problem: not text, empty, too long, a
    line break, control or format character (with its code point), a heading,
    a region marker or an HTML comment.
    """
    if not isinstance(value, str):
        raise Rejected(f"{what}: expected text, got {type(value).__name__}")
    text = value.strip()
    if not text:
        raise Rejected(f"{what}: empty")
    if len(text) > limit:
        raise Rejected(f"{what}: {len(text)} characters, the limit is {limit}")
    refused = next((c for c in text if unicodedata.category(c) in _REFUSED), None)
    if refused is not None:
        raise Rejected(f"{what}: a line break or control character (U+{ord(refused):04X})")
    if text.startswith("#"):
        raise Rejected(f"{what}: starts with '#' (a heading)")
    if _FORGERY.search(text):
        raise Rejected(f"{what}: holds a region marker or an HTML comment")
    return text


def _norm(text: str) -> str:
    return " ".join(text.casefold().split()).rstrip(".")


def validate(
    data: object, params: HeartbeatParams, empty_phrases: Sequence[str] = DEFAULT_EMPTY_PHRASES
) -> Reflection:
    """The checked reflection. Raises Rejected naming the first problem."""
    if data is None:  # what ModelClient.use_tool gives for an answer without the call
        raise Rejected(
            "the model answered without calling save_soul (or its call was cut at max_tokens)"
        )
    if not isinstance(data, dict):
        raise Rejected(f"the input is {type(data).__name__}, not an object")
    unknown = set(data) - {"reflection", "memory_updates", "rule_updates"}
    if unknown:
        raise Rejected(f"unknown fields: {', '.join(sorted(unknown))}")
    if "reflection" not in data:
        raise Rejected("reflection: missing")
    text = _line(data["reflection"], "reflection")
    if any(_norm(phrase) in _norm(text) for phrase in empty_phrases):
        raise Rejected("reflection: empty boilerplate, with no fact from the conversation")
    facts_in = data.get("memory_updates", [])
    if not isinstance(facts_in, list):
        raise Rejected(f"memory_updates: expected a list, got {type(facts_in).__name__}")
    if len(facts_in) > MAX_FACTS:
        raise Rejected(f"memory_updates: {len(facts_in)} items, the limit is {MAX_FACTS}")
    facts: list[str] = []
    dropped = 0
    for i, item in enumerate(facts_in):
        where = f"memory_updates[{i}]"
        if not isinstance(item, dict) or set(item) - {"fact", "importance"}:
            raise Rejected(f"{where}: expected an object with fact and importance")
        fact = _line(item.get("fact"), f"{where}.fact")
        importance = item.get("importance")
        if (
            isinstance(importance, bool)
            or not isinstance(importance, int | float)
            or not math.isfinite(importance)
            or not 0 <= importance <= 1
        ):
            raise Rejected(f"{where}.importance: expected a number from 0 to 1")
        if importance < params.min_importance:
            dropped += 1
        else:
            facts.append(fact)
    rules_in = data.get("rule_updates", [])
    if not isinstance(rules_in, list):
        raise Rejected(f"rule_updates: expected a list, got {type(rules_in).__name__}")
    if len(rules_in) > MAX_RULES:
        raise Rejected(f"rule_updates: {len(rules_in)} items, the limit is {MAX_RULES}")
    rules = tuple(_line(rule, f"rule_updates[{i}]") for i, rule in enumerate(rules_in))
    return Reflection(text, tuple(facts), rules, dropped)


# -- writing ----------------------------------------------------------------------------


def _regions(text: str) -> Regions:
    regions = parse_regions(text)
    if regions is None:
        raise Rejected("SOUL.md has no regions: it is never written")
    return regions


def _insert_at(lines: list[str], index: int, new: list[str]) -> list[int]:
    """Insert `new` lines (without line ends) before `index`; returns their
    positions. A previous line without a line end gets none added: the new
    line carries it, so removing the new lines gives the old text back."""
    positions = []
    for offset, text in enumerate(new):
        at = index + offset
        if at > 0 and not lines[at - 1].endswith("\n"):
            lines.insert(at, "\n" + text)
        else:
            lines.insert(at, text + "\n")
        positions.append(at)
    return positions


def _after_heading(lines: list[str]) -> int:
    """Where a first list item goes: after the first heading, else after
    leading blank lines."""
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            return i + 1
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    return i


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _top_items(lines: list[str], start: int, end: int) -> list[int]:
    """The list items of `lines[start:end]` at the outermost indent (a nested
    item is a part of the item above it)."""
    items = [i for i in range(start, end) if _LIST_ITEM.match(lines[i])]
    top = min((_indent(lines[i]) for i in items), default=0)
    return [i for i in items if _indent(lines[i]) == top]


def _item_end(lines: list[str], item: int, end: int) -> int:
    """The index after the list item at `item` and its continuation lines: the
    lines right after it up to a blank line or a heading, and after blank lines
    those indented as far as its text (a paragraph or list inside the item).
    The blank lines after the item stay after it."""
    content = len(lines[item]) - len(_LIST_ITEM.sub("", lines[item], count=1))
    last = item
    for i in range(item + 1, end):
        line = lines[i]
        if not line.strip():
            continue
        if line.lstrip().startswith("#") or (i > last + 1 and _indent(line) < content):
            break
        last = i
    return last + 1


def _add_entry(body: str, line: str) -> str:
    lines = split_lines(body)
    first = next((i for i, text in enumerate(lines) if _ENTRY.match(text)), None)
    _insert_at(lines, _after_heading(lines) if first is None else first, [line])
    return "".join(lines)


def _add_facts(body: str, facts: Sequence[str]) -> tuple[str, int]:
    lines = split_lines(body)
    seen = {_norm(_LIST_ITEM.sub("", text)) for text in lines if _LIST_ITEM.match(text)}
    new = []
    for fact in facts:
        if _norm(fact) not in seen:
            seen.add(_norm(fact))
            new.append(f"- {fact}")
    items = _top_items(lines, 0, len(lines))
    at = _item_end(lines, items[-1], len(lines)) if items else _after_heading(lines)
    _insert_at(lines, at, new)
    return "".join(lines), len(new)


def _add_rules(core: str, rules: Sequence[str]) -> tuple[str, int]:
    """CORE with `rules` appended to its rules section's list; only the new
    lines differ (checked by hash). No rules section: nothing is added."""
    lines = split_lines(core)
    heading = next(
        (i for i, t in enumerate(lines) if t.lstrip().startswith("#") and _RULES_HEADING.search(t)),
        None,
    )
    if heading is None or not rules:
        return core, 0
    level = len(lines[heading].lstrip()) - len(lines[heading].lstrip().lstrip("#"))
    end = len(lines)
    for i in range(heading + 1, len(lines)):
        stripped = lines[i].lstrip()
        if stripped.startswith("#") and len(stripped) - len(stripped.lstrip("#")) <= level:
            end = i
            break
    items = _top_items(lines, heading + 1, end)
    seen = {_norm(_LIST_ITEM.sub("", t)) for t in lines[heading + 1 : end] if _LIST_ITEM.match(t)}
    numbers = [int(m.group(1)) for i in items if (m := _LIST_ITEM.match(lines[i])) and m.group(1)]
    new = []
    for rule in rules:
        if _norm(rule) in seen:
            continue
        seen.add(_norm(rule))
        if numbers:
            numbers.append(numbers[-1] + 1)
            new.append(f"{numbers[-1]}. {rule}")
        else:
            new.append(f"- {rule}")
    positions = _insert_at(lines, _item_end(lines, items[-1], end) if items else heading + 1, new)
    kept = "".join(t for i, t in enumerate(lines) if i not in set(positions))
    if hashlib.sha256(kept.encode()).digest() != hashlib.sha256(core.encode()).digest():
        raise Rejected("SOUL_CORE would change outside the appended rules")
    return "".join(lines), len(new)


def bump_version(version: str | None) -> str:
    """The version with its last number up one ("0.3.0" -> "0.3.1"); "0.1.0" when
    there is none; ".1" appended when it ends in no number."""
    if not version:
        return "0.1.0"
    match = re.search(r"(\d+)$", version)
    if match is None:
        return version + ".1"
    return version[: match.start()] + str(int(match.group(1)) + 1)


def _stamp(regions: Regions, now: datetime, extra: dict[str, str] | None = None) -> str:
    """Move META's version, last_updated and update_count; returns the version."""
    body = regions.get(META)
    if body is None:
        return ""
    fields = meta_fields(body)
    count = fields.get("update_count", "0")
    version = bump_version(fields.get("version"))
    values = {
        "version": version,
        "last_updated": now.strftime("%Y-%m-%d %H:%M"),
        "update_count": str(int(count) + 1 if count.isdigit() else 1),
        **(extra or {}),
    }
    regions.set(META, set_meta(body, values))
    return version


def merge(text: str, reflection: Reflection, now: datetime) -> tuple[str, Changes]:
    """`text` with `reflection` written in (see the module docstring).
    Raises Rejected when the file has no regions or CORE would change."""
    regions = _regions(text)
    entries = facts = rules = 0
    autobiography = regions.get(AUTOBIOGRAPHY)
    if autobiography is not None:
        stamp = now.strftime("%Y-%m-%d %H:%M")
        regions.set(AUTOBIOGRAPHY, _add_entry(autobiography, f"- [{stamp}] {reflection.text}"))
        entries = 1
    memory = regions.get(MEMORY)
    if memory is not None and reflection.facts:
        body, facts = _add_facts(memory, reflection.facts)
        regions.set(MEMORY, body)
    core = regions.get(CORE)
    if core is not None and reflection.rules:
        body, rules = _add_rules(core, reflection.rules)
        regions.set(CORE, body)
    version = _stamp(regions, now)
    return regions.render(), Changes(entries, facts, rules, version)


def entries_of(text: str) -> list[str]:
    """The autobiography's entry lines (dated and history), newest first."""
    regions = parse_regions(text)
    body = regions.get(AUTOBIOGRAPHY) if regions else None
    return [line.rstrip("\r") for line in (body or "").split("\n") if _ENTRY.match(line)]


def fold_plan(text: str, params: HeartbeatParams) -> list[str]:
    """The entry lines to fold into one history line ([] when within the limit):
    the history line so far and the oldest `summarize_oldest` dated entries."""
    lines = entries_of(text)
    dated = [line for line in lines if not line.startswith("- [history]")]
    if len(dated) <= params.max_autobiography_entries:
        return []
    history = [line for line in lines if line.startswith("- [history]")]
    return history + dated[-params.summarize_oldest :]


def apply_fold(text: str, folded: Sequence[str], overview: str, now: datetime) -> str | None:
    """`text` with the `folded` lines replaced by `- [history] overview` at the
    bottom of the entries; None when they are no longer all there (another
    writer folded first). Raises Rejected for an overview that is not one
    safe line of at most MAX_OVERVIEW characters."""
    overview = _line(overview, "overview", MAX_OVERVIEW)
    regions = _regions(text)
    body = regions.get(AUTOBIOGRAPHY) or ""
    lines = split_lines(body)
    wanted = Counter(folded)  # the same line may stand twice (same minute, same words)
    positions = []
    for i in reversed(range(len(lines))):
        line = lines[i].rstrip("\r\n")
        if wanted[line] > 0:
            wanted[line] -= 1
            positions.append(i)
    if len(positions) != len(folded):
        return None
    kept = [line for i, line in enumerate(lines) if i not in set(positions)]
    last = max((i for i, line in enumerate(kept) if _ENTRY.match(line)), default=None)
    at = last + 1 if last is not None else _after_heading(kept)
    _insert_at(kept, at, [f"- [history] {overview}"])
    regions.set(AUTOBIOGRAPHY, "".join(kept))
    _stamp(regions, now)
    return regions.render()


def start_epoch(text: str, now: datetime) -> tuple[str, int]:
    """`text` with the autobiography's entries removed and META's epoch up one;
    core and memory kept. Returns the text and the new epoch. Raises Rejected
    for a file without regions."""
    regions = _regions(text)
    body = regions.get(AUTOBIOGRAPHY)
    if body is not None:
        regions.set(AUTOBIOGRAPHY, "".join(
            line for line in split_lines(body) if not _ENTRY.match(line)
        ))  # fmt: skip
    meta = meta_fields(regions.get(META) or "")
    epoch = int(meta["epoch"]) + 1 if meta.get("epoch", "").isdigit() else 1
    _stamp(regions, now, {"epoch": str(epoch)})
    return regions.render(), epoch
