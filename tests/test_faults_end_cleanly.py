"""The last fault and bad-input cases end in one clear line and lose nothing (issue 71,
item 6): sizes checked before allocating, ``--config`` read from regular files only and
with a size limit, duplicate YAML keys refused with their line, free space for results
checked before training (and the figures in MLflow if the folder fails anyway), a path
that cannot exist named as such, no store lock left behind, a SIGKILLed run closed by the
next command that opens its store.

Real processes, a real SQLite MLflow store and real small filesystems (a tmpfs, as in
``tests/test_disk_full.py``; skipped where mounting is not permitted).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from suite.cli import main
from suite.config import MAX_CONFIG_BYTES, build_config
from suite.errors import ConfigError, DiskFullError, SuiteError
from suite.runs.single import execute
from suite.tracking import (
    HOST_TAG,
    KILLED_BY_TAG,
    PID_START_TAG,
    PID_TAG,
    RunStore,
    Tracker,
    open_client,
    store_lock,
)
from tests.conftest import TINY_DATA, tiny_config, tracking_uri
from tests.test_disk_full import _mount, fill

REPO = Path(__file__).resolve().parents[1]
TINY_FLAGS = [f"--set=dataset.options.{k}={v}" for k, v in TINY_DATA.items()] + [
    "--batch-size=128",
    "--quiet",
    "--set=train.threads=1",
]


def _suite(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "suite.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The failed command's stderr: one ``error:`` line, no traceback."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


# --- sizes checked against memory and disk before allocating --------------------------


@pytest.mark.parametrize("command", ["prepare", "run"])
def test_a_trillion_synthetic_rows_are_refused_before_allocating(
    tmp_path: Path, command: str
) -> None:
    if command == "prepare":
        argv = ["prepare", "criteo-synth", "--cache-dir", str(tmp_path / "cache")]
        argv += ["--set", "train_rows=1000000000000", "--quiet"]
    else:
        argv = ["run", "--no-tracking", "--quiet", "--set=dataset.options.train_rows=1000000000000"]
        argv += [f"--set=dataset.cache_dir={tmp_path / 'cache'}"]
    line = _one_line(_suite(*argv, timeout=60))
    assert "dataset.options.train_rows" in line and "1,000,000,100,000 rows" in line
    assert "of memory" in line and "use fewer rows" in line
    assert "MemoryError" not in line


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted after the test."""
    yield from _mount(tmp_path / "small", "2m")


def test_rows_that_fit_in_memory_but_not_on_the_cache_disk_are_refused(small_fs: Path) -> None:
    from suite.data.source import get_prepared

    config = build_config(
        components={"dataset": "criteo-synth"},
        values={"dataset.cache_dir": str(small_fs / "cache")},
        overrides=["dataset.options.train_rows=100000"],
    )
    with pytest.raises(DiskFullError) as caught:
        get_prepared(config.dataset, progress=False)
    message = str(caught.value)
    assert "disk full (needs ~" in message and "point dataset.cache_dir" in message
    assert not list(small_fs.rglob("*.npy"))


# --- --config reads regular files only, with a size limit ------------------------------


def test_config_from_dev_zero_is_refused_without_reading(tmp_path: Path) -> None:
    line = _one_line(_suite("run", "--config", "/dev/zero", "--print-config", timeout=30))
    assert "/dev/zero is not a regular file" in line


def test_config_from_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    line = _one_line(_suite("run", "--config", str(fifo), "--print-config", timeout=30))
    assert f"{fifo} is not a regular file" in line


