"""Links in a wiki: one that stays inside is followed, one that leads out is
neither read nor written through (shared wiki: out of the soul folder; private
wiki: out of its own folder). The wikis are the ones the bot builds (Scopes)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from bot.errors import WikiPathRefused
from bot.memory.page import Page
from bot.memory.scopes import Scopes
from bot.memory.wiki import Wiki
from bot.soul.registry import SoulRegistry
from bot.types import SHARED
from tests.kit import capture_logs

SECRET = "---\nsummary: Secret\n---\nthe launch code is 0000\n"
ANN = "user:test:ann"


def scopes(tmp_path: Path) -> Scopes:
    soul = tmp_path / "workspaces" / "lark"
    if not soul.exists():
        soul.mkdir(parents=True)
        (soul / "SOUL.md").write_text("---\nname: Lark\n---\nYou are Lark.\n")
    registry = SoulRegistry(tmp_path / "workspaces")
    registry.reload_all()
    return Scopes(tmp_path / "data", registry)


def make_wiki(tmp_path: Path, scope: str) -> Wiki:
    wiki = scopes(tmp_path).wiki("lark", scope)
    assert wiki is not None
    (wiki.root / ".meta").mkdir(parents=True, exist_ok=True)
    return wiki


@pytest.fixture(params=[SHARED, ANN])
def wiki(request: pytest.FixtureRequest, tmp_path: Path) -> Wiki:
    """The shared wiki of soul lark, then ann's private one."""
    return make_wiki(tmp_path, request.param)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside every soul folder and every wiki, with a page-like file."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.md").write_text(SECRET)
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def refused(logs: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(e["path"], e["target"]) for e in logs if e["event"] == "wiki.link_refused"]


def test_a_page_that_links_out_reads_as_absent_and_is_not_written(
    wiki: Wiki, outside: Path
) -> None:
    (wiki.root / "concepts").mkdir()
    link = wiki.root / "concepts" / "secret.md"
    link.symlink_to(outside / "secret.md")
    with capture_logs() as logs:
        assert wiki.read_page("concepts/secret") is None
    assert refused(logs) == [(str(link), str(outside / "secret.md"))]
    assert [e["log_level"] for e in logs] == ["warning"]
    with capture_logs() as logs, pytest.raises(WikiPathRefused, match="leads out") as caught:
        wiki.write_page(Page.new("concepts/secret", body="overwritten\n"))
    assert caught.value.page_id == "concepts/secret"
    assert refused(logs) == [(str(link), str(outside / "secret.md"))]
    assert (outside / "secret.md").read_text() == SECRET
    assert link.is_symlink()
    assert "concepts/secret" not in [p.id for p in wiki.list_pages()]
    assert "concepts/secret" not in wiki.write_catalog()


def test_a_linked_folder_that_leads_out_is_neither_read_nor_written(
    wiki: Wiki, outside: Path
) -> None:
    (outside / "johnny.md").write_text(SECRET)
    before = snapshot(outside)
    (wiki.root / "entities").symlink_to(outside, target_is_directory=True)
    with capture_logs() as logs:
        assert wiki.read_page("entities/johnny") is None
    assert refused(logs) == [(str(wiki.root / "entities"), str(outside))]
    with pytest.raises(WikiPathRefused):
        wiki.write_page(Page.new("entities/bob", body="new\n"))
    with pytest.raises(WikiPathRefused):
        wiki.write_page(Page.new("entities/johnny", body="overwritten\n"))
    assert snapshot(outside) == before  # no page, no temporary file
    with capture_logs() as logs:
        assert wiki.list_pages() == []
    assert refused(logs) == [(str(wiki.root / "entities"), str(outside))]
    assert "entities/johnny" not in wiki.write_catalog()
    wiki.update_meta(1)
    assert wiki.read_meta()["hashes"] == {}


def test_a_link_chain_that_ends_outside_is_refused(wiki: Wiki, outside: Path) -> None:
    (wiki.root / "hop").symlink_to(outside, target_is_directory=True)
    (wiki.root / "concepts").symlink_to(wiki.root / "hop", target_is_directory=True)
    assert wiki.read_page("concepts/secret") is None
    with pytest.raises(WikiPathRefused):
        wiki.write_page(Page.new("concepts/secret"))
    assert (outside / "secret.md").read_text() == SECRET


