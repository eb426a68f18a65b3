"""The version is written once, in ``suite/__init__.py``; the installed metadata reads it."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

import suite

ROOT = Path(__file__).resolve().parent.parent


def test_the_installed_version_is_suite_version() -> None:
    assert version("recsuite") == suite.__version__


def test_pyproject_does_not_write_the_version_again() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "suite.__version__"}


def test_the_repository_has_its_license_changelog_and_contributing_guide() -> None:
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert "## [Unreleased]" in (ROOT / "CHANGELOG.md").read_text()
    assert "nox -s lint tests" in (ROOT / "CONTRIBUTING.md").read_text()