def test_config_over_the_size_limit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * (MAX_CONFIG_BYTES // 10 + 1) + "seed: 1\n")
    assert main(["run", "--config", str(big), "--print-config"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{big} is over 1 MiB" in err[0]


def test_config_that_is_a_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--config", str(tmp_path), "--print-config"]) == 2
    assert f"{tmp_path} is a directory" in capsys.readouterr().err


# --- duplicate YAML keys ------------------------------------------------------------------


def test_a_duplicate_yaml_key_is_refused_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("seed: 3\ntrain: {epochs: 1, epochs: 5}\n")
    with pytest.raises(ConfigError) as caught:
        build_config([path])
    message = str(caught.value)
    assert f"{path}:2:" in message and "duplicate key 'epochs'" in message
    block = tmp_path / "block.yaml"
    block.write_text("train:\n  epochs: 1\n  batch_size: 64\n  epochs: 5\n")
    with pytest.raises(
        ConfigError, match=r"block\.yaml:4:.*duplicate key 'epochs' \(first at line 2\)"
    ):
        build_config([block])


def test_the_same_key_in_different_mappings_and_yaml_merges_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "base: &base {epochs: 2}\ntrain:\n  <<: *base\n  epochs: 3\nmodel: {name: dlrm}\n"
        "embedding: {name: full}\n"
    )
    from suite.config import load_yaml

    data = load_yaml(path)
    assert data["train"]["epochs"] == 3


# --- results: space checked before training; MLflow keeps the figures ---------------------


def test_a_full_results_disk_is_refused_before_training(tmp_path: Path, small_fs: Path) -> None:
    fill(small_fs)
    uri = tracking_uri(tmp_path)
    results = small_fs / "results"
    done = _suite(
        "run", "--tracking-uri", uri, f"--set=tracking.results_dir={results}", *TINY_FLAGS
    )
    line = _one_line(done)
    assert line.startswith(f"error: {results}/") and ": disk full (needs ~" in line
    assert "point tracking.results_dir elsewhere" in line
    # refused before any MLflow run (or training) began
    client = MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    assert not (client.search_runs(ids) if ids else [])


def test_a_results_disk_filling_during_training_keeps_the_test_metrics_in_mlflow(
    tmp_path: Path, small_fs: Path
) -> None:
    uri = tracking_uri(tmp_path)
    results = small_fs / "results"
    config = tiny_config(
        tracking=True, overrides=[f"tracking.uri={uri}", f"tracking.results_dir={results}"]
    )
    filled: list[Path] = []

    def fill_once(metrics: dict[str, float], step: int) -> None:
        if not filled:
            filled.append(fill(small_fs))

    with pytest.raises(SuiteError) as caught:
        execute(config, on_validation=fill_once)
    assert "disk full" in str(caught.value) and "\n" not in str(caught.value)
    client = MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    (run,) = client.search_runs(ids)
    assert run.info.status == "FAILED"
    assert {"test_auc", "test_logloss"} <= set(run.data.metrics)


# --- a path that cannot exist -------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux's /proc")
def test_out_under_proc_is_named_a_path_that_cannot_exist(tmp_path: Path) -> None:
    done = _suite("run", "--no-tracking", "--out", "/proc/x/y.json", *TINY_FLAGS, timeout=60)
    line = _one_line(done)
    assert "/proc/x/y.json is a path that cannot exist" in line
    assert "disk full" not in line


# --- the store: no lock left, a SIGKILLed run closed by the next command --------------------


def test_a_store_on_a_full_disk_leaves_no_lock(small_fs: Path) -> None:
    fill(small_fs)
    uri = f"sqlite:///{small_fs / 'mlflow.db'}"
    with pytest.raises(SuiteError):
        open_client(uri)
    assert sorted(p.name for p in small_fs.iterdir()) == ["filler"]


def test_the_store_lock_is_removed_after_use_and_still_excludes(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with store_lock(uri):
        assert (tmp_path / "mlflow.db.lock").exists()
    assert not (tmp_path / "mlflow.db.lock").exists()
    open_client(uri)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["mlflow.db"]


def _dead_running_run(uri: str, experiment: str) -> str:
    """A RUNNING run in ``experiment`` owned by a process of this host that is gone (what
    a SIGKILLed ``suite run`` leaves)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    client, _ = open_client(uri)
    experiment_id = client.create_experiment(experiment)
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(gone.pid), PID_START_TAG: ""}
    return client.create_run(experiment_id, tags=tags).info.run_id


def test_a_sigkilled_run_is_closed_by_the_next_command_that_opens_the_store(
    tmp_path: Path,
) -> None:
    uri = tracking_uri(tmp_path)
    dead = _dead_running_run(uri, "somewhere-else")
    RunStore(uri)  # what `suite resume`, a study or a submission opens
    run = MlflowClient(tracking_uri=uri).get_run(dead)
    assert run.info.status == "KILLED"
    assert "died without ending the run" in run.data.tags[KILLED_BY_TAG]

    # a run's start closes one in another experiment too
    other = _dead_running_run(uri, "another")
    Tracker.start(uri, "fresh", "probe").finish()
    assert MlflowClient(tracking_uri=uri).get_run(other).info.status == "KILLED"
