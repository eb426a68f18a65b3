"""Stored run results that say when they were changed (issue 71, item 5): each stored job's
figures are sealed in ``runs/digests.json`` when it is stored and checked whenever stored
results load (a resume, ``--from-results``); an edited sealed run is refused with one line
naming its file, a re-serialised one is not an edit, a store written before digests still
loads, and a killed write never leaves a digest of a file that is not there whole. Real
files: copies of the committed ``results/curve-smoke`` store."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from suite.cli import main
from suite.errors import ConfigError
from suite.reproduce import store
from suite.reproduce.plan import Job, ReproductionPlan, build_plan
from suite.reproduce.report import render_report
from suite.reproduce.runner import regenerate, reproduce
from suite.results import TaskResult
from tests.test_reproduce_regenerate import RESULTS, no_data_cache

PROFILE = "curve-smoke"
CLAIM = "curve-bytes-robe-4"
COMMITTED_STORES = ["quick", "standard", "regime", "curve", "curve-smoke"]
DATE = datetime(2026, 1, 1, tzinfo=UTC)


def copy_store(tmp_path: Path, name: str = PROFILE) -> Path:
    """A copy of the committed curve-smoke directory, without its report, sealed."""
    out = tmp_path / name
    shutil.copytree(RESULTS / PROFILE, out)
    (out / "REPORT.md").unlink()
    assert store.main(["--seal", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def plan() -> ReproductionPlan:
    """The curve-smoke plan of one claim (ROBE against full at 1/4 of full's bytes: two
    runs, five seeds; the whole curve's plan fits 27 budgets, seconds each), on the
    cardinalities its committed store holds (config hashes do not depend on where the
    store lies, so it judges every copy)."""
    cards = store.stored_cardinalities([RESULTS / PROFILE])
    return build_plan(PROFILE, None, [CLAIM], {}, cards)


def report_of(plan: ReproductionPlan, out: Path) -> str:
    """The report judged on the results stored under ``out`` (no plots, a fixed date)."""
    return render_report(regenerate(plan, [out]), [], "test", date=DATE)


def a_run_file(plan: ReproductionPlan, out: Path) -> Path:
    """Where ``out`` stores seed 2 of the plan's run that is not a ``full`` table."""
    (job,) = (j for j in plan.jobs if j.seed == 2 and j.config.embedding.name != "full")
    return store.result_file(out, job.key, job.seed)


def files_of(plan: ReproductionPlan, out: Path) -> list[Path]:
    return [store.result_file(out, j.key, j.seed) for j in plan.jobs]


def test_an_untouched_sealed_store_regenerates_the_same_report(
    plan: ReproductionPlan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_data_cache(tmp_path, monkeypatch)
    out = copy_store(tmp_path)
    digests = store.read_digests(out)
    assert len(digests) == len(list(store.runs_dir(out).glob("*/seed-*.json"))) > len(plan.jobs)
    unsealed = tmp_path / "unsealed"
    shutil.copytree(out, unsealed)
    (store.runs_dir(unsealed) / store.DIGESTS_FILE).unlink()
    assert report_of(plan, out) == report_of(plan, unsealed)


def test_an_edited_figure_is_refused_with_one_line_exit_2_and_nothing_written(
    plan: ReproductionPlan,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    no_data_cache(tmp_path, monkeypatch)
    out = copy_store(tmp_path)
    path = a_run_file(plan, out)
    stored = json.loads(path.read_text())
    assert stored["metrics"]["test_auc"] != 0.95
    stored["metrics"]["test_auc"] = 0.95
    path.write_text(json.dumps(stored, indent=2))
    before = sorted((p, p.stat().st_mtime_ns) for p in out.rglob("*"))
    capsys.readouterr()
    args = ["reproduce", "--profile", PROFILE, "--claim", CLAIM, "--out", str(out)]
    code = main([*args, "--from-results", "--quiet"])
    err = capsys.readouterr().err
    expected = (
        f"error: {path}: its figures do not match the digest stored when it was written "
        "(metrics changed; edited after the run?); restore it or delete it to retrain\n"
    )
    assert (code, err) == (2, expected)
    assert not (out / "REPORT.md").exists()
    assert sorted((p, p.stat().st_mtime_ns) for p in out.rglob("*")) == before
    # a resume refuses it before training anything, and sealing never launders it
    with pytest.raises(store.StoredRunEdited, match="metrics changed"):
        reproduce(plan, out, progress=False)
    digests = (store.runs_dir(out) / store.DIGESTS_FILE).read_bytes()
    assert store.main(["--seal", str(out)]) == 2
    assert (store.runs_dir(out) / store.DIGESTS_FILE).read_bytes() == digests
    assert f"error: {path}: its figures do not match" in capsys.readouterr().err
    # another part edited is named as such; a file that no longer parses is never used
    stored["metrics"]["test_auc"] = json.loads(
        (RESULTS / PROFILE / path.relative_to(out)).read_text()
    )["metrics"]["test_auc"]
    stored["details"]["steps"] += 1
    path.write_text(json.dumps(stored, indent=2))
    with pytest.raises(store.StoredRunEdited, match=r"\(details changed; "):
        regenerate(plan, [out])
    path.write_text(path.read_text()[:100])
    with pytest.raises(
        ConfigError, match=rf"no stored result .* \(expected {re.escape(str(path))}\)"
    ):
        regenerate(plan, [out])


def test_a_re_serialised_file_is_not_an_edit(plan: ReproductionPlan, tmp_path: Path) -> None:
    out = copy_store(tmp_path)
    want = report_of(plan, out)
    for path in files_of(plan, out):
        data = json.loads(path.read_text())
        data = dict(reversed(list(data.items())))  # another key order
        data["metrics"] = {  # integral figures as integers, as other tools write them
            k: int(v) if float(v).is_integer() else v for k, v in data["metrics"].items()
        }
        path.write_text(json.dumps(data, separators=(",", ":")))  # no whitespace at all
    assert report_of(plan, out) == want
    (line,) = store.seal([out], write=False)
    assert line.endswith(": 105 runs match their digests, 0 unsealed")


def job_of(plan: ReproductionPlan, path: Path) -> Job:
    """The plan's job stored at ``path`` (``<hash>/seed-<n>.json``)."""
    seed = int(path.stem.removeprefix("seed-"))
    return next(j for j in plan.jobs if (j.key, j.seed) == (path.parent.name, seed))


def test_a_store_written_before_digests_still_loads_and_seals(
    plan: ReproductionPlan, tmp_path: Path
) -> None:
    out = copy_store(tmp_path)
    want = report_of(plan, out)
    digests_file = store.runs_dir(out) / store.DIGESTS_FILE
    sealed = digests_file.read_text()
    digests_file.unlink()
    assert report_of(plan, out) == want
    (line,) = store.seal([out], write=False)
    assert line.endswith(": 0 runs match their digests, 105 unsealed")
    assert not digests_file.exists()
    assert store.main(["--seal", str(out)]) == 0
    assert digests_file.read_text() == sealed  # the very digests sealed before
    # a run left unsealed in a sealed store (a write killed between its file and its
    # digest) loads unchecked, as a store written before digests does
    path = a_run_file(plan, out)
    digests = store.read_digests(out, cached=False)
    del digests[path.relative_to(store.runs_dir(out)).as_posix()]
    store.write_digests(out, digests)
    stored = json.loads(path.read_text())
    stored["metrics"]["test_auc"] = 0.95
    path.write_text(json.dumps(stored, indent=2))
    regenerate(plan, [out])
    job = job_of(plan, path)
    loaded = store.read_result(out, job.key, job.config)
    assert loaded is not None and loaded.metrics["test_auc"] == 0.95


def test_every_committed_store_is_sealed_and_matches() -> None:
    lines = store.seal([RESULTS / name for name in COMMITTED_STORES], write=False)
    assert all(line.endswith(" 0 unsealed") for line in lines), lines


KILL = """
import os, signal, sys
from suite.reproduce import store
from suite.results import TaskResult

out, key, source, victim, nth = sys.argv[1:6]
real, seen = os.replace, []

def replace(src, dst, *args, **kwargs):
    if os.path.basename(dst) == victim:
        seen.append(dst)
        if len(seen) == int(nth):  # killed just before this file would land
            os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *args, **kwargs)

os.replace = replace
result = TaskResult.read(source)
store.write_result(out, key, result.model_copy(update={"metrics": {**result.metrics, "test_auc": 0.5}}))
"""


@pytest.mark.parametrize(
    ("stored_before", "victim", "nth", "auc_after", "sealed_after"),
    [
        (False, "seed-2.json", 1, None, False),  # a new job: no file, no digest
        (True, "seed-2.json", 1, "old", False),  # its old digest taken out, the file not in
        (True, store.DIGESTS_FILE, 1, "old", True),  # the old digest not yet taken out
        (True, store.DIGESTS_FILE, 2, 0.5, False),  # the new file in, its digest not
    ],
)
def test_a_killed_write_never_leaves_a_digest_of_a_file_not_there_whole(
    stored_before: bool,
    victim: str,
    nth: int,
    auc_after: object,
    sealed_after: bool,
    plan: ReproductionPlan,
    tmp_path: Path,
) -> None:
    """A job stored (or stored again over a sealed one, as a resume training it for its
    predictions does) by a process killed at each write: the file there is whole, and
    sealed with its own digest or not at all."""
    out = tmp_path / "store"
    source = a_run_file(plan, RESULTS / PROFILE)
    job = job_of(plan, source)
    old = TaskResult.read(source)
    if stored_before:
        store.write_result(out, job.key, old)
    done = subprocess.run(
        [sys.executable, "-c", KILL, str(out), job.key, str(source), victim, str(nth)],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == -9, done.stderr
    path = store.result_file(out, job.key, job.seed)
    digests = store.read_digests(out, cached=False)
    for name, sealed in digests.items():  # no digest of a file not there, or not whole
        assert sealed == store.figures_digest(json.loads((store.runs_dir(out) / name).read_text()))
    assert (f"{job.key}/seed-2.json" in digests) is sealed_after
    found = store.read_result(out, job.key, job.config)
    if auc_after is None:
        assert found is None and not path.exists()
    else:
        assert found is not None
        assert found.metrics["test_auc"] == (old.metrics["test_auc"] if auc_after == "old" else 0.5)
