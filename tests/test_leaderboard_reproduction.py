"""The committed reproductions' runs on the board (issue 71, item 4): ``suite leaderboard
import-reproduction results/<profile>`` enters each run folder as a verified entry whose
record binds its content hash and each seed file's figures, and ``validate`` rebuilds it
from the committed runs, refusing it once a run changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.cli import main
from suite.leaderboard.ranking import budget_text
from suite.leaderboard.render import groups
from suite.leaderboard.schema import Submission
from suite.leaderboard.validate import validate
from suite.leaderboard.verified import Regeneration, Verifications
from suite.results import TaskResult
from tests.test_leaderboard_validate import fake_results, registry_for

REPO = Path(__file__).resolve().parents[1]
CURVE_METHODS = {"hash", "qr", "mixed_dim", "fiited", "adaembed", "ttrec", "robe", "dhe", "alpt"}


def write_runs(root: Path, profile: str, results: list[TaskResult]) -> Path:
    """``results`` stored as a reproduction stores them: runs/<config hash>/seed-<n>.json."""
    folder = root / "results" / profile / "runs" / results[0].config_hash
    folder.mkdir(parents=True)
    for n, result in enumerate(results):
        dated = result.model_copy(update={"created": f"2026-11-{20 + n}T10:00:00+00:00"})
        dated.write(folder / f"seed-{result.seed}.json")
    return root / "results" / profile


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository root with a reproduction ``demo`` (full and hash, three seeds each)
    and an empty leaderboard that knows their data."""
    full, hashed = fake_results("full"), fake_results("hash", memory=150_000.0, auc=0.69)
    write_runs(tmp_path, "demo", full)
    write_runs(tmp_path, "demo", hashed)
    board = tmp_path / "leaderboard"
    board.mkdir()
    from suite.leaderboard.submit import build_submission

    registry_for(build_submission(full, "x")).save(board / "fingerprints.yaml")
    return tmp_path


def import_demo(repo: Path, capsys: pytest.CaptureFixture[str]) -> str:
    argv = ["leaderboard", "import-reproduction", str(repo / "results" / "demo")]
    code = main([*argv, "--leaderboard-dir", str(repo / "leaderboard")])
    out = capsys.readouterr()
    assert code == 0, out
    return out.out + out.err


def entries(board: Path) -> dict[str, Submission]:
    return {
        p.name: Submission.model_validate_json(p.read_text())
        for p in sorted((board / "submissions").glob("*.json"))
    }


