"""The files a package index and a new user look for: an MIT LICENSE as pyproject.toml says, a
CHANGELOG whose versions match the package's, classifiers, and every dependency pinned (in
constraints.txt, or exactly in pyproject.toml itself)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import cairn_servers

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_license_is_the_mit_licence_pyproject_names() -> None:
    text = (REPO / "LICENSE").read_text()
    assert PROJECT["license"] == {"text": "MIT"}
    assert text.startswith("MIT License\n\nCopyright (c)") and "THE SOFTWARE IS PROVIDED \"AS IS\"" in text
    assert "License :: OSI Approved :: MIT License" in PROJECT["classifiers"]


def test_changelog_has_the_current_version_and_unreleased() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert versions[:2] == ["Unreleased", PROJECT["version"]]
    assert PROJECT["version"] == cairn_servers.__version__


def test_classifiers_name_the_supported_pythons() -> None:
    minimum = PROJECT["requires-python"].removeprefix(">=")
    pythons = [c.rsplit(" ", 1)[-1] for c in PROJECT["classifiers"] if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert pythons and pythons[0] == minimum and "Typing :: Typed" in PROJECT["classifiers"]


def test_every_dependency_is_pinned_in_constraints() -> None:
    pins = {re.split(r"[=<>\[]", line)[0].lower().replace("_", "-") for line in
            (REPO / "constraints.txt").read_text().splitlines() if line and not line.startswith("#")}
    wanted = [*PROJECT["dependencies"], *(d for deps in PROJECT["optional-dependencies"].values() for d in deps)]
    names = {re.split(r"[=<>\[ ;]", d)[0].lower().replace("_", "-") for d in wanted if "==" not in d}
    assert sorted(names - pins) == []
