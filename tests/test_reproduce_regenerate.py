"""Every committed report regenerates from its committed run results, byte for byte outside
its header, without training and without the data cache (``--from-results``)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import suite.data.source
from suite.cli import main
from suite.reproduce import plan, report, runner

RESULTS = Path(__file__).resolve().parents[1] / "results"
QUIET = {"quick": True, "standard": True, "regime": True, "curve": False, "curve-smoke": True}
"""Each committed report's profile, and whether its command (in its header) has --quiet."""


def body(report: str) -> str:
    """A report without its header table (command, commit, machine, software: the
    sitting's) and its Timings date (when it was rendered)."""
    lines = report.split("\n")
    end = 2
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    text = "\n".join(lines[:2] + lines[end:])
    return re.sub(r"^Date \d{4}-\d\d-\d\d \d\d:\d\d UTC;", "Date <date>;", text, flags=re.M)


def no_data_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prepared-data cache unreachable: its root a file, and preparing an error."""
    blocked = tmp_path / "no-cache"
    blocked.write_text("not a directory\n")
    monkeypatch.setenv("RECSUITE_CACHE", str(blocked))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a report from stored results opened the data cache")

    for module in (suite.data.source, plan, report, runner):
        monkeypatch.setattr(module, "get_prepared", refuse)


def regenerate(profile: str, tmp_path: Path) -> tuple[str, str]:
    """``(committed, regenerated)`` REPORT.md of a profile, regenerated in a copy of its
    committed directory by the command its header names."""
    out = tmp_path / profile
    shutil.copytree(RESULTS / profile, out)
    (out / "REPORT.md").unlink()
    if profile == "regime":  # it reads the jobs it adopted from the standard profile's runs
        shutil.copytree(RESULTS / "standard" / "runs", Path("results/standard/runs"))
    args = ["reproduce", "--profile", profile, "--out", str(out), "--from-results"]
    assert main(args + (["--quiet"] if QUIET[profile] else [])) == 0
    return (RESULTS / profile / "REPORT.md").read_text(), (out / "REPORT.md").read_text()


def test_a_committed_curve_report_regenerates_without_the_data_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The curve plans its points' options on the data's cardinalities: regenerating reads
    them off the stored ``full`` runs, and the absent points' reasons come from the plan."""
    no_data_cache(tmp_path, monkeypatch)
    committed, regenerated = regenerate("curve-smoke", tmp_path)
    assert "--from-results" in regenerated.split("\n\n", 2)[1]
    assert body(regenerated) == body(committed)


@pytest.mark.slow
@pytest.mark.parametrize("profile", sorted(QUIET))
def test_every_committed_report_regenerates_from_its_runs(
    profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_data_cache(tmp_path, monkeypatch)
    committed, regenerated = regenerate(profile, tmp_path)
    assert body(regenerated) == body(committed)
