"""The run record (issue 35, item 1): one object owns a tracked run's MLflow record, and
however its block ends, the run is never left RUNNING: FINISHED on a normal exit, FAILED
with its error on an exception, KILLED on an interruption; a resume reopens the same run."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from suite.data.source import get_prepared
from suite.errors import SuiteError
from suite.runs.record import ERROR_TAG, RunRecord, plot_paths
from suite.runs.signals import Interrupted, interrupted_message
from suite.tracking import KILLED_BY_TAG, PARENT_RUN_TAG
from tests.conftest import tiny_config, tracking_uri


def _config(tmp_path: Path):
    return tiny_config(tracking=True, overrides=[f"tracking.uri={tracking_uri(tmp_path)}"])


def _run(tmp_path: Path, run_id: str):
    return MlflowClient(tracking_uri=tracking_uri(tmp_path)).get_run(run_id)


def test_a_block_that_ends_normally_finishes_the_run_with_its_setup_and_figures(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    data = get_prepared(config.dataset, progress=False)
    with RunRecord.start(config, "record-test", {"suite.seed": "0"}) as record:
        record.log_setup({"train.batch_size": "128"}, config, data)
        record.log_metrics({"val_auc": 0.6}, step=3)
        record.log_json({"b": 1, "a": 2}, "facts.json")
    run = _run(tmp_path, record.run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "record-test"
    assert run.data.params == {"train.batch_size": "128"}
    assert run.data.metrics == {"val_auc": 0.6}
    assert run.data.tags["suite.seed"] == "0"
    (dataset,) = run.inputs.dataset_inputs
    assert dataset.dataset.digest == data.fingerprint[:36]
    client = MlflowClient(tracking_uri=tracking_uri(tmp_path))
    names = {a.path for a in client.list_artifacts(record.run_id)}
    assert names == {"config.yaml", "facts.json"}


def test_an_exception_in_the_block_fails_the_run_with_its_error_and_is_raised(
    tmp_path: Path,
) -> None:
    record = RunRecord.start(_config(tmp_path), "fails", {})
    with pytest.raises(SuiteError, match="the loss went away"), record:
        raise SuiteError("the loss went away")
    run = _run(tmp_path, record.run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags[ERROR_TAG] == "the loss went away"


def test_a_parent_record_fails_without_repeating_its_childs_error(tmp_path: Path) -> None:
    config = _config(tmp_path)
    parent = RunRecord.start(config, "parent", {}, what="multi-seed run", error_tag=False)
    with pytest.raises(ValueError), parent:
        child = RunRecord.start(config, "child", {}, parent.run_id)
        with child:
            raise ValueError("seed 1 broke")
    assert _run(tmp_path, child.run_id).data.tags[ERROR_TAG] == "seed 1 broke"
    assert _run(tmp_path, child.run_id).data.tags[PARENT_RUN_TAG] == parent.run_id
    assert _run(tmp_path, parent.run_id).info.status == "FAILED"
    assert ERROR_TAG not in _run(tmp_path, parent.run_id).data.tags


@pytest.mark.parametrize("interruption", [KeyboardInterrupt(), Interrupted(signal.SIGTERM)])
def test_an_interruption_kills_the_run_and_the_exception_names_it(
    tmp_path: Path, interruption: KeyboardInterrupt
) -> None:
    record = RunRecord.start(_config(tmp_path), "killed", {}, resumable=lambda: False)
    with pytest.raises(KeyboardInterrupt) as caught, record:
        record.log_metrics({"train_loss": 0.5}, step=1)
        raise interruption
    run = _run(tmp_path, record.run_id)
    name = "SIGTERM" if isinstance(interruption, Interrupted) else "SIGINT"
    assert run.info.status == "KILLED"
    assert run.data.tags[KILLED_BY_TAG] == f"{name} during the run"
    assert run.data.metrics == {"train_loss": 0.5}  # what it measured is kept
    message = interrupted_message(caught.value)
    assert f"MLflow run {record.run_id} ended KILLED" in message
    assert "wrote no checkpoint" in message


def test_a_resume_reopens_the_same_run_without_logging_its_setup_again(tmp_path: Path) -> None:
    config = _config(tmp_path)
    data = get_prepared(config.dataset, progress=False)
    first = RunRecord.start(config, "resumed", {})
    with pytest.raises(KeyboardInterrupt), first:
        first.log_setup({"seed": "0"}, config, data)
        first.log_metrics({"train_loss": 0.5}, step=1)
        raise KeyboardInterrupt
    again = RunRecord.resume(config, first.run_id)
    assert again.run_id == first.run_id and again.resumed
    assert _run(tmp_path, first.run_id).info.status == "RUNNING"
    with again:
        again.log_setup({"seed": "1"}, config, data)  # a resumed run has its params
        again.log_metrics({"train_loss": 0.5}, step=1)  # already in its history
        again.log_metrics({"train_loss": 0.4}, step=2)
    run = _run(tmp_path, first.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"seed": "0"}
    history = MlflowClient(tracking_uri=tracking_uri(tmp_path)).get_metric_history(
        first.run_id, "train_loss"
    )
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.4)]


def test_a_record_with_tracking_off_does_nothing(tmp_path: Path) -> None:
    record = RunRecord.off()
    with pytest.raises(ValueError), record:
        record.log_metrics({"x": 1.0})
        raise ValueError("no store to mark")
    assert record.run_id is None and record.uri is None and not record
    assert not (tmp_path / "mlruns").exists()


def test_plot_paths_are_the_task_figures_on_disk_once_each(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(b"png")
    (tmp_path / "b.png").write_bytes(b"png")
    details = {"plots": [str(tmp_path / "a.png"), str(tmp_path / "gone.png")]}
    assert plot_paths({**details, "plot": str(tmp_path / "a.png")}) == [tmp_path / "a.png"]
    assert plot_paths({"plots": str(tmp_path / "b.png")}) == [tmp_path / "b.png"]
