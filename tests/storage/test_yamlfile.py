"""The YAML loader: libyaml's speed where PyYAML has it, the pure loader's words."""

from __future__ import annotations

import pytest
import yaml

from bot.storage import yamlfile
from bot.storage.yamlfile import load_yaml

TEXTS = [
    "id: entities/ann\nsummary: 'Ann: a friend'\nupdated: 2026-10-14T12:00:00Z\n",
    "tags: [a, b, {c: d}]\nowner: ana\nn: 3\nok: true\nnothing: null\n",
    "sources:\n" + "".join(f"- '{n}'\n" for n in range(2000)),
    "text: |\n  line one\n  line two\n",
]
REFUSED = [
    ("a: &x 1\nb: *x\n", "anchor (&x) is not allowed"),
    ("a: 1\na: 2\n", "the key 'a' is given twice"),
    ("a: " + "[" * 60 + "]" * 60 + "\n", "nested deeper than 50 levels"),
    ("a: [unclosed\n", "expected ',' or ']'"),
]


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml")
@pytest.mark.parametrize("text", TEXTS)
def test_the_c_loader_reads_what_the_pure_loader_reads(text: str) -> None:
    assert load_yaml(text) == yaml.load(text, Loader=yamlfile._StrictLoader)


@pytest.mark.parametrize(("text", "problem"), REFUSED)
def test_both_paths_refuse_alike(text: str, problem: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(yaml.YAMLError) as fast:
        load_yaml(text)
    monkeypatch.setattr(yamlfile, "_C_LOADER", None)
    with pytest.raises(yaml.YAMLError) as pure:
        load_yaml(text)
    assert problem in str(fast.value) and str(fast.value) == str(pure.value)
