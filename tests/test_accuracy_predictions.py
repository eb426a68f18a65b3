"""The accuracy task keeps its test predictions beside the result JSON and in MLflow."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from suite.data.source import get_prepared
from suite.metrics import roc_auc
from suite.results import TaskResult, read_arrays
from suite.runs.single import execute, result_path
from tests.conftest import TINY_DATA, tiny_config, tracking_uri


def test_accuracy_keeps_its_test_predictions_beside_the_result(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient
    from sklearn.metrics import roc_auc_score

    uri = tracking_uri(tmp_path)
    config = tiny_config(tracking=True, overrides=["train.max_steps=10", f"tracking.uri={uri}"])
    result = execute(config)
    entry = result.details["arrays"]
    path = Path(entry["file"])
    json_path = result_path(config, result.data_fingerprint)
    assert path == json_path.with_suffix(".npz") and path.is_file()
    assert entry["names"] == ["test_labels", "test_logits"]
    # the result JSON on disk names the same file
    assert TaskResult.read(json_path).details["arrays"] == entry

    arrays = read_arrays(result)
    labels, logits = arrays["test_labels"], arrays["test_logits"]
    assert labels.dtype == np.uint8 and logits.dtype == np.float32
    assert labels.shape == logits.shape == (TINY_DATA["test_rows"],)
    test = get_prepared(config.dataset).split("test")
    assert np.array_equal(labels, np.asarray(test.label))
    # exactly the predictions the metric was computed on
    assert roc_auc(labels, logits) == result.metrics["test_auc"]
    assert abs(roc_auc_score(labels, logits) - result.metrics["test_auc"]) < 1e-12

    client = MlflowClient(tracking_uri=uri)
    names = {a.path for a in client.list_artifacts(result.mlflow_run_id)}
    assert path.name in names
    local = client.download_artifacts(result.mlflow_run_id, path.name, str(tmp_path / "dl"))
    with np.load(local) as logged:
        assert np.array_equal(logged["test_logits"], logits)

    # a rerun of the same config and seed gives bit-identical predictions (same file)
    again = read_arrays(execute(config))
    assert np.array_equal(again["test_logits"], logits)


def test_a_result_without_its_arrays_file_has_no_predictions(tmp_path: Path) -> None:
    config = tiny_config(overrides=["train.max_steps=5"])
    skipped = execute(config.with_overrides({"tracking.keep_arrays": False}))
    assert "arrays" not in skipped.details and read_arrays(skipped) is None
    assert not list(Path(config.tracking.results_dir).rglob("*.npz"))
    result = execute(config)
    assert result.config_hash == skipped.config_hash  # where the arrays go is no identity
    Path(result.details["arrays"]["file"]).unlink()
    assert read_arrays(result) is None
    del result.details["arrays"]
    assert read_arrays(result) is None
