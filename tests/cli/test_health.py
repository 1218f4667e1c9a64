"""`soulbot health --config /abs/path` run from a folder other than the daemon's:
the health file it reads is the one `soulbot run` writes, named by its absolute
path. A subprocess, real files; the serving daemon is simulated by its health file."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app.health import write_health
from tests.run_cli import soulbot


@pytest.fixture
def serving(tmp_path: Path) -> Path:
    """A daemon's folder (as systemd's WorkingDirectory or the image's WORKDIR):
    its config, and the health file `soulbot run` started there keeps."""
    folder = tmp_path / "srv"
    (folder / "data").mkdir(parents=True)
    (folder / "soulbot.yaml").write_text("data_dir: ./data\n")
    write_health(folder / "data" / "health.json", {"adapters": ["telegram"]})
    return folder


def test_health_in_the_daemons_folder_is_ok_whatever_the_config_path(serving: Path) -> None:
    for config in ("soulbot.yaml", str(serving / "soulbot.yaml")):
        result = soulbot("health", "--config", config, cwd=serving)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("ok: pid ")


def test_health_elsewhere_names_the_absolute_file_and_the_folder_it_was_taken_from(
    serving: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    result = soulbot("health", "--config", str(serving / "soulbot.yaml"), cwd=elsewhere)
    assert result.returncode == 1
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert line.startswith(f"error: {elsewhere / 'data' / 'health.json'} is missing: ")
    assert f"data_dir data is taken from the folder health runs in, {elsewhere}," in line
    assert "run health in that folder, or make data_dir absolute" in line


def test_health_elsewhere_is_ok_with_an_absolute_data_dir(serving: Path, tmp_path: Path) -> None:
    config = serving / "soulbot.yaml"
    config.write_text(f"data_dir: {serving / 'data'}\n")
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    result = soulbot("health", "--config", str(config), cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: pid ")
