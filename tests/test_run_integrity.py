"""Runs under interruption, concurrency and bad input (issue 14, items 2, 8, 9, 12, 13).

Real processes, real signals, a real SQLite MLflow store: nothing is mocked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from suite.cli import main
from suite.config import build_config
from suite.runs.multiseed import execute_seeds
from suite.runs.single import execute
from suite.tracking import KILLED_BY_TAG, open_client
from tests.conftest import TINY_DATA, tiny_config, tracking_uri

REPO = Path(__file__).resolve().parents[1]
TINY_FLAGS = [f"--set=dataset.options.{k}={v}" for k, v in TINY_DATA.items()] + [
    "--batch-size=128",
    "--quiet",
    "--set=train.threads=1",
]
# long enough to be interrupted mid-training: many epochs, a validation every 20 steps
LONG_FLAGS = [*TINY_FLAGS, "--epochs=200", "--set=train.eval_every_steps=20"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _suite(*argv: str) -> subprocess.Popen[str]:
    """``suite ARGV`` in a new process (this checkout, this test's working directory)."""
    return subprocess.Popen(
        [sys.executable, "-m", "suite.cli", *argv],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _runs(uri: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return list(client.search_runs(ids)) if ids else []


def _wait_for_training(uri: str, proc: subprocess.Popen[str], count: int = 1) -> None:
    """Until ``count`` runs are RUNNING with a validation metric logged."""
    db = Path(uri.removeprefix("sqlite:///"))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if db.exists():
            try:
                running = [
                    r
                    for r in _runs(uri)
                    if r.info.status == "RUNNING" and "val_auc" in r.data.metrics
                ]
            except Exception:
                running = []
            if len(running) >= count:
                return
        time.sleep(0.5)
    proc.kill()
    raise AssertionError("the run never started training")


def _one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


# --- item 9: signals end a run KILLED with what it measured --------------------------


@pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGTERM, 143), pytest.param(signal.SIGINT, 130, marks=pytest.mark.slow)],
)
def test_signal_ends_the_run_killed_with_its_metrics(
    tmp_path: Path, signum: int, code: int
) -> None:
    uri = tracking_uri(tmp_path)
    proc = _suite("run", "--tracking-uri", uri, *LONG_FLAGS)
    _wait_for_training(uri, proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    (run,) = _runs(uri)
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        f"interrupted by {signal.Signals(signum).name}: MLflow run {run.info.run_id}"
    )
    assert run.info.status == "KILLED"
    assert run.data.tags[KILLED_BY_TAG] == f"{signal.Signals(signum).name} during the run"
    assert "val_auc" in run.data.metrics and "val_logloss" in run.data.metrics
    assert not list(Path("results").rglob("*.json"))  # no result for an unfinished run


