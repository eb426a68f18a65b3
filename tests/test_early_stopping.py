"""Runs that train to convergence: ``train.patience`` stops a plateaued run (keeping its
best checkpoint, at the same step when resumed), and ``still_improving`` flags a run whose
budget ran out while validation AUC still rose."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from suite.config import RunConfig
from suite.data.source import get_prepared
from suite.engine.build import build_model
from suite.engine.checkpoint import run_checkpoints
from suite.engine.train import (
    TrainOutcome,
    evaluate,
    patience_spent,
    still_rising,
    train,
    validations_since_best,
)
from suite.errors import ConfigError
from suite.results import TaskResult
from tests.conftest import tiny_config, tracking_uri

CPU = torch.device("cpu")
# 1000 training rows, 8 steps an epoch: validation AUC peaks at step 24 (epoch 3), then
# the model overfits and it slides (0.586 -> 0.577 by epoch 20).
PLATEAU = ["dataset.options.train_rows=1000", "train.epochs=20"]


def _history(*aucs: float) -> list[dict[str, float]]:
    return [{"step": float(8 * (i + 1)), "val_auc": auc} for i, auc in enumerate(aucs)]


def _train(config: RunConfig, **kwargs) -> tuple[TrainOutcome, dict[str, float]]:
    """Train ``config`` on CPU; the outcome and the kept model's validation metrics."""
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    outcome = train(model, data, config.train, config.seed, CPU, **kwargs)
    val = evaluate(model, data.split("val"), config.train.eval_batch_size, CPU)
    return outcome, val


def test_validations_since_best_counts_only_gains_over_min_delta() -> None:
    assert validations_since_best([], 0.0) == 0
    assert validations_since_best(_history(0.6, 0.7, 0.65, 0.69), 0.0) == 2
    assert validations_since_best(_history(0.6, 0.7, 0.705), 0.0) == 0
    assert validations_since_best(_history(0.6, 0.7, 0.705), 0.01) == 1  # too small a gain
    assert validations_since_best(_history(math.nan, math.nan), 0.0) == 2  # NaN never a best
    config = tiny_config(overrides=["train.patience=2"])
    assert patience_spent(_history(0.6, 0.7, 0.65, 0.69), config.train)
    assert not patience_spent(_history(0.6, 0.7, 0.65), config.train)
    assert not patience_spent(_history(0.6, 0.7, 0.65, 0.69), tiny_config().train)


def test_still_rising_needs_the_best_at_the_end_by_more_than_min_delta() -> None:
    assert still_rising(_history(0.6, 0.65, 0.7), 0.0)
    assert still_rising(_history(0.6, 0.7, 0.69), 0.0)  # one dip at the end is noise
    assert not still_rising(_history(0.6, 0.7, 0.69, 0.68), 0.0)  # two are a plateau
    assert not still_rising(_history(0.6, 0.695, 0.7), 0.01)  # within the noise floor
    assert still_rising(_history(0.6), 0.0)  # one validation shows no plateau
    assert not still_rising([], 0.0) and not still_rising(_history(math.nan), 0.0)


def test_default_config_hash_is_unchanged_and_new_fields_are_checked() -> None:
    # hashes of configs written before early stopping existed: they must not move
    assert RunConfig().config_hash() == "324bea15822dff86"
    assert tiny_config().config_hash() == "26dccb03556132f8"
    identity = tiny_config().identity()["train"]
    assert "patience" not in identity and "min_delta" not in identity
    base = tiny_config().config_hash()
    assert tiny_config(overrides=["train.patience=3"]).config_hash() != base
    assert tiny_config(overrides=["train.min_delta=0.001"]).config_hash() != base
    with pytest.raises(ConfigError, match="train.patience"):
        tiny_config(overrides=["train.patience=0"])
    with pytest.raises(ConfigError, match="train.min_delta"):
        tiny_config(overrides=["train.min_delta=-0.1"])


def test_patience_stops_a_plateau_and_keeps_the_best_checkpoint() -> None:
    outcome, val = _train(tiny_config(overrides=[*PLATEAU, "train.patience=3"]))
    aucs = [r["val_auc"] for r in outcome.history]
    assert outcome.stopped_early and not outcome.still_improving
    assert outcome.steps < 20 * 8 and outcome.steps == outcome.history[-1]["step"]
    best = aucs.index(max(aucs))
    assert len(aucs) == best + 1 + 3  # exactly `patience` validations after the best
    assert outcome.best_step == outcome.checkpoint_step == outcome.history[best]["step"]
    assert val["auc"] == max(aucs)  # the model holds the best checkpoint, not the last
    assert outcome.convergence() == {
        "stopped_early": True,
        "still_improving": False,
        "best_step": outcome.best_step,
        "validations": len(aucs),
    }


