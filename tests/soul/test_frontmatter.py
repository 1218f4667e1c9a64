from __future__ import annotations

import pytest

from bot.errors import SoulLoadError
from bot.soul.frontmatter import split_front_matter


def test_yaml_block_gives_fields_and_body() -> None:
    head = split_front_matter("---\nname: Aria\nn: 1\n---\nBody line\n", "S")
    assert head.fields == {"name": "Aria", "n": 1}
    assert head.body == "Body line\n"
    assert head.engine is None


@pytest.mark.parametrize("opener", ["---yaml", "---yml", "--- yaml", "---   "])
def test_yaml_openers(opener: str) -> None:
    assert split_front_matter(f"{opener}\nname: A\n---\nB", "S").fields == {"name": "A"}


@pytest.mark.parametrize("engine", ["js", "javascript", "toml", "coffee"])
def test_other_engines_give_no_fields(engine: str) -> None:
    head = split_front_matter(f"---{engine}\nname = 'x'\n---\nBody", "S")
    assert head.fields == {}
    assert head.engine == engine
    assert head.body == "Body"


@pytest.mark.parametrize("text", ["No front matter\n---\n", "----\nname: A\n----\n", "", "--"])
def test_text_without_front_matter_is_all_body(text: str) -> None:
    head = split_front_matter(text, "S")
    assert head.fields == {}
    assert head.body == text


def test_empty_block_gives_no_fields() -> None:
    head = split_front_matter("---\n---\n---\nstill body", "S")
    assert head.fields == {}
    assert head.body == "---\nstill body"


def test_unclosed_block_is_an_error() -> None:
    with pytest.raises(SoulLoadError, match="S: the front matter opened on line 1 is never closed"):
        split_front_matter("---\nname: A\nbody", "S")


def test_yaml_syntax_error_names_the_file_line() -> None:
    text = "---\nname: A\nrole: [unclosed\nx: 1\n---\nbody"
    with pytest.raises(SoulLoadError) as info:
        split_front_matter(text, "ws/SOUL.md")
    message = str(info.value)
    assert message.startswith("ws/SOUL.md line ")
    line = int(message.split(" line ")[1].split(":")[0])
    assert line in (4, 5)  # the problem is found at `x: 1` (file line 4) or the close


@pytest.mark.parametrize(
    ("block", "kind"),
    [("- a\n- b", "a list"), ("just words", "a single value (str)"), ("42", "int")],
)
def test_front_matter_must_be_a_mapping(block: str, kind: str) -> None:
    with pytest.raises(SoulLoadError, match="must be a mapping of fields") as info:
        split_front_matter(f"---\n{block}\n---\nbody", "S")
    assert kind in str(info.value)


def test_safe_loader_refuses_python_tags() -> None:
    text = "---\nname: !!python/object/apply:os.system ['touch /tmp/pwned']\n---\n"
    with pytest.raises(SoulLoadError, match="invalid YAML"):
        split_front_matter(text, "S")


def test_a_field_given_twice_is_an_error() -> None:
    with pytest.raises(
        SoulLoadError,
        match="S line 3: invalid YAML in the front matter: the key 'name' is given twice",
    ):
        split_front_matter("---\nname: A\nname: B\n---\n", "S")
