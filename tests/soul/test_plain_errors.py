"""A YAML syntax error in a SOUL.md front matter or in soulbot.yaml said in plain
words at the line at fault, PyYAML's own words on a second line; an unknown
field or key close to a known one gets a did-you-mean."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot.config.load import parse_config
from bot.errors import ConfigError, SoulLoadError
from bot.soul.frontmatter import split_front_matter
from bot.soul.persona import Persona, persona_from_fields, unknown_field_warnings
from tests.kit import example_souls

REPO = Path(__file__).resolve().parents[2]
NO_COLON = "this line is not `key: value` (a missing colon?)"
TAB = "a tab: YAML indents with spaces"
INDENT = "the indentation does not match the lines above"

# (name, YAML text, the line at fault (1 = the text's first), plain words, PyYAML's)
CASES = [
    ("no-colon-then-nested", "name: Wren\nhexaco\n  openness: 0.5\nrole: friend\n", 2,
     NO_COLON, "could not find expected ':'"),
    ("no-colon-first", "hexaco\n  openness: 0.5\nname: Wren\n", 1,
     NO_COLON, "mapping values are not allowed here"),
    ("no-colon-document-start", "# who\nhexaco\n# traits\nname: Wren\n", 2,
     NO_COLON, "expected '<document start>', but found '<block mapping start>'"),
    ("no-colon-quoted-key", '"hexaco"\n  openness: 0.5\n', 1,
     NO_COLON, "expected '<document start>', but found '<block mapping start>'"),
    ("no-colon-nested", "name: Wren\nhexaco:\n  openness 0.5\n  honesty: 0.3\n", 3,
     NO_COLON, "mapping values are not allowed here"),
    ("no-colon-last", "name: Wren\nrole friend\n", 2, NO_COLON, "could not find expected ':'"),
    ("tab", "hexaco:\n  openness: 0.5\n\thonesty: 0.3\n", 3, TAB, "found character '\\t'"),
    ("tab-first-key", "hexaco:\n\topenness: 0.5\n", 2, TAB, "found character '\\t'"),
    ("indent-less", "hexaco:\n  openness: 0.5\n honesty: 0.3\n", 3,
     INDENT, "expected <block end>, but found '<block mapping start>'"),
    ("indent-more", "hexaco:\n  openness: 0.5\n    honesty: 0.3\n", 3,
     INDENT, "mapping values are not allowed here"),
    ("indent-under-a-value", "name: Wren\n  role: friend\n", 2,
     INDENT, "mapping values are not allowed here"),
]  # fmt: skip
IDS = [case[0] for case in CASES]


@pytest.mark.parametrize(("name", "text", "line", "plain", "own"), CASES, ids=IDS)
def test_front_matter_errors_in_plain_words(
    name: str, text: str, line: int, plain: str, own: str
) -> None:
    with pytest.raises(SoulLoadError) as caught:
        split_front_matter(f"---\n{text}---\nbody", "ws/SOUL.md")
    first, second = str(caught.value).split("\n")
    # The `---` is line 1 of the file: the text's line N is the file's N + 1.
    assert first.startswith(f"ws/SOUL.md line {line + 1}: invalid YAML in the front matter: ")
    assert plain in first
    assert second.startswith("  (the YAML parser: ") and own in second


@pytest.mark.parametrize(("name", "text", "line", "plain", "own"), CASES, ids=IDS)
def test_config_errors_in_plain_words(
    name: str, text: str, line: int, plain: str, own: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "soulbot.yaml", {})
    first, second = str(caught.value).split("\n")
    assert first == f"soulbot.yaml line {line}: invalid YAML: {first.split(': ', 2)[2]}"
    assert plain in first
    assert second.startswith("  (the YAML parser: ") and own in second


def test_the_missing_colon_line_is_the_one_named_not_pyyaml_s() -> None:
    """The brief's case: PyYAML names the line after the one without its colon."""
    text = "---\nname: Wren\nhexaco\n  openness: 0.5\n---\n"
    with pytest.raises(SoulLoadError) as caught:
        split_front_matter(text, "SOUL.md")
    assert str(caught.value).split("\n")[0] == (
        f"SOUL.md line 3: invalid YAML in the front matter: {NO_COLON}"
    )
    assert "at line 4, column" in str(caught.value)  # PyYAML's line, kept below