def test_a_link_inside_the_wiki_is_followed(wiki: Wiki) -> None:
    archive = wiki.root / "archive"
    archive.mkdir()
    (archive / "johnny.md").write_text("---\nsummary: Archived\n---\nOld\n")
    (wiki.root / "entities").mkdir()
    (wiki.root / "entities" / "johnny.md").symlink_to(archive / "johnny.md")
    (wiki.root / "people").symlink_to(archive, target_is_directory=True)
    page = wiki.read_page("entities/johnny")
    assert page is not None and page.summary == "Archived"
    through_folder = wiki.read_page("people/johnny")
    assert through_folder is not None and through_folder.body == "Old\n"
    wiki.write_page(Page("entities/johnny", "entity", "Archived", body="New\n"))
    assert (wiki.root / "entities" / "johnny.md").is_symlink()
    assert (archive / "johnny.md").read_text().endswith("---\nNew\n")
    wiki.write_page(Page.new("people/ana", body="Ana\n"))
    assert (archive / "ana.md").is_file()
    ids = [p.id for p in wiki.list_pages()]
    assert "entities/johnny" in ids
    assert len([i for i in ids if i.endswith("/ana")]) == 1  # a folder is listed once


def test_a_shared_wiki_follows_a_link_into_its_soul_folder(tmp_path: Path) -> None:
    wiki = make_wiki(tmp_path, SHARED)
    notes = wiki.root.parent / "notes"
    notes.mkdir()
    (notes / "bees.md").write_text("---\nsummary: Bees\n---\nHives\n")
    (wiki.root / "concepts").symlink_to(notes, target_is_directory=True)
    page = wiki.read_page("concepts/bees")
    assert page is not None and page.body == "Hives\n"
    wiki.write_page(Page.new("concepts/wasps", body="Nests\n"))
    assert (notes / "wasps.md").is_file()


def test_a_private_wiki_follows_no_link_out_of_its_own_folder(tmp_path: Path) -> None:
    bob = make_wiki(tmp_path, "user:test:bob")
    bob.write_page(Page.new("concepts/notes", body="Bob's bank pin is 4242\n"))
    ann = make_wiki(tmp_path, ANN)
    (ann.root / "concepts").symlink_to(bob.root / "concepts", target_is_directory=True)
    (ann.root / "soul.md").symlink_to(tmp_path / "workspaces" / "lark" / "SOUL.md")
    assert ann.read_page("concepts/notes") is None
    assert ann.read_page("soul") is None
    with pytest.raises(WikiPathRefused):
        ann.write_page(Page.new("concepts/notes", body="overwritten\n"))
    page = bob.read_page("concepts/notes")
    assert page is not None and "4242" in page.body
    assert "4242" not in ann.write_catalog()


def test_index_md_is_never_read_through_a_link(wiki: Wiki, outside: Path) -> None:
    (outside / "index.md").write_text("# Memory Index\n\nthe launch code is 0000\n")
    (wiki.root / "index.md").unlink(missing_ok=True)
    (wiki.root / "index.md").symlink_to(outside / "index.md")
    assert wiki.catalog_text() is None
    assert "0000" not in wiki.write_catalog()
    assert (outside / "index.md").read_text() == "# Memory Index\n\nthe launch code is 0000\n"


def test_a_meta_folder_that_leads_out_is_neither_read_nor_written(
    wiki: Wiki, outside: Path
) -> None:
    (outside / "meta").mkdir()
    (outside / "meta" / "index.json").write_text('{"watermark": 7}\n')
    shutil.rmtree(wiki.root / ".meta")
    (wiki.root / ".meta").symlink_to(outside / "meta", target_is_directory=True)
    with capture_logs() as logs, pytest.raises(WikiPathRefused):
        wiki.watermark()
    assert refused(logs) == [(str(wiki.root / ".meta"), str(outside / "meta"))]
    with pytest.raises(WikiPathRefused):
        wiki.write_meta({"watermark": 9})
    with pytest.raises(WikiPathRefused):
        wiki.mark_logged(9)
    assert json.loads((outside / "meta" / "index.json").read_text()) == {"watermark": 7}
    assert [p.name for p in (outside / "meta").iterdir()] == ["index.json"]