@pytest.mark.slow
def test_sigint_during_a_multiseed_run_kills_child_and_parent(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    proc = _suite("run", "--tracking-uri", uri, "--seeds", "0,1,2", *LONG_FLAGS)
    _wait_for_training(uri, proc)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    runs = _runs(uri)
    assert len(runs) == 2  # the parent and the first seed's child
    assert {r.info.status for r in runs} == {"KILLED"}
    (parent,) = [r for r in runs if r.data.tags.get("suite.multiseed") == "true"]
    assert parent.data.tags[KILLED_BY_TAG] == "SIGINT during the multi-seed run"


def test_sigkilled_run_is_marked_killed_by_runs_clean_and_next_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = tracking_uri(tmp_path)
    first = _suite("run", "--tracking-uri", uri, *LONG_FLAGS)
    _wait_for_training(uri, first)
    first.kill()
    first.wait()
    (run,) = _runs(uri)
    assert run.info.status == "RUNNING"  # SIGKILL cannot be caught
    assert run.data.tags["suite.pid"] == str(first.pid)

    assert main(["runs", "clean", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert run.info.run_id in out and "1 dead run(s) marked KILLED" in out
    (cleaned,) = _runs(uri)
    assert cleaned.info.status == "KILLED"
    assert f"process {first.pid}" in cleaned.data.tags[KILLED_BY_TAG]

    # a second dead run is found by the next run's start on the same store
    second = _suite("run", "--tracking-uri", uri, *LONG_FLAGS)
    _wait_for_training(uri, second)
    second.kill()
    second.wait()
    result = execute(tiny_config(tracking=True, overrides=[f"tracking.uri={uri}"]))
    statuses = {r.info.run_id: r.info.status for r in _runs(uri)}
    assert statuses[result.mlflow_run_id] == "FINISHED"
    assert sorted(statuses.values()) == ["FINISHED", "KILLED", "KILLED"]


@pytest.mark.slow
def test_runs_clean_leaves_live_runs_alone(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    proc = _suite("run", "--tracking-uri", uri, *LONG_FLAGS)
    try:
        _wait_for_training(uri, proc)
        assert main(["runs", "clean", "--tracking-uri", uri]) == 0
        (run,) = _runs(uri)
        assert run.info.status == "RUNNING"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)


# --- item 8: the store under concurrency and early kills ------------------------------


def test_concurrent_first_runs_share_a_fresh_store(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    procs = [_suite("run", "--tracking-uri", uri, *TINY_FLAGS) for _ in range(3)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    runs = _runs(uri)
    assert len(runs) == 3 and {r.info.status for r in runs} == {"FINISHED"}
    assert len({r.info.experiment_id for r in runs}) == 1


@pytest.mark.slow
def test_first_runs_killed_while_creating_the_store_leave_it_usable(tmp_path: Path) -> None:
    """SIGKILL a first run as soon as its database file appears (mid-migration), at a few
    delays; the store must still open and take runs."""
    uri = tracking_uri(tmp_path)
    db = Path(uri.removeprefix("sqlite:///"))
    script = (
        "import sys; from suite.tracking import Tracker; "
        "Tracker.start(sys.argv[1], 'recsuite', 'early').finish()"
    )
    hits = 0
    for delay in (0.0, 0.2, 0.5, 0.8):
        proc = subprocess.Popen([sys.executable, "-c", script, uri], env=_env())
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if db.exists() or list(db.parent.glob(f".{db.name}.init-*")):
                time.sleep(delay)
                hits += proc.poll() is None
                break
            time.sleep(0.01)
        proc.kill()
        proc.wait()
    assert hits >= 1  # at least one process died while building the store
    client, _ = open_client(uri)  # whatever state the kills left, the store opens
    result = execute(tiny_config(tracking=True, overrides=[f"tracking.uri={uri}"]))
    assert client.get_run(result.mlflow_run_id).info.status == "FINISHED"
    assert not list(db.parent.glob(f".{db.name}.init-*"))


@pytest.mark.parametrize("kind", ["garbage-file", "unknown-scheme"])
def test_unusable_store_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    if kind == "garbage-file":
        db = tmp_path / "mlruns" / "mlflow.db"
        db.parent.mkdir()
        db.write_bytes(b"not a database" * 100)
        uri = f"sqlite:///{db}"
    else:
        uri = "nosuchscheme://store"
    code = main(["run", "--tracking-uri", uri, *TINY_FLAGS])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2 and f"MLflow tracking store {uri}: cannot open it" in line


# --- item 9: output paths checked before training -------------------------------------


def test_out_directory_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = tracking_uri(tmp_path)
    target = tmp_path / "existing"
    target.mkdir()
    code = main(["run", "--tracking-uri", uri, "--out", str(target), *TINY_FLAGS])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2 and line.startswith(f"error: --out: {target} is a directory")
    assert not Path(uri.removeprefix("sqlite:///")).exists()  # no store, no run
    assert not (tmp_path / "cache").exists()  # nothing prepared either


def test_unwritable_results_dir_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["run", "--no-tracking", f"--set=tracking.results_dir={blocker}/r", *TINY_FLAGS])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2 and "tracking.results_dir" in line and "is not a directory" in line


# --- items 12, 13: numbers and files validated with the field's name ------------------


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--seed", "-1"], "seed"),
        (["--seed", "12345678901234567890"], "seed"),
        (["--set", "train.dense_lr=.inf"], "train.dense_lr"),
        (["--set", "train.sparse_lr=.nan"], "train.sparse_lr"),
        (["--set", "embedding.options.dim=100000000"], "embedding.options.dim"),
        (["--seeds", "0,-2"], "seed"),
        (["--repeats", "100000000000000000000"], "--repeats"),
        (["--repeats", "0"], "--repeats"),
        (["--epochs", "0"], "train.epochs"),
    ],
)
def test_bad_numbers_fail_in_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], field: str
) -> None:
    uri = tracking_uri(tmp_path)
    code = main(["run", "--tracking-uri", uri, *TINY_FLAGS, *argv])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2 and field in line
    assert not Path(uri.removeprefix("sqlite:///")).exists()


