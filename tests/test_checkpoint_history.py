"""A resumed run trains again from its last checkpoint to where it was killed; the figures
of those steps (validations, training loss) must not enter the MLflow history twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from suite.runs.single import execute
from tests.conftest import tiny_config, tracking_uri


class Killed(Exception):
    """Stands for the process dying right after a validation was logged."""


def _histories(uri: str) -> dict[str, list[tuple[int, float]]]:
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FINISHED"
    return {
        key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        for key in run.data.metrics
    }


def test_resumed_run_logs_each_step_once(tmp_path: Path) -> None:
    overrides = [
        "train.epochs=2",
        "train.eval_every_steps=10",
        "train.checkpoint=final",
    ]
    ref_uri = tracking_uri(tmp_path / "ref")
    execute(tiny_config(tracking=True, overrides=[*overrides, f"tracking.uri={ref_uri}"]))

    uri = tracking_uri(tmp_path / "killed")
    config = tiny_config(
        tracking=True,
        overrides=[*overrides, "train.checkpoint_every=7", f"tracking.uri={uri}"],
    )

    def die(metrics: dict[str, float], step: int) -> None:
        if step >= 40:  # after the validation at 40 is logged; the last checkpoint is at 35
            raise Killed

    with pytest.raises(Killed):
        execute(config, on_validation=die)
    execute(config, resume=True)

    timing = {"train_samples_per_s", "train_seconds", "eval_seconds"}
    got, ref = _histories(uri), _histories(ref_uri)
    assert set(got) == set(ref)
    assert got["val_auc"], "the run validated"
    for key, entries in got.items():
        steps = [step for step, _ in entries]
        assert len(steps) == len(set(steps)), f"{key}: a step logged twice: {entries}"
        if key not in timing:
            assert entries == ref[key], key  # and the uninterrupted run's history, bit for bit
    assert 40 in {step for step, _ in got["val_auc"]}