def test_a_meta_file_that_links_out_is_neither_read_nor_written(wiki: Wiki, outside: Path) -> None:
    (outside / "index.json").write_text('{"watermark": 7}\n')
    meta = wiki.root / ".meta" / "index.json"
    meta.unlink(missing_ok=True)
    meta.symlink_to(outside / "index.json")
    with pytest.raises(WikiPathRefused):
        wiki.read_meta()
    with pytest.raises(WikiPathRefused):
        wiki.update_meta(9)
    assert (outside / "index.json").read_text() == '{"watermark": 7}\n'


def test_a_daily_log_that_links_out_is_not_appended_to(wiki: Wiki, outside: Path) -> None:
    (outside / "diary.md").write_text("precious\n")
    (wiki.root / "log").mkdir()
    link = wiki.root / "log" / "2026-11-07.md"
    link.symlink_to(outside / "diary.md")
    with capture_logs() as logs, pytest.raises(WikiPathRefused) as caught:
        wiki.append_log("2026-11-07", ["- 10:00 Ann: hello"])
    assert caught.value.page_id == "log/2026-11-07"
    assert refused(logs) == [(str(link), str(outside / "diary.md"))]
    assert (outside / "diary.md").read_text() == "precious\n"
    assert "log/2026-11-07" not in [p.id for p in wiki.list_pages()]


def test_a_shared_memory_folder_that_is_a_link_out_is_refused(
    tmp_path: Path, outside: Path
) -> None:
    wiki = make_wiki(tmp_path, SHARED)
    shutil.rmtree(wiki.root)
    wiki.root.symlink_to(outside, target_is_directory=True)
    (outside / ".wiki-0.tmp").write_text("not ours")
    os.utime(outside / ".wiki-0.tmp", (0, 0))
    before = snapshot(outside)
    assert wiki.read_page("secret") is None
    assert wiki.list_pages() == []
    assert wiki.catalog_text() is None
    with pytest.raises(WikiPathRefused):
        wiki.write_page(Page.new("concepts/notes"))
    with pytest.raises(WikiPathRefused):
        wiki.write_catalog()
    with pytest.raises(WikiPathRefused):
        wiki.append_log("2026-11-07", ["- hello"])
    assert wiki.remove_stale_temps(older_than_s=0) == 0
    assert snapshot(outside) == before
    assert wiki.links_out() == [(wiki.root, str(outside))]


def test_links_out_lists_each_link_that_leads_out(tmp_path: Path, outside: Path) -> None:
    wiki = make_wiki(tmp_path, SHARED)
    soul = wiki.root.parent
    (outside / "backups").mkdir()
    (wiki.root / "concepts").mkdir()
    (wiki.root / "concepts" / "secret.md").symlink_to(outside / "secret.md")
    (wiki.root / "entities").symlink_to(outside, target_is_directory=True)
    (wiki.root / ".meta" / "backups").symlink_to(outside / "backups", target_is_directory=True)
    (wiki.root / "concepts" / "soul.md").symlink_to(soul / "SOUL.md")  # inside: fine
    (wiki.root / "concepts" / "self.md").symlink_to(wiki.root / "concepts" / "soul.md")
    (wiki.root / "loop").symlink_to(wiki.root, target_is_directory=True)
    assert wiki.links_out() == [
        (wiki.root / ".meta" / "backups", str(outside / "backups")),
        (wiki.root / "concepts" / "secret.md", str(outside / "secret.md")),
        (wiki.root / "entities", str(outside)),
    ]
    private = make_wiki(tmp_path, ANN)
    (private.root / "soul.md").symlink_to(soul / "SOUL.md")
    assert private.links_out() == [(private.root / "soul.md", str(soul / "SOUL.md"))]


def test_a_shared_wiki_keeps_the_umask_s_modes(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        wiki = make_wiki(tmp_path, SHARED)
        wiki.write_page(Page.new("entities/johnny", body="Likes tea.\n"))
        wiki.write_catalog()
    finally:
        os.umask(old)
    assert stat.S_IMODE((wiki.root / "entities").stat().st_mode) == 0o755
    assert stat.S_IMODE((wiki.root / "entities" / "johnny.md").stat().st_mode) == 0o644
    assert stat.S_IMODE((wiki.root / "index.md").stat().st_mode) == 0o644
