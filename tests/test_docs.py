"""The docs cannot drift: the configuration reference is the schema's, the
example config has every key, and what the README names exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import BaseModel

from bot.cli import main
from bot.config.reference import render_reference
from bot.config.schema import Config

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


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


def test_every_config_key_and_log_event_the_readme_names_exists() -> None:
    keys = key_paths(Config) | {p.rsplit(".", 1)[0] for p in key_paths(Config)}
    events = log_events()
    named = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)`", README))
    assert len(named & keys) > 20 and len(named & events) > 20
    files = (".md", ".py", ".json", ".db", ".yaml", ".toml", ".lock", ".pid")
    others = {"applications.commands"}  # Discord's invite scope
    assert sorted(n for n in named - keys - events - others if not n.endswith(files)) == []


def test_every_command_the_readme_names_exists() -> None:
    named = set(re.findall(r"(?:`|bin/)soulbot ([a-z][a-z-]+)(?: ([a-z][a-z-]+))?", README))
    assert len(named) > 10
    for command, sub in named:
        found = main.commands.get(command)
        assert found is not None, f"README names `soulbot {command}`"
        if isinstance(found, click.Group) and sub and not sub.startswith("--"):
            assert sub in found.commands, f"README names `soulbot {command} {sub}`"
