"""The lock is uv.lock; make installs its exports (requirements/run.txt and dev.txt) and
the build backend's (build.txt). They must pin every dependency pyproject.toml declares,
at a version the declared range allows, with hashes, and the files must agree. A
pyproject.toml edited without `make upgrade` fails here."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ ;\\]+)")


def pins(name: str) -> dict[str, Version]:
    """Each pinned package of requirements/NAME.txt, with its version; every pin is
    followed by at least one hash."""
    lines = (REPO / "requirements" / f"{name}.txt").read_text().splitlines()
    found: dict[str, Version] = {}
    for number, line in enumerate(lines):
        match = PIN.match(line)
        if match:
            assert lines[number + 1].strip().startswith("--hash=sha256:"), line
            found[canonicalize_name(match[1])] = Version(match[2])
    return found


def declared(extra: str | None = None) -> list[Requirement]:
    """The project's dependencies (with `extra`'s), or the build backend's for "build"."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    if extra == "build":
        listed = pyproject["build-system"]["requires"]
    else:
        listed = project["optional-dependencies"][extra] if extra else project["dependencies"]
    return [Requirement(spec) for spec in listed]


@pytest.mark.parametrize(
    ("lock", "wanted"),
    [("run", declared()), ("dev", declared() + declared("dev")), ("build", declared("build"))],
    ids=["run", "dev", "build"],
)
def test_every_declared_dependency_is_locked_within_its_range(
    lock: str, wanted: list[Requirement]
) -> None:
    locked = pins(lock)
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement} is not in requirements/{lock}.txt"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"requirements/{lock}.txt pins {name}=={locked[name]}, outside {requirement}"
        )


def test_the_exports_pip_installs_are_uv_lock_s_versions() -> None:
    packages = tomllib.loads((REPO / "uv.lock").read_text())["package"]
    locked = {
        canonicalize_name(p["name"]): Version(p["version"])
        for p in packages
        if p.get("source", {}).get("editable") != "." and p["name"] != "soulbot"
    }
    assert pins("dev") == locked


def test_the_run_lock_is_the_dev_lock_without_the_test_tools() -> None:
    run, dev, build = pins("run"), pins("dev"), pins("build")
    assert {name: dev.get(name) for name in run} == run
    assert {name: dev.get(name, version) for name, version in build.items()} == build
    assert canonicalize_name("pytest") in dev and canonicalize_name("pytest") not in run


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize(("target", "lock"), [("run", "run"), ("test", "dev")])
def test_make_installs_the_lock_checked_by_its_hashes(target: str, lock: str) -> None:
    """A dry run in a copy without a venv: the install is the lock, hashes required, and
    soulbot itself with no dependency resolved outside the lock."""
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "-C", str(REPO), target, "VENV=/nonexistent/venv"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    installs = [line for line in dry.splitlines() if " -m pip install " in line]
    locked = f"--require-hashes --no-deps -r requirements/build.txt -r requirements/{lock}.txt"
    assert any(line.endswith(locked) for line in installs), installs
    assert any(line.endswith("--no-build-isolation --no-deps -e .") for line in installs)
    assert all("--no-deps" in line or "--upgrade pip" in line for line in installs), installs
