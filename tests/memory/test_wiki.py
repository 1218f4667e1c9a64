from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bot.errors import InvalidWikiPageIdError, PageFormatError, WikiPathRefused
from bot.memory.page import Page, parse_page, render_page
from bot.memory.wiki import Wiki, migrated_block
from bot.soul.files import (
    INDEX_HEADING,
    MIGRATED_END,
    MIGRATED_END_QUOTED,
    MIGRATED_START,
    initial_index,
)

STAMP = "2026-11-07T03:00:00Z"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "memory"
    (folder / ".meta").mkdir(parents=True)
    return folder


@pytest.fixture
def wiki(root: Path) -> Wiki:
    return Wiki(root)


def put(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.tmp"))


# Pages: the file format


def test_a_page_renders_as_front_matter_then_its_body() -> None:
    page = Page(
        "entities/johnny",
        "entity",
        "Notes on johnny compiled from conversations",
        STAMP,
        ("trace:12", "trace:15"),
        "\nJohnny moved to [[entities/lisbon|Lisbon]].\n",
    )
    assert render_page(page) == (
        "---\n"
        "id: entities/johnny\n"
        "type: entity\n"
        "summary: Notes on johnny compiled from conversations\n"
        "updated: '2026-11-07T03:00:00Z'\n"
        "sources:\n"
        "- trace:12\n"
        "- trace:15\n"
        "---\n"
        "\nJohnny moved to [[entities/lisbon|Lisbon]].\n"
    )
    assert parse_page(render_page(page), page.id) == page


texts = st.text(max_size=60)


@given(
    summary=texts,
    kind=texts,
    updated=texts,
    sources=st.lists(texts, max_size=3),
    body=st.text(max_size=200),
)
@example(summary="a\x85b\u2028c", kind="\u2029", updated="2026-11-07", sources=["null"], body="")
@example(summary="yes", kind="- a", updated="", sources=["---", "a: b"], body="---\nx: 1\n---\n")
@example(summary="---\nid: x", kind="'", updated="\ufeff", sources=[""], body="\r\n")
def test_any_page_round_trips_exactly(
    summary: str, kind: str, updated: str, sources: list[str], body: str
) -> None:
    page = Page("concepts/notes", kind, summary, updated, tuple(sources), body)
    assert parse_page(render_page(page), page.id) == page


def test_fields_a_person_added_survive_a_rewrite() -> None:
    text = "---\nid: concepts/notes\nsummary: Mine\ntags: [a, b]\nowner: ana\n---\nBody\n"
    page = parse_page(text, "concepts/notes")
    assert page.extra == {"tags": ["a", "b"], "owner": "ana"}
    assert page.summary == "Mine"
    assert page.type == "concept"  # no type field: the folder's
    again = parse_page(render_page(page), page.id)
    assert again == page
    assert render_page(page).index("tags:") > render_page(page).index("updated:")


def test_a_page_without_front_matter_is_all_body() -> None:
    page = parse_page("# Log 2026-11-07\n\n10:00 user: hi\n", "log/2026-11-07")
    assert page == Page("log/2026-11-07", "log", "", "", (), "# Log 2026-11-07\n\n10:00 user: hi\n")


def test_the_path_gives_the_id_whatever_the_front_matter_says() -> None:
    page = parse_page("---\nid: entities/someone-else\n---\nx", "entities/johnny")
    assert page.id == "entities/johnny"
    assert "id: entities/johnny\n" in render_page(page)


def test_an_unquoted_time_in_the_front_matter_is_read_as_text() -> None:
    text = "---\nupdated: 2026-11-07T04:00:00+01:00\n---\n"
    assert parse_page(text, "concepts/notes").updated == STAMP
    assert parse_page("---\nupdated: 2026-11-07\n---\n", "a").updated == "2026-11-07"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("---\nsummary: a\n", "never closed"),
        ("---\nsummary: [a\n---\n", "invalid YAML"),
        ("---\nsummary: a\nsummary: b\n---\n", "given twice"),
        ("---\n- a\n- b\n---\n", "mapping"),
        ("---\nsources: trace:1\n---\n", "sources"),
        ("---\nsources: [1, 2]\n---\n", "sources"),
        ("---\nsummary: 42\n---\n", "summary"),
        ("---\ntype: [entity]\n---\n", "type"),
    ],
)
def test_front_matter_that_cannot_be_read_is_a_format_error(text: str, reason: str) -> None:
    with pytest.raises(PageFormatError, match=reason) as caught:
        parse_page(text, "concepts/notes")
    assert caught.value.page_id == "concepts/notes"