def test_a_value_holding_colon_space_gets_a_hint() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("model:\n  name: a: b\n", "soulbot.yaml", {})
    assert str(caught.value).startswith(
        "soulbot.yaml line 2: invalid YAML: a value holding ': ' must be quoted"
    )


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("model:\n  max_tokens: [1\nbudget: {}\n", 3, "expected ',' or ']', but got ':'"),
        ("a: [\n", 2, "expected the node content"),
        ("name: &n Wren\n", 1, "an anchor (&n) is not allowed"),
    ],
)
def test_other_errors_keep_pyyaml_s_one_line(text: str, line: int, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "soulbot.yaml", {})
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"soulbot.yaml line {line}: invalid YAML: ")
    assert problem in message


def test_check_shows_the_plain_error_under_its_soul(tmp_path: Path) -> None:
    example_souls(tmp_path)
    shutil.copy(REPO / "deploy" / "soulbot.example.yaml", tmp_path / "soulbot.yaml")
    (tmp_path / "workspaces" / "bad").mkdir()
    (tmp_path / "workspaces" / "bad" / "SOUL.md").write_text(
        "---\nname: Bad\nhexaco\n  openness: 0.5\n---\nBody\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOULBOT_")}
    result = subprocess.run(
        [sys.executable, "-m", "bot", "check"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    errors = result.stdout.split("errors:")[1].strip().splitlines()
    assert errors[0] == (
        f"- workspaces/bad/SOUL.md line 3: invalid YAML in the front matter: {NO_COLON}"
    )
    assert errors[1].strip().startswith("(the YAML parser: could not find expected ':'")


def test_a_bad_config_is_said_in_plain_words_by_the_cli(tmp_path: Path) -> None:
    (tmp_path / "soulbot.yaml").write_text("model:\n\tname: x\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOULBOT_")}
    result = subprocess.run(
        [sys.executable, "-m", "bot", "check"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == f"error: soulbot.yaml line 2: invalid YAML: {TAB}"


# --- did you mean --------------------------------------------------------------------


def test_an_unknown_field_near_a_known_one_gets_a_did_you_mean() -> None:
    assert unknown_field_warnings(["name", "defaultMod", "colour"], "SOUL.md") == [
        "SOUL.md: unknown field 'colour', ignored",
        "SOUL.md: unknown field 'defaultMod' (did you mean 'defaultMood'?), ignored",
    ]
    assert unknown_field_warnings(["default_mood", "hexacco"], "S") == [
        "S: unknown field 'default_mood' (did you mean 'defaultMood'?), ignored",
        "S: unknown field 'hexacco' (did you mean 'hexaco'?), ignored",
    ]
    assert unknown_field_warnings(["name", "agentId"], "S") == []


def test_an_unknown_hexaco_trait_is_an_error_with_a_did_you_mean() -> None:
    with pytest.raises(SoulLoadError) as caught:
        persona_from_fields({"hexaco": {"opennes": 0.5}}, "", "SOUL.md")
    assert str(caught.value) == "SOUL.md: hexaco.opennes: unknown key (did you mean 'openness'?)"
    assert Persona.model_validate({"hexaco": {"openness": 0.5}}).hexaco is not None


def test_an_unknown_config_key_gets_a_did_you_mean() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("log_levl: info\nmodel:\n  max_token: 3\n", "soulbot.yaml", {})
    assert set(str(caught.value).splitlines()) == {
        "soulbot.yaml: log_levl: unknown key (did you mean 'log_level'?)",
        "soulbot.yaml: model.max_token: unknown key (did you mean 'max_tokens'?)",
    }
