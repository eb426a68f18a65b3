"""``suite submit`` from real runs and ``suite leaderboard verify`` re-running a seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.cli import main
from suite.leaderboard.schema import Submission
from suite.leaderboard.validate import validate
from suite.runs.single import execute
from suite.tracking import Tracker
from tests.conftest import tiny_config, tracking_uri

SEEDS = (1, 2, 3)


@pytest.fixture(scope="module")
def result_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three real CPU runs of the tiny criteo-synth config (no tracking)."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("seeds")
    files = []
    for seed in SEEDS:
        paths = [f"dataset.cache_dir={root / 'cache'}", f"tracking.results_dir={root / 'runs'}"]
        config = tiny_config(overrides=[f"seed={seed}", *paths])
        path = root / f"seed{seed}.json"
        execute(config, out=path)
        files.append(path)
    return files


def submit(board: Path, files: list[Path], submitter: str = "Ada") -> Path:
    before = set((board / "submissions").glob("*.json"))
    argv = ["submit", "--results", *map(str, files), "--submitter", submitter]
    assert main([*argv, "--leaderboard-dir", str(board)]) == 0
    (path,) = set((board / "submissions").glob("*.json")) - before
    return path


@pytest.fixture
def board(tmp_path: Path, result_files: list[Path]) -> Path:
    """A leaderboard with one real submission and its registered fingerprint."""
    board = tmp_path / "leaderboard"
    submit(board, result_files)
    code = main(
        ["leaderboard", "fingerprints", "--update", "--only-used", "--leaderboard-dir", str(board)]
    )
    assert code == 0
    return board


def only(board: Path) -> Path:
    (path,) = (board / "submissions").glob("*.json")
    return path


def test_submission_from_result_files(board: Path, result_files: list[Path]) -> None:
    report = validate(board)
    assert report.ok, [str(p) for p in report.problems]
    sub = Submission.model_validate_json(only(board).read_text())
    results = [json.loads(p.read_text()) for p in result_files]
    assert [s.seed for s in sub.seeds] == list(SEEDS)
    assert [s.metrics["test_auc"] for s in sub.seeds] == [r["metrics"]["test_auc"] for r in results]
    assert [s.config_hash for s in sub.seeds] == [r["config_hash"] for r in results]
    assert sub.data_fingerprint == results[0]["data_fingerprint"]
    assert sub.environment.device == "cpu"
    assert sub.environment.threads == 1
    assert "seed" not in sub.config
    assert only(board).name == sub.filename()


def test_verify_reproduces_a_cpu_seed_exactly(
    board: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["leaderboard", "verify", str(only(board)), "--seed", "2", "--no-tracking"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "data fingerprint" in out and "matches" in out
    # the recording CPU model, threads and versions: quality figures too must match exactly
    auc_line = next(line for line in out.splitlines() if "test_auc: recorded" in line)
    assert "(exact) ok" in auc_line, out
    assert "embedding_bytes: recorded" in out and "(exact) ok" in out
    assert "train_samples_per_s" in out and "timing, not compared" in out
    # the same machine and thread count reproduce a CPU run bit for bit, and it says so
    assert "verified: seed 2 reproduces the recorded metrics (bit-identical)" in out


def test_quality_figures_are_exact_on_the_recording_cpu_and_close_elsewhere(board: Path) -> None:
    import torch

    from suite.environment import fbgemm_version
    from suite.leaderboard.verify import CPU_TOLERANCE, DEFAULT_TOLERANCE, tolerance_rule

    sub = Submission.model_validate_json(only(board).read_text())
    here = {"torch": torch.__version__, "fbgemm": fbgemm_version()}
    assert tolerance_rule(sub, "cpu", here, None)[0] == 0.0
    other_cpu = sub.model_copy(
        update={"environment": sub.environment.model_copy(update={"device_name": "Other CPU"})}
    )
    tolerance, rule = tolerance_rule(other_cpu, "cpu", here, None)
    assert tolerance == CPU_TOLERANCE and "another CPU than the recording 'Other CPU'" in rule
    assert tolerance_rule(sub, "cpu", {**here, "torch": "0.0"}, None)[0] == CPU_TOLERANCE
    assert tolerance_rule(sub, "cuda", here, None)[0] == DEFAULT_TOLERANCE
    assert tolerance_rule(sub, "cpu", here, 0.01) == (0.01, "within 0.01 (--tolerance)")


def test_verify_fails_when_a_metric_was_altered(
    board: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = only(board)
    data = json.loads(path.read_text())
    data["seeds"][0]["metrics"]["test_auc"] += 1e-6  # far below any cross-CPU tolerance
    path.write_text(json.dumps(data))
    code = main(["leaderboard", "verify", str(path), "--no-tracking", "--record"])
    out = capsys.readouterr().out
    assert code == 1
    assert "test_auc: recorded" in out and "(exact) MISMATCH" in out
    assert "NOT verified: seed 1 differs in test_auc (exact on the recording CPU model" in out
    assert not (board / "verifications.yaml").exists()  # nothing recorded


def test_verify_checks_the_data_fingerprint_before_running(
    board: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = only(board)
    data = json.loads(path.read_text())
    data["data_fingerprint"] = "0" * 64
    path.write_text(json.dumps(data))
    code = main(["leaderboard", "verify", str(path), "--no-tracking"])
    err = capsys.readouterr().err
    assert code == 2
    assert "is not the recorded 0000000000000000..." in err
    assert "not re-running on different data" in err
    assert not Path("results").exists()  # nothing ran


def test_verify_rejects_an_unrecorded_seed_and_a_broken_config_hash(
    board: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = only(board)
    assert main(["leaderboard", "verify", str(path), "--seed", "7", "--no-tracking"]) == 2
    assert "seed 7 is not recorded (recorded: [1, 2, 3])" in capsys.readouterr().err
    data = json.loads(path.read_text())
    data["config"]["train"]["dense_lr"] = 0.01
    path.write_text(json.dumps(data))
    assert main(["leaderboard", "verify", str(path), "--no-tracking"]) == 2
    assert "config_hash: is " in capsys.readouterr().err


def test_submit_never_replaces_a_different_file(
    board: Path, result_files: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = only(board)
    # the same submission again: the identical file is already there, nothing changes
    argv = ["submit", "--results", *map(str, result_files), "--submitter", "Ada"]
    assert main([*argv, "--leaderboard-dir", str(board)]) == 0
    assert "already present" in capsys.readouterr().out
    # a different file under that name is never replaced
    original = path.read_text()
    path.write_text(original.replace('"Ada"', '"Ada"  '))
    assert main([*argv, "--leaderboard-dir", str(board)]) == 2
    assert "exists with different content; not replacing it" in capsys.readouterr().err
    assert path.read_text() != original


def test_submit_refuses_bad_seed_sets(
    tmp_path: Path, result_files: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    board = ["--leaderboard-dir", str(tmp_path / "lb")]
    two = ["submit", "--results", *map(str, result_files[:2]), "--submitter", "Ada", *board]
    assert main(two) == 2
    assert "seeds: List should have at least 3 items" in capsys.readouterr().err
    other = json.loads(result_files[0].read_text())
    other["config"]["train"]["dense_lr"] = 0.5
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(other))
    mixed = ["submit", "--results", str(odd), *map(str, result_files[1:]), "--submitter", "Ada"]
    assert main([*mixed, *board]) == 2
    assert "its config does not hash to its config_hash" in capsys.readouterr().err
    bad_url = ["--paper", "javascript:alert(1)"]
    argv = ["submit", "--results", *map(str, result_files), "--submitter", "Ada", *bad_url]
    assert main([*argv, *board]) == 2
    assert "paper: must be an http:// or https:// URL" in capsys.readouterr().err
    assert not (tmp_path / "lb" / "submissions").exists() or not list(
        (tmp_path / "lb" / "submissions").iterdir()
    )


def test_submit_from_a_multiseed_parent_run_and_verify_tracked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = tracking_uri(tmp_path)
    parent = Tracker.start(uri, "recsuite", "parent", {"suite.multiseed": "true"})
    run_ids = []
    for seed in SEEDS:
        config = tiny_config(tracking=True, overrides=[f"seed={seed}", f"tracking.uri={uri}"])
        run_ids.append(execute(config, parent_run_id=parent.run_id).mlflow_run_id)
    parent.finish()
    board = tmp_path / "leaderboard"
    argv = ["submit", "--parent", parent.run_id, "--submitter", "Ada", "--tracking-uri", uri]
    assert main([*argv, "--leaderboard-dir", str(board), "--notes", "from MLflow"]) == 0
    sub = Submission.model_validate_json(only(board).read_text())
    assert sub.mlflow_parent_run_id == parent.run_id
    assert [s.mlflow_run_id for s in sub.seeds] == run_ids
    assert sub.notes == "from MLflow"
    # the same runs listed by id give the same entry apart from nothing at all
    only(board).unlink()
    argv = ["submit", "--runs", *run_ids, "--submitter", "Ada", "--tracking-uri", uri]
    assert main([*argv, "--leaderboard-dir", str(board), "--notes", "from MLflow"]) == 0
    assert Submission.model_validate_json(only(board).read_text()) == sub
    capsys.readouterr()

    # the re-run goes down the ordinary, tracked run path
    assert main(["leaderboard", "verify", str(only(board)), "--tracking-uri", uri]) == 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs(
        [client.get_experiment_by_name("recsuite").experiment_id],
        filter_string="tags.`suite.verify_of` != ''",
    )
    assert len(runs) == 1
    assert runs[0].data.tags["suite.verify_of"] == only(board).name
    assert runs[0].data.tags["suite.verify_seed"] == "1"


def test_submit_from_a_multiseed_aggregate_file(
    tmp_path: Path, result_files: list[Path], board: Path
) -> None:
    aggregate = {
        "kind": "multiseed",
        "mlflow_run_id": "f" * 32,
        "per_seed": [json.loads(p.read_text()) for p in result_files],
    }
    path = tmp_path / "multiseed.json"
    path.write_text(json.dumps(aggregate))
    other = tmp_path / "other"
    argv = ["submit", "--results", str(path), "--submitter", "Ada"]
    assert main([*argv, "--leaderboard-dir", str(other)]) == 0
    sub = Submission.model_validate_json(only(other).read_text())
    assert sub.mlflow_parent_run_id == "f" * 32
    per_seed = Submission.model_validate_json(only(board).read_text())
    assert sub.model_copy(update={"mlflow_parent_run_id": None}) == per_seed


def test_comparison_rules() -> None:
    from suite.leaderboard.verify import DEFAULT_TOLERANCE, compare

    recorded = {"test_auc": 0.75, "embedding_bytes": 100.0, "train_samples_per_s": 10.0}
    near = {"test_auc": 0.7525, "embedding_bytes": 100.0, "train_samples_per_s": 99.0}
    exact = {c.metric: c for c in compare("accuracy", recorded, near, 0.0)}
    assert not exact["test_auc"].ok  # a zero tolerance is exact
    assert exact["embedding_bytes"].ok and exact["train_samples_per_s"].tolerance is None
    loose = {c.metric: c for c in compare("accuracy", recorded, near, DEFAULT_TOLERANCE)}
    assert loose["test_auc"].ok  # within 3e-3
    far = compare("accuracy", recorded, {"test_auc": 0.754}, DEFAULT_TOLERANCE)
    far_by = {c.metric: c for c in far}
    assert not far_by["test_auc"].ok and not far_by["embedding_bytes"].ok  # off, and missing
    sizes = compare("accuracy", {"embedding_bytes": 100.0}, {"embedding_bytes": 100.5}, 1.0)
    assert sizes[0].tolerance == 0.0 and not sizes[0].ok  # sizes are exact everywhere
    # the kinds come from the task's declarations: a memory peak is measured, not compared
    peak = compare("memory", {"train_step_peak_bytes": 1.0}, {"train_step_peak_bytes": 2.0}, 0.0)
    assert peak[0].tolerance is None and peak[0].ok


def test_verify_refuses_prepared_arrays_overwritten_at_the_same_size(
    board: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["leaderboard", "verify", str(only(board)), "--seed", "1", "--no-tracking"]
    assert main(argv) == 0  # prepares the data in this test's cache ($RECSUITE_CACHE)
    (slot,) = (tmp_path / "cache" / "criteo-synth").iterdir()
    capsys.readouterr()
    with open(slot / "test.label.f32", "r+b") as handle:  # same size, same inode
        handle.write(bytes.fromhex("0000e040"))  # float32 7.0
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "test.label.f32: content does not match" in err and "label 7.0 at row 0" in err


def test_verify_record_marks_the_entry_verified(
    board: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from suite.leaderboard.validate import UNVERIFIED
    from suite.leaderboard.verified import Verifications

    path = only(board)
    assert [w.code for w in validate(board).warnings] == [UNVERIFIED]
    assert main(["leaderboard", "verify", str(path), "--no-tracking", "--record"]) == 0
    assert "recorded in" in capsys.readouterr().out
    (record,) = Verifications.load(board / "verifications.yaml").of(path.name)
    assert record.seed == SEEDS[0] and record.rule == "bit-identical"
    assert record.max_abs_difference == 0.0
    # it binds the file's content and the figures the re-run measured (timings aside)
    sub = Submission.model_validate_json(path.read_text())
    assert record.content_hash == sub.content_hash()
    (seed,) = [run for run in sub.seeds if run.seed == SEEDS[0]]
    assert record.figures == {k: v for k, v in seed.metrics.items() if k != "train_samples_per_s"}
    report = validate(board)
    assert report.ok and report.warnings == []
    assert report.verifications.is_verified(path.name)


def test_verify_options_reject_a_bad_tolerance(
    board: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["leaderboard", "verify", str(only(board)), "--tolerance", "-1"]) == 2
    assert "--tolerance must be in [0, 1), got -1.0" in capsys.readouterr().err
