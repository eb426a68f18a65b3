"""A mixed-dim run end to end: every feature's dim reaches the result and MLflow."""

from __future__ import annotations

import json
from pathlib import Path

from mlflow.tracking import MlflowClient

from suite.runs.single import execute
from tests.conftest import tiny_config, tracking_uri


def test_feature_dims_reach_the_result_and_mlflow(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    config = tiny_config(embedding="mixed_dim", tracking=True, overrides=[f"tracking.uri={uri}"])
    result = execute(config)
    layout = result.details["embedding_layout"]
    cards = layout["feature_rows"]
    dims = layout["feature_dims"]
    assert len(dims) == len(cards) == 26
    assert max(dims) == 16 and min(dims) < 4  # dims the fbgemm kernel cannot take
    assert all(d == 16 for n, d in zip(cards, dims, strict=True) if n <= 200)
    assert layout["feature_backends"] == ["fbgemm" if d % 4 == 0 else "torch" for d in dims]
    assert 0.5 < result.metrics["test_auc"] < 1.0
    client = MlflowClient(tracking_uri=uri)
    local = client.download_artifacts(result.mlflow_run_id, "result.json", str(tmp_path))
    logged = json.loads(Path(local).read_text())
    assert logged["details"]["embedding_layout"]["feature_dims"] == dims