def test_parse_page_checks_the_id() -> None:
    with pytest.raises(InvalidWikiPageIdError):
        parse_page("x", "../SOUL")


def test_links_are_the_wikilink_targets() -> None:
    body = (
        "See [[entities/johnny]] and [[concepts/notes|the notes]], again [[entities/johnny]],"
        " [[ entities/ana ]], not [[../SOUL]] nor [[index]] nor [[]] nor [single]."
    )
    page = Page("concepts/x", "concept", "", body=body)
    assert page.links == ("entities/johnny", "concepts/notes", "entities/ana")


def test_a_new_page_is_named_from_its_id() -> None:
    page = Page.new("entities/johnny", body="Likes tea.", updated=STAMP, sources=["t:1"])
    assert page == Page(
        "entities/johnny",
        "entity",
        "Notes on johnny compiled from conversations",
        STAMP,
        ("t:1",),
        "Likes tea.",
    )
    with pytest.raises(InvalidWikiPageIdError):
        Page.new("../SOUL")


# Pages: the store


def test_write_then_read_a_page(wiki: Wiki, root: Path) -> None:
    page = Page.new("entities/johnny", body="Likes tea.\n", updated=STAMP)
    wiki.write_page(page)
    path = root / "entities" / "johnny.md"
    assert path.read_text(encoding="utf-8") == render_page(page)
    assert wiki.read_page("entities/johnny") == page
    assert leftovers(root) == []


def test_a_missing_page_reads_as_none(wiki: Wiki, root: Path) -> None:
    assert wiki.read_page("concepts/notes") is None
    (root / "entities").write_text("a file where a folder would be")
    assert wiki.read_page("entities/johnny") is None


def test_something_other_than_a_file_at_a_page_path_is_no_page(wiki: Wiki, root: Path) -> None:
    (root / "concepts").mkdir()
    os.mkfifo(root / "concepts" / "pipe.md")
    (root / "concepts" / "folder.md").mkdir()
    assert wiki.read_page("concepts/pipe") is None  # and it did not wait for a writer
    assert wiki.read_page("concepts/folder") is None


def test_a_page_that_is_not_utf8_is_a_format_error(wiki: Wiki, root: Path) -> None:
    (root / "concepts").mkdir()
    (root / "concepts" / "notes.md").write_bytes(b"---\nsummary: caf\xe9\n---\n")
    with pytest.raises(PageFormatError, match="UTF-8"):
        wiki.read_page("concepts/notes")


@pytest.mark.parametrize("page_id", ["../SOUL", "a/../../x", "index", "con:x", ".meta/index"])
def test_reads_and_writes_refuse_an_invalid_id(wiki: Wiki, tmp_path: Path, page_id: str) -> None:
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(InvalidWikiPageIdError):
        wiki.read_page(page_id)
    with pytest.raises(InvalidWikiPageIdError):
        wiki.write_page(Page(page_id, "concept", "x", body="pwned"))
    assert sorted(tmp_path.rglob("*")) == before


def test_a_page_that_is_a_link_is_read_and_rewritten_at_its_target(wiki: Wiki, root: Path) -> None:
    target = put(root, "shared/johnny.md", "---\nsummary: Shared notes\n---\nOld\n")
    (root / "entities").mkdir()
    link = root / "entities" / "johnny.md"
    link.symlink_to(target)
    page = wiki.read_page("entities/johnny")
    assert page is not None and page.summary == "Shared notes"
    wiki.write_page(Page("entities/johnny", "entity", "Shared notes", body="New\n"))
    assert link.is_symlink()
    assert wiki.read_page("entities/johnny") == Page(
        "entities/johnny", "entity", "Shared notes", body="New\n"
    )
    assert target.read_text(encoding="utf-8").endswith("---\nNew\n")


