"""`soulbot init`: a new soul workspace with every file of the 6-file layout."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from string import Template

from bot.errors import SoulbotError
from bot.soul import files
from bot.soul.persona import Persona, render_soul_markdown, slugify, soul_id

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
    """Create `workspaces/ID/`, ID being the soul id the loader derives from
    `name` (its slug: `Zoë Ünal` -> `zoe-unal`), with SOUL.md (from `persona` when
    given, else a template named `name`, with `agentId: ID`, whose front matter
    shows every field with a comment), STYLE.md, IDENTITY.md, AGENTS.md,
    examples/ and an empty memory/index.md. Returns the folder.

    Raises SoulbotError for a name with no Latin letter or digit, or a folder
    that already exists.
    """
    if not slugify(name):
        raise SoulbotError(
            f"'{name}' cannot name a workspace: a soul's id and folder are made of its "
            "name's Latin letters and digits ('Zoë Ünal' -> zoe-unal), and it has none"
        )
    ident = soul_id(Persona(name=name))
    assert ident is not None  # a name with a slug has an id
    folder = workspaces / ident
    if folder.exists() or folder.is_symlink():
        raise SoulbotError(f"{folder}: already exists; pick another name or remove it first")
    values = {
        "name": name,
        "name_yaml": json.dumps(name, ensure_ascii=False),
        "agent_id_yaml": json.dumps(ident),
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
