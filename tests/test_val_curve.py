"""Validation AUC along training (``tracking.val_curve``): logged to the MLflow run at the
steps it was computed (``val_auc_curve``), changing nothing of what the run trains to,
config hashes, or results."""

from __future__ import annotations

import pytest
import torch
from mlflow.tracking import MlflowClient

from suite.config import RunConfig
from suite.data.source import get_prepared
from suite.engine.build import build_model
from suite.engine.train import CURVE_METRICS, ValCurve, evaluate, train, val_curve
from suite.registry import EMBEDDINGS
from suite.runs.single import execute
from tests.conftest import tiny_config, tracking_uri

CPU = torch.device("cpu")
# tiny data: 4000 train rows, 32 steps an epoch at batch 128; two epochs
TWO_EPOCHS = ["train.epochs=2"]
# DHE at its default size takes a minute here; its small size, as in test_dhe.py
SMALL = {"dhe": ["embedding.options.k=64", "embedding.options.hidden=[32,32]"]}


def _trained(config: RunConfig, curve: ValCurve | None) -> tuple[dict, list, dict]:
    """Train ``config``; the kept model's state, the validation history and the kept
    model's validation metrics."""
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    outcome = train(model, data, config.train, config.seed, CPU, curve=curve)
    assert model.training  # back in train mode after the curve's evaluations
    val = evaluate(model, data.split("val"), config.train.eval_batch_size, CPU)
    state = {k: v.clone() for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    return state, outcome.history, val


@pytest.mark.parametrize("embedding", EMBEDDINGS.names())
def test_a_run_trains_bit_identically_with_the_curve_on_or_off(embedding: str) -> None:
    config = tiny_config(embedding=embedding, overrides=TWO_EPOCHS + SMALL.get(embedding, []))
    logged: list[tuple[int, dict[str, float]]] = []
    curve = ValCurve(7, 300, lambda metrics, step: logged.append((step, metrics)))
    on = _trained(config, curve)
    off = _trained(config, None)
    assert on[0].keys() == off[0].keys()
    for name, tensor in on[0].items():
        assert torch.equal(tensor, off[0][name]), name
    assert on[1] == off[1]  # the history holds the full validations only
    assert on[2] == off[2]
    # 7 points over 64 steps, the last at the end of training
    assert [step for step, _ in logged] == [9, 18, 27, 37, 46, 55, 64]
    assert all(set(m) == {"val_auc_curve", "val_logloss_curve"} for _, m in logged)


def test_curve_steps_are_evenly_spaced_and_its_split_is_a_prefix() -> None:
    curve = ValCurve(10, 64, lambda m, s: None)
    assert curve.steps(100) == {10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
    assert curve.steps(1563) == {156, 313, 469, 625, 782, 938, 1094, 1250, 1407, 1563}
    assert curve.steps(5) == {1, 2, 3, 4, 5}  # fewer steps than points: one a step
    val = get_prepared(tiny_config().dataset, progress=False).split("val")
    part = curve.split(val)
    assert len(part) == 64 and (part.label == val.label[:64]).all()
    assert (part.sparse == val.sparse[:64]).all() and (part.dense == val.dense[:64]).all()
    assert ValCurve(10, 10**6, curve.log).split(val) is val


def test_curve_is_on_by_default_and_off_where_it_cannot_run_or_is_not_needed() -> None:
    config = tiny_config(tracking=True)
    curve = val_curve(config.tracking, config.train, print, distributed=False)
    assert curve is not None and (curve.points, curve.rows) == (10, 8192)
    assert val_curve(tiny_config().tracking, config.train, print, False) is None  # no tracking
    assert val_curve(config.tracking, config.train, print, distributed=True) is None
    every = tiny_config(tracking=True, overrides=["train.eval_every_steps=8"])
    assert val_curve(every.tracking, every.train, print, False) is None  # its own curve
    off = tiny_config(tracking=True, overrides=["tracking.val_curve=0"])
    assert val_curve(off.tracking, off.train, print, False) is None


def test_the_knob_leaves_config_hashes_alone() -> None:
    assert RunConfig().config_hash() == "324bea15822dff86"  # as before the curve existed
    base = tiny_config(tracking=True)
    for knob in ("tracking.val_curve=0", "tracking.val_curve=50", "tracking.val_curve_rows=9"):
        assert tiny_config(tracking=True, overrides=[knob]).config_hash() == base.config_hash()


def test_a_tracked_run_logs_val_auc_along_training_and_the_same_result(tmp_path) -> None:
    uri = tracking_uri(tmp_path)
    results = {}
    for points in (10, 0):
        config = tiny_config(
            tracking=True,
            overrides=[f"tracking.uri={uri}", f"tracking.val_curve={points}"],
        )
        results[points] = execute(config)
    on, off = results[10], results[0]
    assert on.metrics.keys() == off.metrics.keys()
    for name in ("val_auc", "val_logloss", "test_auc", "test_logloss", "embedding_bytes"):
        assert on.metrics[name] == off.metrics[name], name
    assert on.details["validation_history"] == off.details["validation_history"]
    assert on.config_hash == off.config_hash

    client = MlflowClient(uri)
    (run_on,) = client.search_runs(
        client.get_experiment_by_name("recsuite").experiment_id,
        order_by=["attributes.start_time ASC"],
        max_results=1,
    )
    for name in CURVE_METRICS.values():
        history = client.get_metric_history(run_on.info.run_id, name)
        assert [m.step for m in history] == [3, 6, 10, 13, 16, 19, 22, 26, 29, 32]  # 32 steps
    # the curve's last point is the whole val split's (tiny data: 1000 rows < 8192)
    assert run_on.data.metrics["val_auc_curve"] == on.metrics["val_auc"]
    assert run_on.data.metrics["val_auc"] == on.metrics["val_auc"]