def test_a_rewrite_keeps_the_page_files_permissions(wiki: Wiki, root: Path) -> None:
    wiki.write_page(Page.new("concepts/notes"))
    path = root / "concepts" / "notes.md"
    path.chmod(0o600)
    wiki.write_page(Page.new("concepts/notes", body="more"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_file_where_a_folder_must_be_is_a_refused_path(wiki: Wiki, root: Path) -> None:
    (root / "entities").write_text("in the way")
    with pytest.raises(WikiPathRefused, match="a file is where a folder must be") as caught:
        wiki.write_page(Page.new("entities/bob"))
    assert caught.value.page_id == "entities/bob"
    assert caught.value.errno in (errno.EEXIST, errno.ENOTDIR)
    assert (root / "entities").read_text() == "in the way"


def test_a_file_deeper_where_a_folder_must_be_is_a_refused_path(wiki: Wiki, root: Path) -> None:
    (root / "entities").write_text("in the way")
    with pytest.raises(WikiPathRefused, match="a file is where a folder must be") as caught:
        wiki.write_page(Page.new("entities/people/bob"))
    assert caught.value.errno == errno.ENOTDIR


def test_a_folder_where_the_page_must_be_is_a_refused_path(wiki: Wiki, root: Path) -> None:
    (root / "entities" / "bob.md").mkdir(parents=True)
    with pytest.raises(WikiPathRefused) as caught:
        wiki.write_page(Page.new("entities/bob"))
    assert caught.value.errno == errno.EISDIR
    assert leftovers(root) == []


def test_a_name_too_long_is_a_refused_path(wiki: Wiki, root: Path, tmp_path: Path) -> None:
    (root / "entities").mkdir()
    (root / "entities" / "bob.md").symlink_to(root / ("b" * 300 + ".md"))
    with pytest.raises(WikiPathRefused) as caught:
        wiki.write_page(Page.new("entities/bob"))
    assert caught.value.errno == errno.ENAMETOOLONG
    assert leftovers(tmp_path) == []


def test_a_full_disk_is_a_plain_os_error(
    wiki: Wiki, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wiki.write_page(Page.new("concepts/notes", body="kept"))
    before = (root / "concepts" / "notes.md").read_bytes()

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError) as caught:
        wiki.write_page(Page.new("concepts/notes", body="lost"))
    monkeypatch.undo()
    assert not isinstance(caught.value, WikiPathRefused)
    assert caught.value.errno == errno.ENOSPC
    assert (root / "concepts" / "notes.md").read_bytes() == before
    assert leftovers(root) == []


# Listing


def test_list_pages_takes_every_file_whose_path_makes_a_valid_id(
    wiki: Wiki, root: Path, tmp_path: Path
) -> None:
    page = "---\nsummary: s\n---\nbody\n"
    for rel in [
        "entities/johnny.md",
        "entities/index.md",
        "concepts/notes.md",
        "log/2026-11-07.md",
        "top.md",
        "index.md",  # the catalog
        "INDEX.md",  # `index` in another case
        ".meta/x.md",
        ".store/y.md",
        "concepts/.hidden.md",
        "concepts/.drafts/z.md",
        "concepts/trailing .md",
        "concepts/dot..md",
        "concepts/notes.txt",
        "concepts/README",
    ]:
        put(root, rel, page)
    (root / "concepts" / "folder.md").mkdir()
    os.mkfifo(root / "concepts" / "pipe.md")
    put(root, ".shared/cities/lisbon.md", page)
    (root / "shared").symlink_to(root / ".shared", target_is_directory=True)
    (root / "concepts" / "loop").symlink_to(root, target_is_directory=True)
    (root / "concepts" / "dangling.md").symlink_to(tmp_path / "nowhere.md")
    ids = [p.id for p in wiki.list_pages()]
    assert ids == [
        "concepts/notes",
        "entities/index",
        "entities/johnny",
        "log/2026-11-07",
        "shared/cities/lisbon",
        "top",
    ]


def test_list_pages_of_a_missing_folder_is_empty(tmp_path: Path) -> None:
    assert Wiki(tmp_path / "none").list_pages() == []


def test_a_page_that_does_not_parse_is_left_out_of_the_list(wiki: Wiki, root: Path) -> None:
    put(root, "concepts/broken.md", "---\nsummary: [\n---\n")
    put(root, "concepts/notes.md", "fine")
    assert [p.id for p in wiki.list_pages()] == ["concepts/notes"]


# The catalog


def test_an_empty_wiki_has_the_heading_alone(wiki: Wiki, root: Path) -> None:
    assert wiki.write_catalog() == INDEX_HEADING + "\n"
    assert (root / "index.md").read_text() == INDEX_HEADING + "\n"


def test_the_catalog_has_a_section_per_kind_and_a_line_per_page(wiki: Wiki, root: Path) -> None:
    wiki.write_page(Page.new("concepts/notes"))
    wiki.write_page(Page.new("entities/johnny"))
    wiki.write_page(Page.new("entities/ana"))
    wiki.write_page(Page("travel", "concept", "Trips\nand  plans"))
    wiki.append_log("2026-11-07", ["03:00 user: hi"])
    put(root, "concepts/bare.md", "no front matter, so no summary")
    put(root, "concepts/broken.md", "---\nsummary: [\n---\n")
    expected = (
        "# Memory Index\n"
        "\n"
        "## Entities\n"
        "\n"
        "- [[entities/ana]]: Notes on ana compiled from conversations\n"
        "- [[entities/johnny]]: Notes on johnny compiled from conversations\n"
        "\n"
        "## Concepts\n"
        "\n"
        "- [[concepts/bare]]: Notes on bare compiled from conversations\n"
        "- [[concepts/broken]]: Notes on broken compiled from conversations\n"
        "- [[concepts/notes]]: Notes compiled from conversations\n"
        "- [[travel]]: Trips and plans\n"
        "\n"
        "## Logs\n"
        "\n"
        "- [[log/2026-11-07]]: Conversation log of 2026-11-07\n"
    )
    assert wiki.write_catalog() == expected
    assert (root / "index.md").read_text(encoding="utf-8") == expected
    assert leftovers(root) == []


def test_a_summary_set_by_a_person_reaches_the_catalog(wiki: Wiki, root: Path) -> None:
    wiki.write_page(Page.new("concepts/notes", body="Body\n"))
    assert "- [[concepts/notes]]: Notes compiled from conversations\n" in wiki.write_catalog()
    path = root / "concepts" / "notes.md"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("Notes compiled from conversations", "What Ana told me"))
    catalog = wiki.write_catalog()
    assert "- [[concepts/notes]]: What Ana told me\n" in catalog
    assert "Notes compiled" not in catalog


def test_a_line_edited_in_the_index_is_replaced_by_the_page_summary(wiki: Wiki, root: Path) -> None:
    wiki.write_page(Page.new("concepts/notes"))
    wiki.write_catalog()
    index = root / "index.md"
    index.write_text(index.read_text().replace("Notes compiled", "I moved to Lisbon, notes"))
    assert "- [[concepts/notes]]: Notes compiled from conversations\n" in wiki.write_catalog()


def test_a_link_at_index_md_is_replaced_and_its_target_left_alone(
    wiki: Wiki, root: Path, tmp_path: Path
) -> None:
    target = put(tmp_path, "elsewhere.md", f"{INDEX_HEADING}\n\n{MIGRATED_START}\nsecret\n")
    (root / "index.md").symlink_to(target)
    wiki.write_page(Page.new("concepts/notes"))
    text = wiki.write_catalog()
    assert not (root / "index.md").is_symlink()
    assert (root / "index.md").read_text(encoding="utf-8") == text
    assert "secret" not in text  # the link was not read
    assert target.read_text() == f"{INDEX_HEADING}\n\n{MIGRATED_START}\nsecret\n"


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM, errno.EBUSY])
def test_a_refused_rename_writes_the_catalog_in_place(
    wiki: Wiki, root: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    index = root / "index.md"
    index.write_text(INDEX_HEADING + "\n\n- [[old]]: stale\n")
    inode = index.stat().st_ino
    wiki.write_page(Page.new("concepts/notes"))

    def refuse(src: object, dst: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "replace", refuse)
    text = wiki.write_catalog()
    monkeypatch.undo()
    assert index.read_text(encoding="utf-8") == text
    assert "[[concepts/notes]]" in text and "stale" not in text
    assert index.stat().st_ino == inode  # the same file: written in place
    assert leftovers(root) == []


def test_another_failed_rename_fails_the_catalog_write(
    wiki: Wiki, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = root / "index.md"
    index.write_text(INDEX_HEADING + "\n\n- [[old]]: stale\n")

    def broken(src: object, dst: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="Input/output"):
        wiki.write_catalog()
    monkeypatch.undo()
    assert index.read_text() == INDEX_HEADING + "\n\n- [[old]]: stale\n"
    assert leftovers(root) == []


def test_a_catalog_that_is_a_folder_is_left_alone(wiki: Wiki, root: Path) -> None:
    (root / "index.md").mkdir()
    put(root, "index.md/keep.txt", "kept")
    with pytest.raises(OSError, match="folder"):
        wiki.write_catalog()
    assert (root / "index.md" / "keep.txt").read_text() == "kept"
    assert leftovers(root) == []


def test_a_catalog_that_is_a_pipe_is_left_alone(wiki: Wiki, root: Path) -> None:
    os.mkfifo(root / "index.md")
    with pytest.raises(OSError, match="not a regular file"):
        wiki.write_catalog()
    assert stat.S_ISFIFO((root / "index.md").lstat().st_mode)


def test_a_catalog_that_is_not_utf8_is_left_alone(wiki: Wiki, root: Path) -> None:
    data = f"{INDEX_HEADING}\n\n{MIGRATED_START}\ncaf\xe9\n".encode("latin-1")
    (root / "index.md").write_bytes(data)
    with pytest.raises(OSError, match="UTF-8"):
        wiki.write_catalog()
    assert (root / "index.md").read_bytes() == data


def test_the_migrated_block_stays_above_the_catalog(wiki: Wiki, root: Path) -> None:
    legacy = f"Bug X reported 3x\nA quoted {MIGRATED_END} inside\n"
    (root / "index.md").write_text(initial_index(legacy), encoding="utf-8")
    wiki.write_page(Page.new("concepts/notes"))
    text = wiki.write_catalog()
    assert text == (
        f"{INDEX_HEADING}\n\n{MIGRATED_START}\nBug X reported 3x\n"
        f"A quoted {MIGRATED_END_QUOTED} inside\n{MIGRATED_END}\n\n"
        "## Concepts\n\n- [[concepts/notes]]: Notes compiled from conversations\n"
    )
    assert wiki.write_catalog() == text  # a second write keeps it as it is


def test_a_block_without_its_end_marker_gets_one(wiki: Wiki, root: Path) -> None:
    (root / "index.md").write_text(f"{INDEX_HEADING}\n\n{MIGRATED_START}\nOld notes\n\n")
    wiki.write_page(Page.new("entities/johnny"))
    text = wiki.write_catalog()
    assert text == (
        f"{INDEX_HEADING}\n\n{MIGRATED_START}\nOld notes\n{MIGRATED_END}\n\n"
        "## Entities\n\n- [[entities/johnny]]: Notes on johnny compiled from conversations\n"
    )
    assert wiki.write_catalog() == text


def test_a_start_marker_elsewhere_opens_no_block(wiki: Wiki, root: Path) -> None:
    (root / "index.md").write_text(f"{INDEX_HEADING}\n\nSome line\n{MIGRATED_START}\nx\n")
    wiki.write_page(Page("concepts/notes", "concept", f"Says {MIGRATED_START}"))
    text = wiki.write_catalog()
    assert text == (
        f"{INDEX_HEADING}\n\n## Concepts\n\n- [[concepts/notes]]: Says {MIGRATED_START}\n"
    )
    assert wiki.write_catalog() == text


@pytest.mark.parametrize(
    ("index", "block"),
    [
        (f"{MIGRATED_START}\na\n{MIGRATED_END}\nrest", f"{MIGRATED_START}\na\n{MIGRATED_END}"),
        (f"\n{INDEX_HEADING}\n\n\n{MIGRATED_START}\na", f"{MIGRATED_START}\na\n{MIGRATED_END}"),
        (f"{INDEX_HEADING}\n{INDEX_HEADING}\n{MIGRATED_START}\na\n", None),
        (f"{INDEX_HEADING}\n", None),
        ("", None),
    ],
)
def test_migrated_block(index: str, block: str | None) -> None:
    assert migrated_block(index) == block


def test_catalog_text_drops_the_end_marker(wiki: Wiki, root: Path) -> None:
    (root / "index.md").write_text(initial_index("Remember this\n"), encoding="utf-8")
    wiki.write_page(Page.new("concepts/notes"))
    written = wiki.write_catalog()
    text = wiki.catalog_text()
    assert text is not None
    assert MIGRATED_END not in text
    assert "Remember this" in text and "[[concepts/notes]]" in text
    assert text == written.replace(MIGRATED_END + "\n", "")


def test_catalog_text_is_none_when_missing_or_a_link(
    wiki: Wiki, root: Path, tmp_path: Path
) -> None:
    assert wiki.catalog_text() is None
    assert Wiki(tmp_path / "none").catalog_text() is None
    (root / "index.md").symlink_to(put(tmp_path, "other.md", "# Memory Index\n\nsecret\n"))
    assert wiki.catalog_text() is None


# .meta


def test_update_meta_stores_hashes_backlinks_and_the_watermark(wiki: Wiki, root: Path) -> None:
    wiki.write_page(Page.new("entities/johnny", body="Friend of [[entities/ana]]."))
    wiki.write_page(Page.new("entities/ana", body="Knows [[entities/johnny|J]], [[entities/ana]]"))
    wiki.write_page(Page.new("concepts/notes", body="[[entities/ana]] and [[entities/zed]]"))
    put(root, "concepts/broken.md", "---\nsummary: [\n---\n[[entities/ana]]")
    wiki.write_meta({"kept": True, "watermark": 3})
    wiki.update_meta(42)
    meta = json.loads((root / ".meta" / "index.json").read_text())
    files = ["concepts/broken", "concepts/notes", "entities/ana", "entities/johnny"]
    assert meta["hashes"] == {
        page_id: hashlib.sha256((root / f"{page_id}.md").read_bytes()).hexdigest()
        for page_id in files
    }
    assert meta["backlinks"] == {
        "entities/ana": ["concepts/notes", "entities/johnny"],
        "entities/johnny": ["entities/ana"],
        "entities/zed": ["concepts/notes"],
    }
    assert meta["watermark"] == 42
    assert meta["kept"] is True
    assert wiki.watermark() == 42
    assert wiki.read_meta() == meta
    assert leftovers(root) == []


def test_the_watermark_is_zero_when_none_is_stored(wiki: Wiki, root: Path) -> None:
    assert wiki.watermark() == 0
    (root / ".meta" / "index.json").write_text("{}\n")
    assert wiki.watermark() == 0
    assert wiki.read_meta() == {}


def test_meta_makes_its_folder(tmp_path: Path) -> None:
    wiki = Wiki(tmp_path / "private")
    wiki.update_meta(5)
    assert wiki.watermark() == 5


@pytest.mark.parametrize("text", ["{", "[1]", '{"watermark": "7"}', '{"watermark": -1}'])
def test_a_broken_meta_is_an_error_not_a_zero(wiki: Wiki, root: Path, text: str) -> None:
    (root / ".meta" / "index.json").write_text(text)
    with pytest.raises(ValueError):
        wiki.watermark()


def test_a_negative_watermark_is_refused(wiki: Wiki) -> None:
    with pytest.raises(ValueError):
        wiki.update_meta(-1)


# Daily logs


def test_a_log_is_created_with_its_heading_and_only_appended_to(wiki: Wiki, root: Path) -> None:
    wiki.append_log("2026-11-07", ["03:00 user: hi", "03:01 assistant: hello\nthere"])
    path = root / "log" / "2026-11-07.md"
    first = path.read_text(encoding="utf-8")
    assert first == "# Log 2026-11-07\n\n03:00 user: hi\n03:01 assistant: hello there\n"
    inode = path.stat().st_ino
    wiki.append_log("2026-11-07", ["04:00 user: # not a heading\r\nreally"])
    assert path.read_text(encoding="utf-8") == first + "04:00 user: # not a heading really\n"
    assert path.stat().st_ino == inode
    page = wiki.read_page("log/2026-11-07")
    assert page is not None and page.type == "log"


def test_a_log_edited_without_a_last_line_end_gets_one(wiki: Wiki, root: Path) -> None:
    put(root, "log/2026-11-07.md", "# Log 2026-11-07\n\nhand-written")
    wiki.append_log("2026-11-07", ["05:00 user: later"])
    assert (root / "log" / "2026-11-07.md").read_text() == (
        "# Log 2026-11-07\n\nhand-written\n05:00 user: later\n"
    )


def test_no_lines_write_no_log(wiki: Wiki, root: Path) -> None:
    wiki.append_log("2026-11-07", [])
    assert not (root / "log").exists()


@pytest.mark.parametrize("day", ["2026-13-01", "2026-11-7", "../x", "2026-11-07/..", "today"])
def test_a_log_day_must_be_a_date(wiki: Wiki, root: Path, day: str) -> None:
    with pytest.raises(ValueError):
        wiki.append_log(day, ["x"])
    assert not (root / "log").exists()


def test_a_file_where_the_log_folder_must_be_is_a_refused_path(wiki: Wiki, root: Path) -> None:
    (root / "log").write_text("in the way")
    with pytest.raises(WikiPathRefused):
        wiki.append_log("2026-11-07", ["x"])


def test_a_pipe_at_a_log_path_is_not_written(wiki: Wiki, root: Path) -> None:
    (root / "log").mkdir()
    os.mkfifo(root / "log" / "2026-11-07.md")
    with pytest.raises(OSError, match="not a regular file"):
        wiki.append_log("2026-11-07", ["x"])


def test_stale_temp_files_of_a_killed_write_are_removed(tmp_path: Path) -> None:
    wiki = Wiki(tmp_path / "memory")
    (wiki.root / "concepts").mkdir(parents=True)
    old = wiki.root / "concepts" / ".wiki-0123456789ab.tmp"
    fresh = wiki.root / ".wiki-ba9876543210.tmp"
    page = wiki.root / "concepts" / "notes.md"
    for path in (old, fresh, page):
        path.write_text("x")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    os.utime(page, (time.time() - 7200, time.time() - 7200))
    assert wiki.remove_stale_temps(older_than_s=3600) == 1
    assert not old.exists() and fresh.exists() and page.exists()


# Modes


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which a folder would be 0755 and a file 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def modes(top: Path) -> dict[str, int]:
    found = {str(p.relative_to(top.parent)): p.lstat().st_mode for p in top.rglob("*")}
    found[top.name] = top.lstat().st_mode
    return {name: stat.S_IMODE(mode) for name, mode in found.items()}


@pytest.mark.usefixtures("umask_022")
def test_a_private_wiki_is_made_private_whatever_the_umask(tmp_path: Path) -> None:
    data = tmp_path / "data"
    wiki = Wiki(data / "memory" / "lark" / "user" / "test" / "ann")
    wiki.write_page(Page.new("entities/johnny", body="Likes tea.\n"))
    wiki.append_log("2026-11-07", ["- 10:00 Ann: hello"])
    wiki.write_catalog()
    wiki.update_meta(3)
    made = modes(data)
    assert {"data/memory/lark/user/test/ann/log/2026-11-07.md",
            "data/memory/lark/user/test/ann/.meta/index.json"} <= set(made)  # fmt: skip
    for name, mode in made.items():
        folder = (tmp_path / name).is_dir()
        assert mode == (0o700 if folder else 0o600), name
