"""A verification record binds the submission's content hash and the figures it reproduced
(issue 71, item 4): a record copied under an edited, renamed file verifies nothing, and
``validate`` and ``render`` refuse it in one line naming the file and what differs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from suite.cli import main
from suite.leaderboard.schema import Submission
from suite.leaderboard.validate import summarize, validate
from suite.leaderboard.verified import Verification, Verifications

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "leaderboard"
HASH_ENTRY = "criteo-synth-accuracy-dlrm-hash-recsuite-maintainers-bd0926e69127.json"


@pytest.fixture
def board(tmp_path: Path) -> Path:
    """A copy of the shipped board's three re-run entries, their fingerprints and records."""
    board = tmp_path / "leaderboard"
    (board / "submissions").mkdir(parents=True)
    for name in ("fingerprints.yaml", "verifications.yaml"):
        shutil.copy(SHIPPED / name, board / name)
    records = Verifications.load(board / "verifications.yaml")
    for name in records.data.verified:
        if isinstance(records.of(name)[0], Verification):
            shutil.copy(SHIPPED / "submissions" / name, board / "submissions" / name)
    records.data.verified = {
        n: r for n, r in records.data.verified.items() if (board / "submissions" / n).exists()
    }
    records.save(board / "verifications.yaml")
    assert validate(board).ok
    return board


def edit_to(data: dict[str, Any], metric: str, mean: float) -> None:
    """Shift every seed's ``metric`` so its mean is ``mean``, and re-summarize: a file that
    is self-consistent, as an honest one would be."""
    values = [run["metrics"][metric] for run in data["seeds"]]
    shift = mean - sum(values) / len(values)
    for run in data["seeds"]:
        run["metrics"][metric] += shift
    new_mean, std = summarize([run["metrics"][metric] for run in data["seeds"]])
    data["metrics"][metric].update(mean=new_mean, std=std)


def forge(board: Path) -> str:
    """The issue's forgery: the hash entry edited to 0.80 test AUC, renamed to its new
    content hash, and the old record copied under the new name. Returns the new name."""
    old = board / "submissions" / HASH_ENTRY
    data = json.loads(old.read_text())
    edit_to(data, "test_auc", 0.80)
    forged = Submission.model_validate_json(json.dumps(data))
    old.unlink()
    (board / "submissions" / forged.filename()).write_text(forged.to_file_text())
    records = Verifications.load(board / "verifications.yaml")
    records.data.verified[forged.filename()] = records.data.verified.pop(HASH_ENTRY)
    records.save(board / "verifications.yaml")
    return forged.filename()


def test_a_record_copied_under_an_edited_renamed_file_is_refused(
    board: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = forge(board)
    report = validate(board)
    (problem,) = report.problems
    assert problem.file == f"submissions/{name}"
    assert problem.field == f"verifications.yaml verified[{name}][0]"
    assert "does not match this file: binds content hash bd0926e69127..." in problem.message
    assert f"content hashes to {name[-17:-5]}" in problem.message
    argv = ["--leaderboard-dir", str(board)]
    assert main(["leaderboard", "validate", *argv]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [str(problem)]  # one line, naming the file and what differs
    assert main(["leaderboard", "render", *argv]) == 1
    assert "not rendering" in capsys.readouterr().err
    assert not (board / "index.html").exists()


def test_a_record_whose_figures_differ_from_the_file_is_refused(board: Path) -> None:
    """Content hash re-bound too (a forger who edits the record): the figures still differ."""
    name = forge(board)
    sub = Submission.model_validate_json((board / "submissions" / name).read_text())
    records = Verifications.load(board / "verifications.yaml")
    (record,) = records.of(name)
    records.data.verified[name] = [record.model_copy(update={"content_hash": sub.content_hash()})]
    records.save(board / "verifications.yaml")
    (problem,) = validate(board).problems
    assert "test_auc of seed 1 is " in problem.message
    assert "in the file but the re-run reproduced 0.7" in problem.message
    assert "(bit-identical)" in problem.message


def test_a_record_that_binds_nothing_verifies_nothing(board: Path) -> None:
    records = Verifications.load(board / "verifications.yaml")
    (record,) = records.of(HASH_ENTRY)
    bare = record.model_copy(update={"content_hash": None, "figures": {}, "note": None})
    records.data.verified[HASH_ENTRY] = [bare]
    records.save(board / "verifications.yaml")
    (problem,) = validate(board).problems
    assert problem.file == f"submissions/{HASH_ENTRY}"
    assert "binds no content hash" in problem.message


def test_a_record_within_tolerance_binds_its_difference(board: Path) -> None:
    """A re-run on another CPU (rule: within 3e-3) passes while the file's figures lie
    within its recorded max_abs_difference of the re-run's, and fails beyond it."""
    records = Verifications.load(board / "verifications.yaml")
    (record,) = records.of(HASH_ENTRY)
    figures = dict(record.figures, test_auc=record.figures["test_auc"] + 1e-3)
    near = record.model_copy(
        update={"rule": "within 0.003", "max_abs_difference": 1e-3, "figures": figures}
    )
    records.data.verified[HASH_ENTRY] = [near]
    records.save(board / "verifications.yaml")
    assert validate(board).ok
    records.data.verified[HASH_ENTRY] = [near.model_copy(update={"max_abs_difference": 5e-4})]
    records.save(board / "verifications.yaml")
    (problem,) = validate(board).problems
    assert "test_auc of seed 1" in problem.message and "(within 0.0005)" in problem.message


def test_the_shipped_records_bind_their_files() -> None:
    records = Verifications.load(SHIPPED / "verifications.yaml")
    for name, entries in records.data.verified.items():
        sub = Submission.model_validate_json((SHIPPED / "submissions" / name).read_text())
        for record in entries:
            assert record.content_hash == sub.content_hash(), name
