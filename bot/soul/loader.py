"""Load a soul workspace folder into a `Soul`.

Reads SOUL.md (required), STYLE.md, IDENTITY.md, AGENTS.md and memory/index.md
(optional) through no link; starts memory/ (migrating a legacy MEMORY.md) when
it is missing; validates the front matter; derives the soul id. Warnings (a
skipped file, a `---js` block, unknown fields) are kept on the Soul and logged
as `soul.warning`. A file over the byte limit is refused before it is read.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import structlog

from bot.config.schema import MAX_PROMPT_TOKENS
from bot.errors import RegionError, SoulLoadError
from bot.soul import files
from bot.soul.frontmatter import split_front_matter
from bot.soul.persona import (
    FRONT_MATTER_FIELDS,
    Persona,
    persona_from_fields,
    soul_id,
    unknown_field_warnings,
)
from bot.soul.regions import (
    META,
    HeartbeatParams,
    Regions,
    meta_fields,
    parse_regions,
    strip_markers,
)
from bot.storage.files import read_text

log = structlog.get_logger(__name__)

# The byte limit of a soul file, per token of `souls.max_prompt_tokens`: tokens are
# estimated at 4 characters, and a character is at most 4 bytes in UTF-8, so no file
# within the token limit is over 16 bytes a token. The byte limit never refuses what
# the token limit would take, and 100 MB is never read (320 KB by default).
BYTES_PER_TOKEN = 16


@dataclass(frozen=True)
class Soul:
    """A loaded soul: its persona, the companion files and the memory index.

    `wiki_index` is memory/index.md without the migration end marker; `files`
    lists the workspace files that were read; `version` is the first 8 hex
    digits of a sha256 over what was read, so two loads of unchanged files
    have the same version. `heartbeat` is set when SOUL.md has regions (a
    self-writing SOUL.md, docs/heartbeat.md).
    """

    id: str
    folder: Path
    persona: Persona
    style: str | None
    identity: str | None
    agents: str | None
    wiki_index: str | None
    files: tuple[str, ...]
    warnings: tuple[str, ...]
    version: str = ""
    heartbeat: HeartbeatParams | None = None

    @property
    def name(self) -> str:
        return self.persona.name or self.id


def _index_for_prompt(text: str | None) -> str | None:
    if text is None:
        return None
    lines = [line for line in text.split("\n") if line.strip() != files.MIGRATED_END]
    return "\n".join(lines)


def parse_soul_text(text: str, source: str, warnings: list[str]) -> Persona:
    """The Persona of a SOUL.md text; `source` names it in errors and warnings.

    Raises SoulLoadError for bad front matter.
    """
    head = split_front_matter(text, source)
    if head.engine is not None:
        warnings.append(
            f"{source}: a '---{head.engine}' front matter block is not YAML; "
            "it gives no fields and is never evaluated"
        )
    warnings.extend(unknown_field_warnings(head.fields, source))
    known = {k: v for k, v in head.fields.items() if k in FRONT_MATTER_FIELDS}
    regions = _regions(text, source)
    if regions is not None and "name" not in known and "agentId" not in known:
        name = meta_fields(regions.get(META) or "").get("name")
        if name:  # a seed-style SOUL.md names itself in META only
            known["name"] = name
    return persona_from_fields(known, strip_markers(head.body), source)


def _regions(body: str, source: str) -> Regions | None:
    try:
        return parse_regions(body)
    except RegionError as exc:
        raise SoulLoadError(f"{source}: {exc}") from None


def heartbeat_params(text: str, source: str) -> HeartbeatParams | None:
    """The heartbeat's parameters of a SOUL.md text; None without regions.
    Raises SoulLoadError for bad regions or META values."""
    regions = _regions(text, source)
    if regions is None:
        return None
    try:
        return HeartbeatParams.from_meta(meta_fields(regions.get(META) or ""))
    except RegionError as exc:
        raise SoulLoadError(f"{source}: {exc}") from None


def _refuse_large(dir_fd: int, name: str, where: Path, max_bytes: int) -> None:
    """Raise SoulLoadError when the regular file `name` is over `max_bytes`;
    anything else (absent, a link, unreadable) is left to `read_text`."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISREG(info.st_mode) and info.st_size > max_bytes:
        raise SoulLoadError(
            f"{where}: {info.st_size:,} bytes, over the {max_bytes:,}-byte limit of a soul file "
            f"({BYTES_PER_TOKEN} bytes a token of souls.max_prompt_tokens); it was not read"
        )


def _read(dir_fd: int, name: str, where: Path, warnings: list[str], max_bytes: int) -> str | None:
    _refuse_large(dir_fd, name, where, max_bytes)
    return read_text(dir_fd, name, where, warnings)


def load_soul(folder: Path, max_file_bytes: int = MAX_PROMPT_TOKENS * BYTES_PER_TOKEN) -> Soul:
    """Load the soul in `folder`; SOUL.md, STYLE.md, IDENTITY.md and AGENTS.md
    over `max_file_bytes` are refused unread. Raises SoulLoadError naming the
    file and field."""
    warnings: list[str] = []
    dir_fd = files.open_folder(folder)
    try:
        soul_md = folder / "SOUL.md"
        text = _read(dir_fd, "SOUL.md", soul_md, warnings, max_file_bytes)
        if text is None:
            reasons = "; ".join(warnings)
            raise SoulLoadError(
                f"{soul_md}: missing, and a soul needs one" + (f" ({reasons})" if reasons else "")
            )
        persona = parse_soul_text(text, str(soul_md), warnings)
        heartbeat = heartbeat_params(text, str(soul_md))
        found = ["SOUL.md"]
        companions: dict[str, str | None] = {}
        for name in ("STYLE.md", "IDENTITY.md", "AGENTS.md"):
            companions[name] = _read(dir_fd, name, folder / name, warnings, max_file_bytes)
            if companions[name] is not None:
                found.append(name)
        files.ensure_memory(dir_fd, folder, warnings)
        index = files.read_index(dir_fd, folder, warnings)
        if index is not None:
            found.append("memory/index.md")
    finally:
        os.close(dir_fd)
    for warning in warnings:
        log.warning("soul.warning", path=str(folder), warning=warning)
    ident = soul_id(persona)
    if ident is None:
        raise SoulLoadError(
            f"{soul_md}: the soul has no id: set 'agentId' or 'name' in a YAML front matter"
        )
    return Soul(
        id=ident,
        folder=folder,
        persona=persona,
        style=companions["STYLE.md"],
        identity=companions["IDENTITY.md"],
        agents=companions["AGENTS.md"],
        wiki_index=_index_for_prompt(index),
        files=tuple(found),
        warnings=tuple(warnings),
        version=_digest(text, *companions.values(), index),
        heartbeat=heartbeat,
    )


def _digest(*texts: str | None) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(b"\0" if text is None else b"\1" + text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:8]
