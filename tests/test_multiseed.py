"""Accuracy over seeds: one parent MLflow run, a child per seed, mean and sample std."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

import suite.tasks.accuracy as accuracy
from suite.cli import main
from suite.errors import ConfigError
from suite.runs.multiseed import MultiSeedResult, execute_seeds, parse_seeds, seeds_from
from tests.conftest import TINY_DATA, tiny_config, tracking_uri

FAST = ["train.max_steps=6"]


def _runs(client: MlflowClient, query: str) -> list:
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids, filter_string=query)


def test_parent_run_with_one_child_per_seed(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    config = tiny_config(tracking=True, overrides=[f"tracking.uri={uri}", *FAST])
    out = tmp_path / "agg.json"
    agg = execute_seeds(config, [1, 2, 3], out=out)

    client = MlflowClient(tracking_uri=uri)
    (parent,) = _runs(client, "tags.`suite.multiseed` = 'true'")
    assert parent.info.run_id == agg.mlflow_run_id
    assert parent.info.status == "FINISHED"
    children = _runs(client, f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(int(c.data.tags["suite.seed"]) for c in children) == [1, 2, 3]
    assert all(c.info.status == "FINISHED" for c in children)
    assert parent.data.tags["suite.data_fingerprint"] == agg.data_fingerprint
    assert parent.data.tags["suite.config_hash"] == agg.config_hash
    assert {c.data.tags["suite.seedless_config_hash"] for c in children} == {agg.config_hash}
    assert parent.data.params["seeds"] == "1,2,3"
    assert "seed" not in parent.data.params

    for name in ("val_auc", "test_auc", "test_logloss"):
        values = np.array([c.data.metrics[name] for c in children])
        assert parent.data.metrics[f"{name}_mean"] == pytest.approx(values.mean())
        assert parent.data.metrics[f"{name}_std"] == pytest.approx(values.std(ddof=1))
        assert agg.mean[name] == pytest.approx(values.mean())
        assert agg.std[name] == pytest.approx(values.std(ddof=1))
    assert len({c.data.metrics["test_auc"] for c in children}) == 3  # seeds differ

    saved = MultiSeedResult.read(out)
    assert saved.seeds == [1, 2, 3] and len(saved.per_seed) == 3
    assert [r.seed for r in saved.per_seed] == [1, 2, 3]
    assert saved.checkpoint["rule"] == "best"
    assert [c["checkpoint"] for c in saved.checkpoint["per_seed"]] == ["best"] * 3
    assert saved.std_ddof == 1
    artifact = client.download_artifacts(parent.info.run_id, "multiseed.json", str(tmp_path))
    assert json.loads(Path(artifact).read_text())["mean"] == pytest.approx(agg.mean)
    assert list(Path("results/runs/accuracy/criteo-synth/multiseed").glob("*.json"))


def test_a_failing_seed_fails_the_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = tracking_uri(tmp_path)
    real = accuracy.AccuracyTask.run

    def run(self, ctx):
        if ctx.config.seed == 2:
            raise RuntimeError("boom")
        return real(self, ctx)

    monkeypatch.setattr(accuracy.AccuracyTask, "run", run)
    config = tiny_config(tracking=True, overrides=[f"tracking.uri={uri}", *FAST])
    with pytest.raises(RuntimeError, match="boom"):
        execute_seeds(config, [1, 2])
    client = MlflowClient(tracking_uri=uri)
    (parent,) = _runs(client, "tags.`suite.multiseed` = 'true'")
    assert parent.info.status == "FAILED"
    children = _runs(client, f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(c.info.status for c in children) == ["FAILED", "FINISHED"]


def test_cli_repeats_prints_mean_and_std(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = [arg for k, v in TINY_DATA.items() for arg in ("--set", f"dataset.options.{k}={v}")]
    out = tmp_path / "agg.json"
    code = main(
        [
            "run",
            "--repeats",
            "2",
            "--seed",
            "5",
            "--no-tracking",
            "--quiet",
            "--set",
            "train.threads=1",
            "--set",
            FAST[0],
            "--out",
            str(out),
            *flags,
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "seeds 5, 6" in printed and "±" in printed and "ddof=1" in printed
    saved = MultiSeedResult.read(out)
    assert saved.seeds == [5, 6]
    assert saved.mlflow_run_id is None


def test_single_seed_has_no_std(tmp_path: Path) -> None:
    agg = execute_seeds(tiny_config(overrides=FAST), [0], out=tmp_path / "one.json")
    assert agg.std["test_auc"] is None
    assert agg.mean["test_auc"] == agg.per_seed[0].metrics["test_auc"]


def test_seed_lists() -> None:
    assert parse_seeds("1, 2,3") == [1, 2, 3]
    assert seeds_from(repeats=3, offset=10) == [10, 11, 12]
    assert seeds_from([4, 7]) == [4, 7]
    with pytest.raises(ConfigError):
        parse_seeds("1,x")
    with pytest.raises(ConfigError):
        seeds_from([1, 1])
    with pytest.raises(ConfigError):
        seeds_from(repeats=0)
    with pytest.raises(SystemExit):
        main(["run", "--seeds", "1,2", "--repeats", "2"])