def test_without_patience_training_runs_the_whole_budget_as_before() -> None:
    plateau = ["dataset.options.train_rows=1000", "train.epochs=8"]
    default, default_val = _train(tiny_config(overrides=plateau))
    lax, lax_val = _train(tiny_config(overrides=[*plateau, "train.patience=100"]))
    assert default.steps == lax.steps == 8 * 8 and len(default.history) == 8
    assert default.history == lax.history and default_val == lax_val  # bit for bit
    assert default.checkpoint_step == lax.checkpoint_step == default.best_step
    assert not default.stopped_early and not lax.stopped_early
    assert not default.still_improving  # it peaked at epoch 3 of 8


def test_a_run_cut_short_while_improving_says_so() -> None:
    config = tiny_config(overrides=["train.max_steps=24", "train.eval_every_steps=4"])
    outcome, _ = _train(config)
    aucs = [r["val_auc"] for r in outcome.history]
    assert aucs[-1] == max(aucs) and aucs[-1] > aucs[0]  # the engineered rise
    assert outcome.still_improving and not outcome.stopped_early
    patient, _ = _train(config.with_overrides({"train.patience": 2}))
    assert patient.history == outcome.history and patient.still_improving


class Killed(Exception):
    """Stands for the process dying mid-run."""


def test_resume_stops_at_the_same_step_as_an_uninterrupted_run() -> None:
    config = tiny_config(overrides=[*PLATEAU, "train.patience=3", "train.checkpoint_every=5"])
    reference, reference_val = _train(config)
    data = get_prepared(config.dataset, progress=False)

    def die(metrics: dict[str, float], step: int) -> None:
        if step >= 32:  # after the peak: one validation without a new best is counted
            raise Killed

    first = run_checkpoints(config, data.fingerprint, resume=False)
    with pytest.raises(Killed):
        train(
            build_model(config, data),
            data,
            config.train,
            config.seed,
            CPU,
            on_validation=die,
            checkpoints=first,
        )
    assert first is not None
    first.close()
    resumed = run_checkpoints(config, data.fingerprint, resume=True)
    assert resumed is not None
    outcome, val = _train(config, checkpoints=resumed)
    resumed.close()
    assert resumed.restored_step == 30
    assert outcome.steps == reference.steps and outcome.stopped_early
    assert outcome.history == reference.history and val == reference_val
    assert outcome.best_step == reference.best_step


def test_resume_from_the_stopping_step_trains_no_further() -> None:
    """A checkpoint written at the step whose validation spent the patience: the resumed
    run must stop there at once, not train one step more."""
    overrides = [*PLATEAU, "train.patience=3", "train.eval_every_steps=4"]
    config = tiny_config(overrides=[*overrides, "train.checkpoint_every=4"])
    reference, reference_val = _train(config)
    data = get_prepared(config.dataset, progress=False)
    writer = run_checkpoints(config, data.fingerprint, resume=False)
    assert writer is not None
    written, _ = _train(config, checkpoints=writer)
    writer.close()
    assert writer.written[-1].step == written.steps == reference.steps
    resumed = run_checkpoints(config, data.fingerprint, resume=True)
    assert resumed is not None
    outcome, val = _train(config, checkpoints=resumed)
    resumed.close()
    assert resumed.restored_step == outcome.steps == reference.steps
    assert outcome.stopped_early and outcome.history == reference.history
    assert val == reference_val and outcome.checkpoint_step == reference.checkpoint_step


def test_accuracy_result_records_convergence_and_mlflow_every_validation(
    tmp_path: Path,
) -> None:
    from suite.runs.single import execute

    uri = tracking_uri(tmp_path)
    config = tiny_config(
        tracking=True, overrides=[*PLATEAU, "train.patience=2", f"tracking.uri={uri}"]
    )
    out = tmp_path / "result.json"
    result = execute(config, out=out)
    details = TaskResult.read(out).details
    assert details == json.loads(out.read_text())["details"]
    assert details["stopped_early"] is True and details["still_improving"] is False
    assert details["validations"] == len(details["validation_history"]) < 20
    assert details["best_step"] == details["checkpoint_step"]
    assert result.details["steps"] < 20 * 8
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.info.status == "FINISHED"
    logged = {m.step for m in client.get_metric_history(run.info.run_id, "val_auc")}
    assert {int(r["step"]) for r in details["validation_history"]} <= logged
