"""A command's stdout holds its results only (issue 71, item 1): MLflow's "View run ..."
links and download bars, progress bars and warnings go to stderr or nowhere.

A real ``mlflow server`` (MLflow prints its links only for a tracking server), a real
``suite run`` in a subprocess, its stdout read by a parser of the result lines.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = {
    "train_rows": 2000,
    "val_rows": 500,
    "test_rows": 500,
    "vocab_scale": 0.0002,
    "keep_below": 200,
}

HEADER = re.compile(
    r"^(?P<task>[\w-]+) (?P<model>[\w-]+)/(?P<embedding>[\w-]+) on (?P<dataset>[\w-]+) "
    r"\(seed (?P<seed>-?\d+), config (?P<config>[0-9a-f]+), data (?P<data>[0-9a-f]+)\)$"
)
METRIC = re.compile(
    r"^  (?P<name>[a-z][a-z0-9_]*) +(?P<value>-?[0-9][0-9,]*(\.[0-9]+)?( [KMGT]?i?B)?)$"
)
CHECKPOINT = re.compile(r"^  checkpoint: \w+ \(step \d+\)$")
PLOTS = re.compile(r"^  plots: \S.*$")
MLFLOW = re.compile(r"^  mlflow run (?P<run_id>[0-9a-f]{32}) in (?P<uri>\S+)$")


def parse_result(stdout: str) -> dict:
    """``suite run``'s stdout as ``{"header": {...}, "metrics": {...}, "run_id": ...}``;
    any line that is not one of the result's own fails."""
    lines = stdout.splitlines()
    assert lines, "no output"
    head = HEADER.match(lines[0])
    assert head, f"not a result header: {lines[0]!r}"
    parsed: dict = {"header": head.groupdict(), "metrics": {}, "run_id": None}
    for line in lines[1:]:
        if found := METRIC.match(line):
            parsed["metrics"][found["name"]] = found["value"]
        elif found := MLFLOW.match(line):
            parsed["run_id"] = found["run_id"]
        else:
            assert CHECKPOINT.match(line) or PLOTS.match(line), f"not a result line: {line!r}"
    return parsed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    """A real ``mlflow server`` on a SQLite store in tmp_path; its URL."""
    port = _free_port()
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--default-artifact-root",
            str(tmp_path / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.skip(
                        f"mlflow server did not start: {(tmp_path / 'server.log').read_text()[-500:]}"
                    )
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.mark.slow
def test_a_run_tracked_on_a_server_prints_results_only_on_stdout(
    tmp_path: Path, mlflow_server: str
) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"):
        env.pop(name, None)
    flags = [f"--set=dataset.options.{k}={v}" for k, v in TINY.items()]
    done = subprocess.run(
        [sys.executable, "-m", "suite.cli", "run", "--tracking-uri", mlflow_server, *flags]
        + ["--set=train.max_steps=5", "--batch-size=128", "--set=train.threads=1"]
        + [f"--set=dataset.cache_dir={tmp_path / 'cache'}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    parsed = parse_result(done.stdout)  # every stdout line is a result line
    assert parsed["header"]["task"] == "accuracy" and parsed["run_id"]
    assert {"test_auc", "test_logloss", "embedding_bytes"} <= set(parsed["metrics"])
    assert "View run" not in done.stdout and "View experiment" not in done.stdout
    assert "train:" in done.stderr  # progress bars go to stderr


def test_the_parser_refuses_mlflows_links() -> None:
    text = (
        "🏃 View run x at: http://h/#/experiments/1/runs/abc\n"
        "accuracy dlrm/full on criteo-synth (seed 0, config d3c4d22b8f0dfae6, data 13c21eb0a51f)\n"
    )
    with pytest.raises(AssertionError, match="not a result header"):
        parse_result(text)


def test_a_run_on_the_default_store_prints_results_only_on_stdout(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.pop("MLFLOW_TRACKING_URI", None)
    flags = [f"--set=dataset.options.{k}={v}" for k, v in TINY.items()]
    done = subprocess.run(
        [sys.executable, "-m", "suite.cli", "run", *flags, "--set=train.max_steps=5"]
        + ["--batch-size=128", "--set=train.threads=1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    parsed = parse_result(done.stdout)
    assert parsed["run_id"] and "test_auc" in parsed["metrics"]


def test_the_cli_turns_mlflows_console_output_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from suite.cli import QUIET_MLFLOW, main

    for name in QUIET_MLFLOW:
        monkeypatch.delenv(name, raising=False)
    main([])  # any command
    assert os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] == "true"
    assert os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"
    monkeypatch.setenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "false")  # the user's own
    main([])
    assert os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] == "false"


def test_an_accuracy_run_logs_its_validation_curve_and_roc(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from suite.runs.single import execute
    from tests.conftest import tiny_config, tracking_uri

    uri = tracking_uri(tmp_path)
    config = tiny_config(tracking=True, overrides=[f"tracking.uri={uri}", "train.max_steps=20"])
    result = execute(config)
    drawn = [Path(p) for p in result.details["plots"]]
    assert [p.name for p in drawn] == ["validation_curve.png", "roc.png"]
    assert all(p.is_file() and p.stat().st_size > 1000 for p in drawn)
    client = MlflowClient(tracking_uri=uri)
    logged = {Path(a.path).name for a in client.list_artifacts(result.mlflow_run_id, "plots")}
    assert logged == {"validation_curve.png", "roc.png"}
    experiment = client.get_experiment(client.get_run(result.mlflow_run_id).info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_roc_points_run_from_the_corner_to_the_corner() -> None:
    import numpy as np

    from suite.tasks.accuracy_plots import roc_points

    fpr, tpr = roc_points(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8]))
    assert (fpr[0], tpr[0]) == (0.0, 0.0) and (fpr[-1], tpr[-1]) == (1.0, 1.0)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
    assert area == 0.75
