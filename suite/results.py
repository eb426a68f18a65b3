"""The result schema every task's run is written in: JSON under ``results/`` and MLflow.

It sits on a low floor so that tasks, orchestration, reports and the leaderboard can all
read results without importing one another.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from suite.fileio import write_text_atomic

RESULT_SCHEMA_VERSION = 1


class TaskResult(BaseModel):
    """What every task returns, written to JSON and to MLflow with the same figures."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = RESULT_SCHEMA_VERSION
    task: str
    model: str
    embedding: str
    dataset: str
    protocol: str | None
    seed: int
    config: dict[str, Any]
    config_hash: str
    data_fingerprint: str
    metrics: dict[str, float]
    higher_is_better: dict[str, bool]
    details: dict[str, Any] = {}
    environment: dict[str, Any] = {}
    mlflow_run_id: str | None = None
    mlflow_tracking_uri: str | None = None
    created: str = ""
    duration_s: float = 0.0

    def write(self, path: str | Path) -> Path:
        """Write atomically (temp file + rename) so no half-written result exists."""
        return write_text_atomic(path, self.model_dump_json(indent=2))

    @classmethod
    def read(cls, path: str | Path) -> TaskResult:
        return cls.model_validate(json.loads(Path(path).read_text()))


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
