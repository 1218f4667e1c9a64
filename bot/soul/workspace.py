"""`soulbot init`: a new soul workspace with every file of the 6-file layout."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from string import Template

from bot.errors import SoulbotError
from bot.soul import files
from bot.soul.persona import Persona, render_soul_markdown

_FOLDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

# Workspace path -> template file name.
_LAYOUT = {
    "SOUL.md": "SOUL.md",
    "STYLE.md": "STYLE.md",
    "IDENTITY.md": "IDENTITY.md",
    "AGENTS.md": "AGENTS.md",
    "examples/good-outputs.md": "good-outputs.md",
    "examples/bad-outputs.md": "bad-outputs.md",
}


def _template(name: str) -> Template:
    text = resources.files("bot.soul").joinpath("templates", name).read_text(encoding="utf-8")
    return Template(text)


def create_workspace(workspaces: Path, name: str, persona: Persona | None = None) -> Path:
    """Create `workspaces/name/` with SOUL.md (from `persona` when given, else a
    template whose front matter shows every field with a comment), STYLE.md,
    IDENTITY.md, AGENTS.md, examples/ and an empty memory/index.md.

    Raises SoulbotError for a bad name or a folder that already exists.
    """
    if not _FOLDER_NAME.match(name):
        raise SoulbotError(
            f"'{name}' cannot name a workspace: use at most 64 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    folder = workspaces / name
    if folder.exists() or folder.is_symlink():
        raise SoulbotError(f"{folder}: already exists; pick another name or remove it first")
    values = {
        "name": name,
        "name_yaml": json.dumps(name, ensure_ascii=False),
        "agent_id_yaml": json.dumps(name.lower()),
    }
    (folder / "examples").mkdir(parents=True)
    (folder / "memory" / ".meta").mkdir(parents=True)
    for target, template in _LAYOUT.items():
        (folder / target).write_text(_template(template).substitute(values), encoding="utf-8")
    if persona is not None:
        (folder / "SOUL.md").write_text(render_soul_markdown(persona), encoding="utf-8")
    (folder / "memory" / "index.md").write_text(files.initial_index(None), encoding="utf-8")
    (folder / "memory" / ".meta" / "index.json").write_text("{}\n", encoding="utf-8")
    return folder