def test_oversized_dim_names_the_bytes_it_would_need(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--no-tracking", *TINY_FLAGS, "--set", "embedding.options.dim=100000000"])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2 and "needs at least" in line and "bytes" in line and "available" in line


def test_binary_config_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "model.pt"
    binary.write_bytes(bytes(range(256)) * 4)
    assert main(["run", "--config", str(binary)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(binary) in line and "expected a YAML file" in line
    nul = tmp_path / "nul.yaml"
    nul.write_bytes(b"seed: 1\n\x00\x00")
    assert main(["run", "--config", str(nul)]) == 2
    assert "binary" in _one_error_line(capsys.readouterr().err)


def test_diverged_training_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = tracking_uri(tmp_path)
    code = main(
        [
            "run",
            "--tracking-uri",
            uri,
            *TINY_FLAGS,
            "--set=train.dense_optimizer=sgd",
            "--set=train.dense_lr=1e30",
        ]
    )
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2 and "training diverged" in line and "train.dense_lr" in line
    (run,) = _runs(uri)
    assert run.info.status == "FAILED"
    assert not list(Path("results").rglob("*.json"))


# --- item 2: results of different data never replace each other -----------------------


def _criteo_file(path: Path, seed: int, rows: int = 400) -> Path:
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(rows):
        ints = [str(int(v)) for v in rng.integers(0, 50, 13)]
        cats = [f"{int(v):08x}" for v in rng.integers(0, 30, 26)]
        lines.append("\t".join([str(int(rng.random() < 0.3)), *ints, *cats]))
    path.write_text("\n".join(lines) + "\n")
    return path


def _criteo_config(raw: Path, cache: Path, tracking: bool = False):
    return build_config(
        components={"dataset": "criteo-kaggle"},
        values={
            "dataset.raw": str(raw),
            "dataset.cache_dir": str(cache),
            "dataset.protocol": "random-811",
            "train.batch_size": 64,
            "train.progress": False,
            "train.threads": 1,
            "tracking.enabled": tracking,
        },
    )


def test_two_datasets_with_equal_options_keep_both_results(tmp_path: Path) -> None:
    a = execute(_criteo_config(_criteo_file(tmp_path / "a.tsv", 1), tmp_path / "cache-a"))
    b = execute(_criteo_config(_criteo_file(tmp_path / "b.tsv", 2), tmp_path / "cache-b"))
    assert a.config_hash == b.config_hash and a.data_fingerprint != b.data_fingerprint
    files = sorted(Path("results/runs/accuracy/criteo-kaggle").glob("*.json"))
    assert len(files) == 2
    kept = {json.loads(f.read_text())["data_fingerprint"]: f for f in files}
    assert set(kept) == {a.data_fingerprint, b.data_fingerprint}
    for result in (a, b):
        assert result.data_fingerprint[:12] in kept[result.data_fingerprint].name

    ma = execute_seeds(_criteo_config(tmp_path / "a.tsv", tmp_path / "cache-a"), [0, 1])
    mb = execute_seeds(_criteo_config(tmp_path / "b.tsv", tmp_path / "cache-b"), [0, 1])
    assert ma.config_hash == mb.config_hash
    aggregates = list(Path("results/runs/accuracy/criteo-kaggle/multiseed").glob("*.json"))
    assert {json.loads(f.read_text())["data_fingerprint"] for f in aggregates} == {
        ma.data_fingerprint,
        mb.data_fingerprint,
    }


def test_resumed_run_is_owned_by_the_resuming_process(tmp_path: Path) -> None:
    """A run reopened by another process carries that process's pid, so a start on the
    same store does not mark it dead."""
    uri = tracking_uri(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from suite.tracking import Tracker; "
            "print(Tracker.start(sys.argv[1], 'recsuite', 'dies').run_id)",
            uri,
        ],
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    run_id = proc.stdout.strip().splitlines()[-1]
    from suite.tracking import Tracker

    Tracker.resume(uri, run_id)
    Tracker.start(uri, "recsuite", "other").finish()  # cleans dead runs on its way
    run = MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.info.status == "RUNNING"
    assert run.data.tags["suite.pid"] == str(os.getpid())


@pytest.mark.slow  # two spawned workers import torch and the suite, then train
def test_sigterm_to_a_parallel_reproduction_stops_its_workers_and_ends_their_runs(
    tmp_path: Path,
) -> None:
    from suite.tracking import PID_TAG, process_alive

    uri = tracking_uri(tmp_path)
    flags = [f"--set=dataset.options.{k}={v}" for k, v in TINY_DATA.items()]
    flags += ["--set=train.epochs=200", "--set=train.eval_every_steps=20"]
    proc = _suite(
        "reproduce", "--paper", "dlrm", "--workers", "2", "--quiet",
        "--out", str(tmp_path / "report"), "--tracking-uri", uri, *flags,
    )  # fmt: skip
    _wait_for_training(uri, proc, count=2)
    workers = [
        int(r.data.tags[PID_TAG]) for r in _runs(uri) if r.info.status == "RUNNING" and
        "mlflow.parentRunId" in r.data.tags
    ]  # fmt: skip
    assert len(workers) == 2
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "interrupted by SIGTERM" in err
    assert not any(process_alive(pid, "") for pid in workers)  # none left training, orphaned
    assert {r.info.status for r in _runs(uri)} == {"KILLED"}
