"""Every figure a run draws reaches its MLflow run, the CLI says where it lies, and each
run's default MLflow name says what ran on what under which config (issue 34, items 3-4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from suite.cli import main
from suite.runs.multiseed import execute_seeds
from suite.runs.single import execute
from tests.conftest import TINY_DATA, tiny_config, tracking_uri

FAST = ["train.max_steps=4"]


def _run_names(uri: str) -> dict[str, str]:
    """Run id -> run name of every run in the store."""
    client = MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return {r.info.run_id: r.info.run_name for r in client.search_runs(ids)}


def test_characterize_plots_are_mlflow_artifacts_and_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = tracking_uri(tmp_path)
    flags = [arg for k, v in TINY_DATA.items() for arg in ("--set", f"dataset.options.{k}={v}")]
    code = main(
        ["run", "--task", "characterize", "--dataset", "criteo-synth", "--tracking-uri", uri]
        + ["--quiet", "--set", "train.threads=1", *flags]
    )
    assert code == 0
    printed = capsys.readouterr().out

    client = MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    (run,) = client.search_runs(ids)
    drawn = sorted(Path("results/runs/plots/characterize").rglob("*.png"))
    assert drawn
    logged = sorted(Path(a.path).name for a in client.list_artifacts(run.info.run_id, "plots"))
    assert logged == sorted(p.name for p in drawn)
    local = client.download_artifacts(run.info.run_id, f"plots/{drawn[0].name}", str(tmp_path))
    assert Path(local).read_bytes() == drawn[0].read_bytes()

    (line,) = [x for x in printed.splitlines() if x.strip().startswith("plots:")]
    assert sorted(Path(p).name for p in line.split(":", 1)[1].split(", ")) == logged
    assert all(Path(p.strip()).is_file() for p in line.split(":", 1)[1].split(","))
    assert run.info.run_name.startswith("characterize ")


def test_default_names_differ_by_config_and_say_what_ran(tmp_path: Path) -> None:
    # the case: same model, method and data, configs that differ in one option
    uri = tracking_uri(tmp_path)
    runs = [
        execute(
            tiny_config(embedding="qr", tracking=True, overrides=[f"tracking.uri={uri}", *FAST, lr])
        )
        for lr in ("train.dense_lr=0.1", "train.dense_lr=0.05")
    ]
    names = _run_names(uri)
    assert len(set(names.values())) == 2
    for result in runs:
        hash8 = result.config_hash[:8]
        assert names[result.mlflow_run_id] == f"accuracy dlrm/qr criteo-synth {hash8}"


def test_a_given_run_name_wins_and_leaves_the_hash_alone(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    base = tiny_config(tracking=True, overrides=[f"tracking.uri={uri}", *FAST])
    named = base.with_overrides({"tracking.run_name": "my baseline"})
    assert named.config_hash() == base.config_hash()
    result = execute(named)
    assert _run_names(uri)[result.mlflow_run_id] == "my baseline"


def test_multiseed_parent_and_children_names(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    config = tiny_config(embedding="qr", tracking=True, overrides=[f"tracking.uri={uri}", *FAST])
    agg = execute_seeds(config, [1, 2])
    names = _run_names(uri)
    stem = f"accuracy dlrm/qr criteo-synth {agg.config_hash[:8]}"
    assert names[agg.mlflow_run_id] == f"{stem} seeds 1,2"
    assert sorted(names[r.mlflow_run_id] for r in agg.per_seed) == [
        f"{stem} seed 1",
        f"{stem} seed 2",
    ]
    # the per-seed name is tracking config, outside the hash: same hash as a plain run
    assert agg.per_seed[0].config_hash == config.with_overrides({"seed": 1}).config_hash()
