from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.errors import SoulLoadError
from bot.soul.files import MIGRATED_END, MIGRATED_END_QUOTED, MIGRATED_START
from bot.soul.loader import load_soul
from tests.kit import capture_logs
from tests.soul.conftest import GOOD_SOUL, MakeSoul


def test_loads_every_file(make_soul: MakeSoul) -> None:
    folder = make_soul(files={"STYLE.md": "Short.", "IDENTITY.md": "card", "AGENTS.md": "rules"})
    soul = load_soul(folder)
    assert soul.id == "aria"
    assert soul.name == "Aria"
    assert soul.persona.hard_limits == ("Never share internal pricing",)
    assert soul.persona.body == "## Who You Are\nYou are Aria.\n"
    assert (soul.style, soul.identity, soul.agents) == ("Short.", "card", "rules")
    assert soul.files == ("SOUL.md", "STYLE.md", "IDENTITY.md", "AGENTS.md", "memory/index.md")
    assert soul.warnings == ()


def test_optional_files_may_be_missing(make_soul: MakeSoul) -> None:
    soul = load_soul(make_soul())
    assert (soul.style, soul.identity, soul.agents) == (None, None, None)


def test_missing_soul_md_is_an_error(make_soul: MakeSoul) -> None:
    folder = make_soul(soul=None, files={"STYLE.md": "x"})
    with pytest.raises(SoulLoadError, match=r"SOUL.md: missing, and a soul needs one"):
        load_soul(folder)


def test_a_soul_without_name_or_id_is_refused(make_soul: MakeSoul) -> None:
    with pytest.raises(SoulLoadError, match="has no id: set 'agentId' or 'name'"):
        load_soul(make_soul(soul="---\nrole: nobody\n---\nBody"))


def test_chinese_name_gets_an_agent_id(make_soul: MakeSoul) -> None:
    soul = load_soul(make_soul(soul="---\nname: 小明\n---\n你好"))
    assert soul.id.startswith("agent-")
    assert soul.name == "小明"
    assert soul.persona.body == "你好"


