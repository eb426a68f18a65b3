"""MLflow as its users expect (issue 15, item 3): a run read back through MlflowClient
shows its metrics at their real steps, the git commit under Source, the data under
Datasets, the trained model under Models, and sits with the training runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import mlflow.pytorch
import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient

from suite.runs.single import execute
from suite.tracking import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, Tracker
from tests.conftest import tiny_config, tracking_uri

REPO = Path(__file__).resolve().parents[1]


def _head() -> str | None:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _tracked(uri: str, *overrides: str):
    return tiny_config(
        tracking=True,
        overrides=[f"tracking.uri={uri}", "train.eval_every_steps=10", *overrides],
    )


def test_run_reads_back_with_metrics_at_their_steps_source_data_and_model(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    result = execute(_tracked(uri))
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(result.mlflow_run_id)
    steps = result.details["steps"]
    assert steps == 32  # 4000 rows / batch 128, one epoch

    # val_auc: one point per validation (steps 10, 20, 30, 32) and the final figure at the
    # last step, never at step 0; MLflow's "latest" is the reported figure
    history = client.get_metric_history(run.info.run_id, "val_auc")
    assert sorted({m.step for m in history}) == [10, 20, 30, 32]
    assert run.data.metrics["val_auc"] == pytest.approx(result.metrics["val_auc"])
    for name in ("test_auc", "test_logloss", "embedding_bytes"):
        (point,) = client.get_metric_history(run.info.run_id, name)
        assert point.step == steps
    assert {m.step for m in client.get_metric_history(run.info.run_id, "train_logloss")} <= set(
        range(1, steps + 1)
    )

    # Source: the commit of this checkout
    tags = run.data.tags
    head = _head()
    if head is None:
        pytest.skip("not a git checkout")
    assert tags["mlflow.source.git.commit"] == head
    assert tags["mlflow.source.type"] == "LOCAL" and tags["mlflow.source.name"] == "suite"

    # Datasets: the prepared data, its fingerprint as digest
    (entry,) = run.inputs.dataset_inputs
    assert entry.dataset.digest == result.data_fingerprint[:36]
    assert entry.dataset.name == "criteo-synth/default"
    assert {t.key: t.value for t in entry.tags}["mlflow.data.context"] == "training"

    # a training experiment, not GenAI "Evaluation runs"
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND

    # Models: the trained model, loadable by its models:/ URI, the run's output at its step
    (output,) = run.outputs.model_outputs
    assert output.step == steps
    (logged,) = client.search_logged_models([run.info.experiment_id])
    assert logged.model_id == output.model_id and logged.source_run_id == run.info.run_id
    mlflow.set_tracking_uri(uri)  # models:/ URIs resolve through the global tracking URI
    try:
        model = mlflow.pytorch.load_model(f"models:/{logged.model_id}")
    finally:
        mlflow.set_tracking_uri(None)
    dense = torch.zeros(4, 13)
    sparse = torch.zeros(4, 26, dtype=torch.long)
    logits = model(dense, sparse)
    assert logits.shape == (4,) and bool(torch.isfinite(logits).all())


def test_model_logging_can_be_turned_off(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    result = execute(_tracked(uri, "tracking.log_model=never"))
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.outputs.model_outputs == []
    assert list(client.search_logged_models([run.info.experiment_id])) == []


def test_existing_experiment_is_marked_a_training_experiment(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    Tracker.start(uri, "recsuite", "first").finish()
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("recsuite")
    client.delete_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG)
    Tracker.start(uri, "recsuite", "second").finish()
    tags = client.get_experiment_by_name("recsuite").tags
    assert tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND


def test_multiseed_parent_has_source_and_children_models(tmp_path: Path) -> None:
    from suite.runs.multiseed import execute_seeds

    uri = tracking_uri(tmp_path)
    agg = execute_seeds(_tracked(uri, "tracking.log_model=never"), [0, 1])
    client = MlflowClient(tracking_uri=uri)
    parent = client.get_run(agg.mlflow_run_id)
    head = _head()
    if head is not None:
        assert parent.data.tags["mlflow.source.git.commit"] == head
    assert np.isfinite(parent.data.metrics["val_auc_mean"])
    (entry,) = parent.inputs.dataset_inputs
    assert entry.dataset.digest == agg.data_fingerprint[:36]


@pytest.mark.parametrize("end", ["finish", "fail"])
def test_metrics_are_sent_in_batches_and_all_reach_the_store_when_the_run_ends(
    tmp_path: Path, end: str
) -> None:
    uri = tracking_uri(tmp_path)
    tracker = Tracker.start(uri, "recsuite", "batched")
    client = MlflowClient(tracking_uri=uri)
    for step in range(1, 31):
        tracker.log_metrics({"train_loss": 1.0 / step}, step)
    assert client.get_run(tracker.run_id).data.metrics == {}  # not one write per call
    getattr(tracker, end)()
    history = client.get_metric_history(tracker.run_id, "train_loss")
    assert [(m.step, m.value) for m in history] == [(s, 1.0 / s) for s in range(1, 31)]
