"""A run killed with SIGKILL and resumed ends bit for bit where the uninterrupted run does,
in one MLflow run; bad checkpoints are refused with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

REPO = Path(__file__).resolve().parents[1]
# Long enough per epoch (375 steps of 32) that the kill lands mid-epoch.
FLAGS = [
    "run",
    "--dataset=criteo-synth",
    "--set=dataset.options.train_rows=12000",
    "--set=dataset.options.val_rows=2000",
    "--set=dataset.options.test_rows=2000",
    "--set=dataset.options.vocab_scale=0.0002",
    "--set=dataset.options.keep_below=200",
    "--batch-size=32",
    "--epochs=2",
    "--set=train.eval_every_steps=150",
    "--set=train.threads=1",
    "--set=train.progress=false",
    "--set=train.checkpoint_every=50",
]
TIMING = {"train_samples_per_s"}  # wall-clock figures cannot repeat bit for bit


def _suite(args: list[str], cwd: Path, uri: str, **kwargs) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "RECSUITE_CACHE": str(cwd / "cache"),
        "MLFLOW_TRACKING_URI": uri,
    }
    code = "import sys; from suite.cli import main; sys.exit(main())"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-2000:]
    return out


def _checkpoint_steps(root: Path) -> list[int]:
    steps = []
    for manifest in root.glob("checkpoints/*/ckpt-*/manifest.json"):
        try:
            steps.append(json.loads(manifest.read_text())["loop"]["step"])
        except (OSError, ValueError, KeyError):
            continue
    return steps


@pytest.mark.slow  # three CLI processes train two epochs each
def test_sigkill_then_resume_is_bit_identical_in_one_mlflow_run(tmp_path: Path) -> None:
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "killed"
    ref_dir.mkdir(), run_dir.mkdir()
    ref_uri = f"sqlite:///{ref_dir / 'mlflow.db'}"
    uri = f"sqlite:///{run_dir / 'mlflow.db'}"
    _finish(_suite([*FLAGS, f"--out={ref_dir / 'result.json'}"], ref_dir, ref_uri))
    assert not list(ref_dir.glob("checkpoints/*/ckpt-*")), "a finished run keeps no checkpoints"

    proc = _suite(FLAGS, run_dir, uri)
    deadline = time.monotonic() + 240
    while not any(s >= 100 for s in _checkpoint_steps(run_dir)):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_at = max(_checkpoint_steps(run_dir))
    assert killed_at < 375, "the kill must land in the first epoch"

    out = _finish(_suite([*FLAGS, "--resume", f"--out={run_dir / 'result.json'}"], run_dir, uri))
    assert "test_auc" in out
    ref = json.loads((ref_dir / "result.json").read_text())
    got = json.loads((run_dir / "result.json").read_text())
    for name, value in ref["metrics"].items():
        if name not in TIMING:
            assert got["metrics"][name] == value, name  # bit for bit, no tolerance
    assert got["details"]["validation_history"] == ref["details"]["validation_history"]
    assert got["details"]["checkpoint_step"] == ref["details"]["checkpoint_step"]

    client = MlflowClient(tracking_uri=uri)
    experiments = client.search_experiments()
    runs = client.search_runs([e.experiment_id for e in experiments])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].info.run_id == got["mlflow_run_id"]
    # every validation is in the one run's history with the uninterrupted run's value (steps
    # validated again after the resume are logged twice, with the same value); the last step
    # also carries the reported figure (the kept checkpoint's), MLflow's "latest"
    logged: dict[int, set[float]] = {}
    for m in client.get_metric_history(runs[0].info.run_id, "val_auc"):
        logged.setdefault(m.step, set()).add(m.value)
    last = int(ref["details"]["steps"])
    for record in ref["details"]["validation_history"]:
        step = int(record["step"])
        allowed = {record["val_auc"]} | ({ref["metrics"]["val_auc"]} if step == last else set())
        assert record["val_auc"] in logged[step] and logged[step] <= allowed


@pytest.mark.parametrize("damage", ["flip", "truncate", "manifest"])
def test_corrupt_checkpoint_is_refused_with_one_line(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from suite.cli import main, make_parser
    from suite.commands.common import config_from_args
    from suite.data.source import get_prepared
    from suite.engine.build import build_model
    from suite.engine.checkpoint import run_checkpoints
    from suite.engine.train import train

    flags = [*FLAGS, "--set=train.max_steps=60", "--no-tracking"]
    args = make_parser().parse_args(flags)
    config = config_from_args(args)
    data = get_prepared(config.dataset, progress=False)
    checkpoints = run_checkpoints(config, data.fingerprint, resume=False)
    assert checkpoints is not None
    train(
        build_model(config, data),
        data,
        config.train,
        config.seed,
        torch.device("cpu"),
        checkpoints=checkpoints,
    )
    checkpoints.close()  # as a killed run leaves them
    ckpt = max(tmp_path.glob("checkpoints/*/ckpt-*"))
    if damage == "manifest":
        target = ckpt / "manifest.json"
        target.write_text('{"format": "something-else"}')
    else:
        target = next(p for p in ckpt.iterdir() if p.suffix == ".distcp")
        data_bytes = bytearray(target.read_bytes())
        if damage == "flip":
            data_bytes[len(data_bytes) // 2] ^= 0xFF
        else:
            data_bytes = data_bytes[: len(data_bytes) // 2]
        target.write_bytes(bytes(data_bytes))
    capsys.readouterr()
    assert main([*flags, "--resume"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and str(target.relative_to(tmp_path)) in lines[0]
    expected = {"flip": "corrupt", "truncate": "truncated", "manifest": "not a recsuite"}[damage]
    assert expected in lines[0]


class Killed(Exception):
    """Stands for the process dying mid-run (in process: the fast variant of the test above)."""


def test_suite_resume_continues_a_failed_run_in_its_mlflow_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from suite.cli import main
    from suite.runs.single import execute
    from tests.conftest import tiny_config, tracking_uri

    uri = tracking_uri(tmp_path)
    config = tiny_config(
        tracking=True,
        overrides=[
            "train.epochs=2",
            "train.eval_every_steps=10",
            "train.checkpoint_every=7",
            f"tracking.uri={uri}",
        ],
    )
    reference = execute(
        config.with_overrides({"tracking.enabled": False, "train.checkpoint_every": None})
    )

    def die(metrics: dict[str, float], step: int) -> None:
        if step >= 40:
            raise Killed

    with pytest.raises(Killed):
        execute(config, on_validation=die)
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FAILED"

    out = tmp_path / "resumed.json"
    assert main(["resume", run.info.run_id, "--tracking-uri", uri, "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["mlflow_run_id"] == run.info.run_id
    for name, value in reference.metrics.items():
        if name not in TIMING:
            assert got["metrics"][name] == value, name
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert not list(tmp_path.glob("checkpoints/*/ckpt-*")), "a finished run keeps no checkpoints"
    capsys.readouterr()
    assert main(["resume", run.info.run_id, "--tracking-uri", uri]) == 2
    assert "no checkpoint to resume from" in capsys.readouterr().err
