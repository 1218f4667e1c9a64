"""The terminal chat's attachments: saved to a new private file, its path printed."""

from __future__ import annotations

import io
import stat
from pathlib import Path

import pytest

from adapters.console_adapter import ConsoleAdapter
from bot.types import Attachment, Outbound


async def test_the_terminal_saves_an_export_privately(tmp_path: Path) -> None:
    out = io.StringIO()
    folder = tmp_path / "data" / "exports"
    console = ConsoleAdapter("Lark", stdin=io.StringIO(), stdout=out, files_dir=folder)
    file = Attachment("memory-lark-2026-10-14.md", b"# mine\n", "text/markdown")
    await console.send(Outbound("console", "me", "", attachment=file))
    await console.send(Outbound("console", "me", "again", attachment=file))
    first, second = folder / "memory-lark-2026-10-14.md", folder / "memory-lark-2026-10-14-1.md"
    assert out.getvalue().splitlines() == [
        f"Lark> (file saved: {first})",
        "Lark> again",
        f"      (file saved: {second})",
    ]
    assert first.read_bytes() == second.read_bytes() == b"# mine\n"
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) & 0o077 == 0


async def test_the_terminal_without_a_folder_refuses_a_file() -> None:
    console = ConsoleAdapter("Lark", stdin=io.StringIO(), stdout=io.StringIO())
    with pytest.raises(RuntimeError, match="no folder for files"):
        await console.send(Outbound("console", "me", "", attachment=Attachment("a.md", b"x")))
