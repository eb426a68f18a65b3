"""MLflow tracking: one MLflow run per suite run, through MLflow's client.

The store is ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else an embedded SQLite
database at ``./mlruns/mlflow.db`` with artifacts under ``./mlruns/artifacts``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from suite.errors import SuiteError

# MLflow's limits: at most 100 params and 1000 metrics per batch call, 6000 characters per
# param value and 250 per key.
MAX_PARAMS_PER_CALL = 100
MAX_METRICS_PER_CALL = 1000
MAX_PARAM_VALUE = 6000
MAX_KEY = 250
DEFAULT_DIR = Path("mlruns")


def default_tracking_uri() -> str:
    return f"sqlite:///{(DEFAULT_DIR / 'mlflow.db').resolve()}"


def resolve_tracking_uri(uri: str | None) -> str:
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """Nested mappings -> ``{"a.b.c": "value"}`` with values as short strings."""
    out: dict[str, str] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
    else:
        text = json.dumps(data) if isinstance(data, list | tuple) else str(data)
        key = prefix.rstrip(".")[:MAX_KEY]
        out[key] = text if len(text) <= MAX_PARAM_VALUE else text[: MAX_PARAM_VALUE - 3] + "..."
    return out


class Tracker:
    """An open MLflow run. Use :meth:`start`; end with :meth:`finish` or :meth:`fail`."""

    def __init__(self, client: Any, run_id: str, uri: str) -> None:
        self.client = client
        self.run_id = run_id
        self.uri = uri

    @classmethod
    def start(
        cls,
        uri: str | None,
        experiment: str,
        run_name: str | None = None,
        tags: dict[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> Tracker:
        from mlflow.tracking import MlflowClient

        resolved = resolve_tracking_uri(uri)
        if resolved.startswith("sqlite:///"):
            Path(resolved.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        client = MlflowClient(tracking_uri=resolved)
        try:
            found = client.get_experiment_by_name(experiment)
            if found is None:
                artifacts = None
                if resolved == default_tracking_uri():
                    artifacts = (DEFAULT_DIR / "artifacts").resolve().as_uri()
                experiment_id = client.create_experiment(experiment, artifact_location=artifacts)
            else:
                experiment_id = found.experiment_id
            all_tags = dict(tags or {})
            if parent_run_id:
                all_tags["mlflow.parentRunId"] = parent_run_id
            run = client.create_run(experiment_id, tags=all_tags, run_name=run_name)
        except Exception as exc:  # the store is unreachable or unusable
            raise SuiteError(f"cannot open MLflow tracking store {resolved}: {exc}") from None
        return cls(client, run.info.run_id, resolved)

    @classmethod
    def resume(cls, uri: str | None, run_id: str) -> Tracker:
        """Reopen an existing run (a resumed training run): its status goes back to RUNNING."""
        from mlflow.tracking import MlflowClient

        resolved = resolve_tracking_uri(uri)
        client = MlflowClient(tracking_uri=resolved)
        try:
            client.update_run(run_id, status="RUNNING")
        except Exception as exc:
            raise SuiteError(f"cannot reopen MLflow run {run_id} in {resolved}: {exc}") from None
        return cls(client, run_id, resolved)

    def log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in sorted(params.items())]
        for i in range(0, len(items), MAX_PARAMS_PER_CALL):
            self.client.log_batch(self.run_id, params=items[i : i + MAX_PARAMS_PER_CALL])

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k[:MAX_KEY], float(v), now, step) for k, v in metrics.items() if v == v]
        for i in range(0, len(items), MAX_METRICS_PER_CALL):
            self.client.log_batch(self.run_id, metrics=items[i : i + MAX_METRICS_PER_CALL])

    def set_tags(self, tags: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def finish(self) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED")

    def fail(self) -> None:
        self.client.set_terminated(self.run_id, status="FAILED")