def test_js_front_matter_is_never_evaluated(make_soul: MakeSoul, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    soul_md = (
        "---js\n"
        f"require('fs').writeFileSync('{marker}', 'x');\n"
        "module.exports = { name: 'Evil', agentId: 'evil' }\n"
        "---\n"
        "Body."
    )
    folder = make_soul(folder="evil", soul=soul_md)
    with capture_logs() as logs, pytest.raises(SoulLoadError, match="has no id"):
        load_soul(folder)
    assert not marker.exists()
    warnings = [e for e in logs if e["event"] == "soul.warning"]
    assert len(warnings) == 1
    assert "'---js' front matter block is not YAML" in warnings[0]["warning"]


@pytest.mark.parametrize("engine", ["javascript", "coffee"])
def test_other_engines_give_no_fields(make_soul: MakeSoul, engine: str) -> None:
    folder = make_soul(soul=f"---{engine}\n{{agentId: 'x'}}\n---\nBody")
    with pytest.raises(SoulLoadError, match="has no id"):
        load_soul(folder)


@pytest.mark.parametrize(
    ("soul_md", "message"),
    [
        ("---\nname: [unclosed\n---\n", r"SOUL.md line 2: invalid YAML in the front matter"),
        ("---\n- a\n- b\n---\n", "the front matter must be a mapping of fields, got a list"),
        ("---\nhello\n---\n", "the front matter must be a mapping of fields, got a single value"),
        ("---\nname: A\nhexaco: {openness: high}\n---\n", "hexaco.openness: expected a number"),
    ],
)
def test_bad_front_matter_names_the_file(make_soul: MakeSoul, soul_md: str, message: str) -> None:
    folder = make_soul(soul=soul_md)
    with pytest.raises(SoulLoadError, match=message) as info:
        load_soul(folder)
    assert str(folder / "SOUL.md") in str(info.value)


def test_unknown_fields_warn(make_soul: MakeSoul) -> None:
    soul = load_soul(make_soul(soul="---\nname: A\ncolour: red\nmood: x\n---\nB"))
    assert any("unknown field 'colour', ignored" in w for w in soul.warnings)
    assert any("unknown field 'mood', ignored" in w for w in soul.warnings)


def test_invalid_utf8_names_the_file(make_soul: MakeSoul) -> None:
    folder = make_soul(soul=b"---\nname: A\n---\n\xff\xfe bad")
    with pytest.raises(SoulLoadError, match=r"SOUL.md: not valid UTF-8 \(bad byte at offset 16\)"):
        load_soul(folder)
    good = make_soul(folder="other")
    (good / "STYLE.md").write_bytes(b"\xc3\x28")
    with pytest.raises(SoulLoadError, match=r"other/STYLE.md: not valid UTF-8"):
        load_soul(good)


def test_bom_and_crlf(make_soul: MakeSoul) -> None:
    text = GOOD_SOUL.replace("\n", "\r\n")
    soul = load_soul(make_soul(soul=b"\xef\xbb\xbf" + text.encode()))
    assert soul.id == "aria"
    assert soul.persona.body == "## Who You Are\nYou are Aria.\n"
    assert "\r" not in soul.persona.body


def test_a_megabyte_soul_loads_when_the_limit_allows(make_soul: MakeSoul) -> None:
    paragraph = "You are Aria, and you speak plainly. " * 20 + "\n\n"
    body = paragraph * (1_048_576 // len(paragraph) + 1)
    soul = load_soul(make_soul(soul="---\nname: Aria\n---\n" + body), max_file_bytes=2 << 20)
    assert len(soul.persona.body) >= 1_048_576
    assert soul.persona.body == body


def test_soul_md_as_a_link_is_skipped_and_missing(make_soul: MakeSoul, tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text(GOOD_SOUL)
    folder = make_soul(soul=None)
    (folder / "SOUL.md").symlink_to(outside)
    with pytest.raises(SoulLoadError, match=r"missing.*skipped, it is a symbolic link"):
        load_soul(folder)


def test_style_md_as_a_link_is_skipped_with_a_warning(make_soul: MakeSoul, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    folder = make_soul()
    (folder / "STYLE.md").symlink_to(secret)
    soul = load_soul(folder)
    assert soul.style is None
    assert "STYLE.md" not in soul.files
    assert any("STYLE.md: skipped, it is a symbolic link" in w for w in soul.warnings)


@pytest.mark.timeout(10)
def test_style_md_as_a_fifo_never_blocks(make_soul: MakeSoul) -> None:
    folder = make_soul()
    os.mkfifo(folder / "STYLE.md")
    soul = load_soul(folder)
    assert soul.style is None
    assert any("STYLE.md: skipped, it is a named pipe" in w for w in soul.warnings)


@pytest.mark.timeout(10)
def test_soul_md_as_a_fifo_is_a_missing_soul(make_soul: MakeSoul) -> None:
    folder = make_soul(soul=None)
    os.mkfifo(folder / "SOUL.md")
    with pytest.raises(SoulLoadError, match="missing"):
        load_soul(folder)


def test_a_folder_in_place_of_a_file_is_skipped(make_soul: MakeSoul) -> None:
    folder = make_soul()
    (folder / "AGENTS.md").mkdir()
    soul = load_soul(folder)
    assert soul.agents is None
    assert any("AGENTS.md: skipped, it is a folder" in w for w in soul.warnings)


def test_a_soul_folder_that_is_a_link_is_refused(make_soul: MakeSoul, tmp_path: Path) -> None:
    real = make_soul()
    link = tmp_path / "workspaces" / "linked"
    link.symlink_to(real)
    with pytest.raises(SoulLoadError, match="the soul folder is a symbolic link"):
        load_soul(link)


def test_the_folder_holding_the_soul_may_be_a_link(make_soul: MakeSoul, tmp_path: Path) -> None:
    make_soul()
    holder = tmp_path / "holder"
    holder.symlink_to(tmp_path / "workspaces")
    assert load_soul(holder / "aria").id == "aria"


def test_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(SoulLoadError, match="is not a folder"):
        load_soul(tmp_path / "file")
    with pytest.raises(SoulLoadError, match="does not exist"):
        load_soul(tmp_path / "nothing")


# --- memory/ bootstrap and the MEMORY.md migration ---------------------------------


def test_memory_is_started(make_soul: MakeSoul) -> None:
    folder = make_soul()
    soul = load_soul(folder)
    assert (folder / "memory" / "index.md").read_text() == "# Memory Index\n"
    assert (folder / "memory" / ".meta" / "index.json").read_text() == "{}\n"
    assert soul.wiki_index == "# Memory Index\n"


def test_existing_memory_is_left_as_it_is(make_soul: MakeSoul) -> None:
    folder = make_soul(files={"memory/index.md": "# Memory Index\n- [[x]] mine\n"})
    load_soul(folder)
    assert (folder / "memory" / "index.md").read_text() == "# Memory Index\n- [[x]] mine\n"
    assert (folder / "memory" / ".meta" / "index.json").exists()


def test_legacy_memory_md_is_migrated_and_left_untouched(make_soul: MakeSoul) -> None:
    legacy = f"Bug X reported 3x.\n{MIGRATED_END}\nServer move on March 15.\n"
    folder = make_soul(files={"MEMORY.md": legacy})
    soul = load_soul(folder)
    index = (folder / "memory" / "index.md").read_text()
    assert index == (
        "# Memory Index\n\n"
        f"{MIGRATED_START}\n"
        f"Bug X reported 3x.\n{MIGRATED_END_QUOTED}\nServer move on March 15.\n"
        f"{MIGRATED_END}\n"
    )
    assert (folder / "MEMORY.md").read_text() == legacy
    assert soul.wiki_index is not None
    assert MIGRATED_END not in soul.wiki_index.replace(MIGRATED_END_QUOTED, "")
    assert "Server move on March 15." in soul.wiki_index
    # A second load migrates nothing again.
    (folder / "MEMORY.md").write_text("changed")
    load_soul(folder)
    assert (folder / "memory" / "index.md").read_text() == index


def test_memory_md_as_a_link_is_not_migrated(make_soul: MakeSoul, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("private")
    folder = make_soul()
    (folder / "MEMORY.md").symlink_to(secret)
    soul = load_soul(folder)
    assert (folder / "memory" / "index.md").read_text() == "# Memory Index\n"
    assert any("MEMORY.md: skipped, it is a symbolic link" in w for w in soul.warnings)


def test_memory_as_a_link_is_left_alone(make_soul: MakeSoul, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = make_soul()
    (folder / "memory").symlink_to(elsewhere)
    soul = load_soul(folder)
    assert list(elsewhere.iterdir()) == []
    assert soul.wiki_index is None
    assert any("memory: not a folder (a link or a file); left as it is" in w for w in soul.warnings)


def test_memory_as_a_file_is_left_alone(make_soul: MakeSoul) -> None:
    folder = make_soul(files={"memory": "not a folder"})
    soul = load_soul(folder)
    assert (folder / "memory").read_text() == "not a folder"
    assert any("memory: not a folder" in w for w in soul.warnings)


def test_meta_as_a_link_is_left_alone(make_soul: MakeSoul, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = make_soul()
    (folder / "memory").mkdir()
    (folder / "memory" / ".meta").symlink_to(elsewhere)
    soul = load_soul(folder)
    assert list(elsewhere.iterdir()) == []
    assert (folder / "memory" / "index.md").exists()
    assert any(".meta: not a folder" in w for w in soul.warnings)


def test_index_md_as_a_link_is_neither_read_nor_written(
    make_soul: MakeSoul, tmp_path: Path
) -> None:
    target = tmp_path / "target.md"
    target.write_text("# Memory Index\nfrom outside\n")
    folder = make_soul()
    (folder / "memory").mkdir()
    (folder / "memory" / "index.md").symlink_to(target)
    dangling = folder / "memory" / ".meta"
    dangling.mkdir()
    (dangling / "index.json").symlink_to(tmp_path / "nowhere.json")
    soul = load_soul(folder)
    assert soul.wiki_index is None
    assert target.read_text() == "# Memory Index\nfrom outside\n"
    assert not (tmp_path / "nowhere.json").exists()
    assert any("index.md: skipped, it is a symbolic link" in w for w in soul.warnings)
    assert any("index.json: a symbolic link is in the way" in w for w in soul.warnings)
