from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bot.errors import InvalidWikiPageIdError
from bot.memory.pageid import (
    check_page_id,
    default_summary,
    is_wiki_page_id,
    page_path,
    page_type,
)

ID_512 = "/".join(["a" * 200, "b" * 200, "c" * 110])

VALID = [
    "concepts/notes",
    "entities/johnny",
    "log/2026-11-07",
    "entities/index",  # only the top-level `index` names the catalog
    "concepts/Index",
    "index/x",
    "x/INDEX",
    "indexes",
    "a",
    "a/b/c/d",
    "entities/john smith",
    "entities/Zoë",
    "entities/李雷",
    "concepts/🎉 party",
    "entities/a.b",
    "entities/a..b",
    "concepts/notes.md",
    "entities/o'brien",
    "#tag",
    "~",
    "%2e%2e/x",
    "a" * 200,
    "é" * 100,  # 200 bytes in UTF-8
    "€" * 66,  # 198 bytes
    "entities/" + "a" * 200,
    ID_512,
    "entities/a\u00a0b",  # a no-break space inside a name
]

INVALID = [
    ("", "empty"),
    ("../SOUL", "starts with a dot"),
    ("a/../../x", "starts with a dot"),
    ("..", "starts with a dot"),
    (".", "starts with a dot"),
    (".hidden", "starts with a dot"),
    ("a/.b", "starts with a dot"),
    (".meta/index", "starts with a dot"),
    ("con:x", "colon"),
    ("C:/x", "colon"),
    ("entities/ johnny", "space"),
    ("entities/johnny ", "space"),
    (" a", "space"),
    ("a ", "space"),
    ("a./b", "ends with a dot"),
    ("a/b.", "ends with a dot"),
    ("index", "catalog"),
    ("INDEX", "catalog"),
    ("Index", "catalog"),
    ("iNdEx", "catalog"),
    ("a//b", "empty name"),
    ("/a", "empty name"),
    ("a/", "empty name"),
    ("/", "empty name"),
    ("/etc/passwd", "empty name"),
    ("a\\b", "backslash"),
    ("..\\SOUL", "backslash"),
    ("a\x00b", "control character (U+0000)"),
    ("a\tb", "control character (U+0009)"),
    ("a\nb", "control character (U+000A)"),
    ("a\x7fb", "control character (U+007F)"),
    ("a\x85b", "control character (U+0085)"),
    ('a"b', "double quote"),
    ("a*b", "asterisk"),
    ("a<b", "'<'"),
    ("a>b", "'>'"),
    ("a?b", "question mark"),
    ("a|b", "'|'"),
    ("a" * 201, "201 bytes"),
    ("entities/" + "é" * 101, "202 bytes"),  # 101 characters, 202 bytes
    ("€" * 67, "201 bytes"),
    (ID_512 + "c", "513 characters"),
    ("a\ud800b", "surrogate"),
]


def test_the_table_is_large_enough() -> None:
    assert len(VALID) + len(INVALID) >= 40
    assert len(ID_512) == 512


@pytest.mark.parametrize("page_id", VALID)
def test_valid_ids(page_id: str) -> None:
    assert is_wiki_page_id(page_id)
    check_page_id(page_id)


@pytest.mark.parametrize(("page_id", "reason"), INVALID)
def test_invalid_ids_name_the_rule(page_id: str, reason: str) -> None:
    assert not is_wiki_page_id(page_id)
    with pytest.raises(InvalidWikiPageIdError) as caught:
        check_page_id(page_id)
    assert reason in caught.value.reason
    assert caught.value.page_id == page_id


@pytest.mark.parametrize("value", [None, 5, b"concepts/notes", ["concepts", "notes"]])
def test_an_id_that_is_not_text_is_refused(value: object) -> None:
    assert not is_wiki_page_id(value)
    with pytest.raises(InvalidWikiPageIdError, match="not text"):
        check_page_id(value)


def test_page_path_is_the_id_with_md(tmp_path: Path) -> None:
    assert page_path(tmp_path, "entities/johnny") == tmp_path / "entities" / "johnny.md"
    assert page_path(tmp_path, "concepts/notes.md") == tmp_path / "concepts" / "notes.md.md"


@pytest.mark.parametrize(
    "page_id", ["../SOUL", "a/../../x", "/etc/passwd", "..", "../../etc/passwd", "index", ""]
)
def test_page_path_refuses_escapes_and_the_catalog(tmp_path: Path, page_id: str) -> None:
    with pytest.raises(InvalidWikiPageIdError):
        page_path(tmp_path / "memory", page_id)


def test_page_path_checks_the_named_path_not_where_a_link_leads(tmp_path: Path) -> None:
    outside = tmp_path / "shared"
    outside.mkdir()
    root = tmp_path / "memory"
    root.mkdir()
    (root / "entities").symlink_to(outside, target_is_directory=True)
    assert page_path(root, "entities/johnny") == root / "entities" / "johnny.md"


def test_page_path_works_with_a_relative_root_holding_dots() -> None:
    root = Path("workspaces/aria/../aria/memory")
    assert page_path(root, "concepts/notes") == root / "concepts" / "notes.md"


@pytest.mark.parametrize(
    ("page_id", "summary"),
    [
        ("concepts/notes", "Notes compiled from conversations"),
        ("entities/johnny", "Notes on johnny compiled from conversations"),
        ("entities/people/bob", "Notes on people/bob compiled from conversations"),
        ("concepts/travel", "Notes on travel compiled from conversations"),
        ("johnny", "Notes on johnny compiled from conversations"),
        ("log/2026-11-07", "Conversation log of 2026-11-07"),
    ],
)
def test_default_summaries_are_named_from_the_id(page_id: str, summary: str) -> None:
    assert default_summary(page_id) == summary


def test_default_summary_refuses_an_invalid_id() -> None:
    with pytest.raises(InvalidWikiPageIdError):
        default_summary("../SOUL")


@pytest.mark.parametrize(
    ("page_id", "kind"),
    [
        ("entities/johnny", "entity"),
        ("entities/people/bob", "entity"),
        ("log/2026-11-07", "log"),
        ("concepts/notes", "concept"),
        ("entities", "concept"),
        ("log", "concept"),
        ("notes", "concept"),
        ("other/x", "concept"),
    ],
)
def test_page_type_follows_the_folder(page_id: str, kind: str) -> None:
    assert page_type(page_id) == kind


ID_TEXT = st.text(
    alphabet=st.one_of(st.sampled_from('ab/. \\:|*?"<>\x00\tIiNnDdEeXx'), st.characters()),
    max_size=40,
)
ROOT = Path("/srv/soulbot/workspaces/aria/memory")


@given(ID_TEXT)
@example("entities/index")
@example("a/b")
def test_every_accepted_id_names_a_file_inside_the_root(page_id: str) -> None:
    if not is_wiki_page_id(page_id):
        with pytest.raises(InvalidWikiPageIdError):
            page_path(ROOT, page_id)
        return
    path = page_path(ROOT, page_id)
    named = os.path.normpath(path)
    assert named.startswith(str(ROOT) + os.sep)
    assert path.relative_to(ROOT).parts == tuple(f"{page_id}.md".split("/"))
    assert all(len(part.encode()) <= 255 for part in path.parts)
    assert path != ROOT / "index.md"
