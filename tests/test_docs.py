"""The docs cannot drift: the configuration reference is the schema's, the
example config has every key, what the README and the pages of docs/ name
exists, and every link between them leads somewhere."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any, get_args

import click
import yaml
from pydantic import BaseModel

from bot.cli import main
from bot.config.reference import render_reference
from bot.config.schema import Config
from bot.model.usage import Source

REPO = Path(__file__).resolve().parents[1]
# The README and the pages of docs/; configuration.md is the schema's own words.
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NAMING = [page for page in PAGES if page.name != "configuration.md"]
TEXT = "\n".join(page.read_text() for page in NAMING)


def key_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key path of the config sections (not list entries or price rows)."""
    paths = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths |= key_paths(annotation, f"{prefix}{name}.")
        else:
            paths.add(f"{prefix}{name}")
    return paths


def flatten(node: Any, prefix: str = "") -> set[str]:
    if not isinstance(node, dict) or not node:
        return {prefix.rstrip(".")}
    return {p for k, v in node.items() for p in flatten(v, f"{prefix}{k}.")}


def test_the_configuration_reference_is_generated_from_the_schema() -> None:
    on_disk = (REPO / "docs" / "configuration.md").read_text()
    assert on_disk == render_reference(), (
        "docs/configuration.md is stale: run `soulbot config-reference > docs/configuration.md`"
    )


def test_the_example_config_sets_every_key() -> None:
    example = yaml.safe_load((REPO / "deploy" / "soulbot.example.yaml").read_text())
    assert flatten(example) == key_paths(Config)


def log_events() -> set[str]:
    """Every event name the code logs."""
    pattern = re.compile(r"log\.(?:debug|info|warning|error|exception)\(\s*\"([a-z_.]+)\"")
    return {
        name
        for folder in ("bot", "adapters")
        for path in (REPO / folder).rglob("*.py")
        for name in pattern.findall(path.read_text())
    }


def test_every_config_key_and_log_event_the_docs_name_exists() -> None:
    keys = key_paths(Config) | {p.rsplit(".", 1)[0] for p in key_paths(Config)}
    events = log_events()
    named = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)`", TEXT))
    assert len(named & keys) > 20 and len(named & events) > 20
    files = (".md", ".py", ".json", ".db", ".yaml", ".toml", ".lock", ".pid", ".txt")
    others = {"applications.commands"}  # Discord's invite scope
    unknown = (n for n in named - keys - events - others if not n.endswith(files))
    assert sorted(n for n in unknown if not python_name(n)) == []


def test_every_log_event_the_code_logs_is_in_the_docs() -> None:
    named = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)`", TEXT))
    assert sorted(log_events() - named) == []


def test_the_metrics_table_names_every_ledger_source() -> None:
    [row] = [
        line
        for line in (REPO / "docs" / "operations.md").read_text().splitlines()
        if line.startswith("| `soulbot_model_calls_total` |")
    ]
    assert [s for s in get_args(Source) if f"`{s}`" not in row] == []


def python_name(name: str) -> bool:
    """Whether `name` is a module, or an attribute of one: ours (`bot.types`; in
    adapters/, `telegram_format.to_html`) or Python's (`asyncio.to_thread`)."""
    for dotted in (name, f"adapters.{name}"):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                found: Any = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attribute in parts[cut:]:
                    found = getattr(found, attribute)
            except AttributeError:
                break
            return True
    return False


def test_every_command_the_docs_name_exists() -> None:
    named = set(re.findall(r"(?:`|bin/)soulbot ([a-z][a-z-]+)(?: ([a-z][a-z-]+))?", TEXT))
    assert len(named) > 10
    for command, sub in named:
        found = main.commands.get(command)
        assert found is not None, f"the docs name `soulbot {command}`"
        if isinstance(found, click.Group) and sub and not sub.startswith("--"):
            assert sub in found.commands, f"the docs name `soulbot {command} {sub}`"


def unfenced(text: str) -> str:
    """`text` without its fenced code blocks, where a `#` line is no heading."""
    return re.sub(r"(?ms)^```.*?^```[^\n]*$", "", text)


def prose(text: str) -> str:
    """`text` without its code, fenced or inline, where a `[x](y)` is no link."""
    return re.sub(r"`[^`\n]*`", "", unfenced(text))


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of `page`: lower case, punctuation
    dropped, spaces as hyphens, `-1`, `-2` ... after a repeated one."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"(?m)^#{1,6} +(.+?) *#* *$", unfenced(page.read_text())):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """The relative links of `page` whose file (in `root`), or heading, is not there."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        there = file.exists() and file.is_relative_to(root)
        if not there or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    return broken


def test_every_relative_link_in_the_docs_leads_somewhere() -> None:
    assert len(PAGES) > 10
    broken = {page.name: links for page in PAGES if (links := broken_links(page))}
    assert broken == {}


def test_the_link_check_sees_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A page\n\n## The `soulbot` command: at last\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#the-soulbot-command-at-last) [ok](#here)\n"
        "[gone](DESIGN.md#s2) [no heading](there.md#nowhere) [web](https://example.org/x)\n"
        "`[code](not-a-link.md)`\n\n```\n[code](not-a-link.md)\n```\n\n## Here\n"
    )
    assert broken_links(page, tmp_path) == ["DESIGN.md#s2", "there.md#nowhere"]


def test_no_page_points_at_a_design_file_outside_the_repository() -> None:
    assert [page.name for page in PAGES if "DESIGN" in page.read_text()] == []