def test_import_enters_each_run_folder_verified_by_regeneration(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = import_demo(repo, capsys)
    assert "reproduction demo: 2 written, 0 unchanged, 0 removed, 0 skipped" in out
    board = repo / "leaderboard"
    subs = entries(board)
    assert {s.embedding for s in subs.values()} == {"full", "hash"}
    assert {s.submitter for s in subs.values()} == {"recsuite reproduction demo"}
    (hashed,) = [s for s in subs.values() if s.embedding == "hash"]
    assert "Regenerated from committed runs of reproduction demo" in (hashed.notes or "")
    records = Verifications.load(board / "verifications.yaml")
    for name, sub in subs.items():
        (record,) = records.of(name)
        assert isinstance(record, Regeneration)
        assert record.content_hash == sub.content_hash()
        assert record.rule == "regenerated from committed runs of reproduction demo"
        folder = f"results/demo/runs/{sub.seeds[0].config_hash}"
        assert sorted(record.runs) == [f"{folder}/seed-{s}.json" for s in (1, 2, 3)]
        assert sub.date.isoformat() == "2026-11-22"  # its latest run's, not the clock's
    report = validate(board)
    assert report.ok, [str(p) for p in report.problems]
    assert all(report.status(board / "submissions" / n) == "verified" for n in subs)
    assert main(["leaderboard", "render", "--leaderboard-dir", str(board)]) == 0
    # again: nothing changes
    out = import_demo(repo, capsys)
    assert "reproduction demo: 0 written, 2 unchanged, 0 removed, 0 skipped" in out


def edit_a_run(repo: Path, auc: float) -> Path:
    (path,) = [
        p
        for p in (repo / "results" / "demo" / "runs").glob("*/seed-2.json")
        if json.loads(p.read_text())["embedding"] == "hash"
    ]
    data = json.loads(path.read_text())
    data["metrics"]["test_auc"] = auc
    path.write_text(json.dumps(data, indent=2))
    return path


def test_a_changed_committed_run_is_refused_until_re_imported(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import_demo(repo, capsys)
    board = repo / "leaderboard"
    edited = edit_a_run(repo, 0.95)
    (problem,) = validate(board).problems
    rel = edited.relative_to(repo).as_posix()
    assert f"{rel}: its figures digest to" in problem.message
    assert "the committed run changed since the entry was imported" in problem.message
    assert main(["leaderboard", "render", "--leaderboard-dir", str(board)]) == 1
    capsys.readouterr()
    # importing again rebuilds the entry from the runs as they are, and drops the old one
    out = import_demo(repo, capsys)
    assert "reproduction demo: 1 written, 1 unchanged, 1 removed, 0 skipped" in out
    assert validate(board).ok


def test_a_missing_committed_run_is_refused(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import_demo(repo, capsys)
    next((repo / "results" / "demo" / "runs").glob("*/seed-3.json")).unlink()
    (problem,) = validate(repo / "leaderboard").problems
    assert "does not regenerate from its committed runs" in problem.message
    assert "seed-3.json: does not exist" in problem.message


def test_the_shipped_board_holds_the_reproductions_verified() -> None:
    """Every committed reproduction's accuracy runs are on the board, verified, with their
    CIs: on the curve's data every method of the curve at six budgets, ten seeds each."""
    board = REPO / "leaderboard"
    report = validate(board)
    assert report.ok, [str(p) for p in report.problems[:3]]
    subs = {p.name: s for p, s in report.submissions}
    records = report.verifications
    for profile in ("standard", "curve", "quick", "curve-smoke"):
        mine = [n for n, s in subs.items() if s.submitter == f"recsuite reproduction {profile}"]
        assert mine, profile
        for name in mine:
            assert report.status(board / "submissions" / name) == "verified"
            (record,) = records.of(name)
            assert isinstance(record, Regeneration) and record.reproduction == profile
    curve = [s for s in subs.values() if s.submitter == "recsuite reproduction curve"]
    assert curve and all(len(s.seeds) == 10 for s in curve)
    # every (budget, method) point of the curve's report is an entry on its data (a config
    # the standard profile ran too is entered once, from there)
    on_data = [s for s in subs.values() if s.data_fingerprint == curve[0].data_fingerprint]
    entered = {
        (s.notes.split("Budget ")[1].split(":")[0], s.embedding)
        for s in on_data
        if s.notes and "Budget " in s.notes
    }
    assert curve_points() <= entered
    assert {m for _, m in curve_points()} == CURVE_METHODS
    # the curve's runs and the standard profile's share the boards of their data, one per
    # budget: each entry on the board of the budget its notes give, every method on one
    on_boards = [g for g in groups_of(report) if g.fingerprint == curve[0].data_fingerprint]
    assert len(on_boards) >= 6 and all(g.budget is not None for g in on_boards)
    for g in on_boards:
        for item in g.items:
            noted = (item.sub.notes or "").split("Budget ")
            assert budget_text(g.budget) == (noted[1].split(":")[0] if len(noted) > 1 else "1")
    assert {i.sub.embedding for g in on_boards for i in g.items} >= CURVE_METHODS | {"full"}


def groups_of(report):
    from suite.leaderboard.render import Item

    return groups([Item(p.name, s, True) for p, s in report.submissions])


LABELS = {
    "DHE": "dhe",
    "AdaEmbed": "adaembed",
    "TT-Rec": "ttrec",
    "FIITED": "fiited",
    "mixed-dim": "mixed_dim",
    "ROBE": "robe",
    "ALPT": "alpt",
    "QR": "qr",
    "hash": "hash",
}


def curve_points() -> set[tuple[str, str]]:
    """(budget, method) of each row of the curve report's ranking table."""
    import re

    text = (REPO / "results" / "curve" / "REPORT.md").read_text()
    rows = re.findall(r"^\| (1/\d+) +\| ([A-Za-z-]+) +\|", text, re.MULTILINE)
    return {(budget, LABELS[name]) for budget, name in rows}
