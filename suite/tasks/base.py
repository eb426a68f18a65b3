"""The task interface, the context a task runs in, and the shared result schema."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from pydantic import BaseModel, ConfigDict

from suite.config import NoOptions, RunConfig
from suite.data.prepared import PreparedDataset
from suite.fileio import write_text_atomic
from suite.models.base import RecModel

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


@dataclass(frozen=True)
class TaskOutput:
    """A task's figures before the runner adds identity and environment."""

    metrics: dict[str, float]
    higher_is_better: dict[str, bool]
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunContext:
    """Everything a task may use: the config, prepared data and the run's tracker."""

    config: RunConfig
    data: PreparedDataset
    device: torch.device
    log_metrics: Callable[[dict[str, float], int], None]
    on_validation: Callable[[dict[str, float], int], None] | None = None

    def build_model(self, config: RunConfig | None = None) -> RecModel:
        from suite.engine.build import build_model

        return build_model(config or self.config, self.data)


class Task:
    """A measurement. Subclasses set ``Options`` and implement :meth:`run`."""

    Options: ClassVar[type[BaseModel]] = NoOptions

    def check(self, config: RunConfig) -> None:
        """Reject a config this task cannot run (raise ``ConfigError``), before any work
        and before any MLflow run exists."""

    def run(self, ctx: RunContext) -> TaskOutput:
        raise NotImplementedError


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
