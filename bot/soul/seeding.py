"""The example souls (`bot/soul/examples/`, shipped in the package) copied into a
workspaces folder that holds no soul yet.

The examples are never run where they are shipped: a soul's folder is written by
the bot (its shared wiki under `memory/`, the heartbeat's SOUL.md and its
backups), so a run from a checkout would change tracked files, and a package
may not be writable at all. The workspaces folder a config names is the
person's: git ignores `./workspaces`, and the examples are copied into it
when it holds no soul: a first run, an empty Docker volume, or a checkout from
before the examples moved here (whose soul folders lost their tracked SOUL.md
and kept what the bot wrote). A file that is there already is kept.
"""

from __future__ import annotations

import os
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

EXAMPLES = "examples"


def has_a_soul(workspaces: Path) -> bool:
    """Whether a folder directly under `workspaces` holds a SOUL.md (True, too,
    for a path that is there but is no folder: the registry says what is wrong)."""
    try:
        entries = list(os.scandir(workspaces))
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return True
    return any(
        not entry.name.startswith(".") and os.path.lexists(Path(entry.path) / "SOUL.md")
        for entry in entries
    )


def seed_examples(workspaces: Path, make: bool = True) -> list[str]:
    """Copy the example souls into `workspaces` when it holds no soul; returns the
    ids copied, in order (empty: nothing done). A missing folder is made only
    with `make` (a command that starts souls), else left for the caller to
    report: a `check` run from the wrong folder makes nothing there."""
    if has_a_soul(workspaces) or not (make or workspaces.is_dir()):
        return []
    shipped = resources.files("bot.soul").joinpath(EXAMPLES)
    souls = sorted((s for s in shipped.iterdir() if s.is_dir()), key=lambda s: s.name)
    for soul in souls:
        _copy(soul, workspaces / soul.name)
    return [soul.name for soul in souls]


def _copy(source: Traversable, target: Path) -> None:
    """`source`'s files under `target`, each only where no file is."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.is_dir():
            _copy(entry, target / entry.name)
            continue
        try:
            with (target / entry.name).open("xb") as out:
                out.write(entry.read_bytes())
        except FileExistsError:
            continue
