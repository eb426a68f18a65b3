"""The result schema every task's run is written in: JSON under ``results/`` and MLflow.

It sits on a low floor so that tasks, orchestration, reports and the leaderboard can all
read results without importing one another.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

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


Kind = Literal["quality", "size", "count", "measured", "ratio"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric a task reports, declared in the task (as lm-evaluation-harness's
    ``metric_list``): its direction, whether it ranks the task's runs, and how to show it.

    ``name`` is the exact metric name, or a pattern with one ``*`` for a family whose names
    carry a parameter (``test_auc_*`` for ``test_auc_int8``); ``label`` may hold ``{}``,
    filled with the part ``*`` matched. ``kind`` says how the figure behaves: ``quality``
    (AUC, log loss: compared within a tolerance on re-runs), ``size`` and ``count`` (bytes,
    parameters, FLOPs: exact everywhere), ``measured`` (timings and allocator peaks:
    machine-dependent, never compared), ``ratio`` (a quotient of sizes). ``bounds`` is the closed range a valid value lies in.
    ``shown`` marks the columns a leaderboard shows by default.
    """

    name: str
    higher_is_better: bool
    label: str
    unit: str = ""
    kind: Kind = "quality"
    primary: bool = False
    bounds: tuple[float, float] | None = None
    shown: bool = False

    def matches(self, metric: str) -> str | None:
        """The part ``*`` matched (``""`` for an exact name), or None if ``metric`` is not
        this spec's."""
        if "*" not in self.name:
            return "" if metric == self.name else None
        head, tail = self.name.split("*", 1)
        if (
            len(metric) > len(head) + len(tail)
            and metric.startswith(head)
            and metric.endswith(tail)
        ):
            return metric[len(head) : len(metric) - len(tail)]
        return None

    def label_for(self, metric: str) -> str:
        part = self.matches(metric)
        return self.label.format(part) if part is not None and "{}" in self.label else self.label

    def unit_label(self, metric: str) -> str:
        """``Test AUC`` or ``Embedding memory (bytes)``: the label with its unit."""
        label = self.label_for(metric)
        return f"{label} ({self.unit})" if self.unit else label


def find_metric(specs: Sequence[MetricSpec], metric: str) -> MetricSpec | None:
    """The spec declaring ``metric``: an exact name first, then the first matching pattern."""
    for spec in specs:
        if spec.name == metric:
            return spec
    for spec in specs:
        if "*" in spec.name and spec.matches(metric) is not None:
            return spec
    return None


def primary_metric(specs: Sequence[MetricSpec]) -> MetricSpec | None:
    return next((spec for spec in specs if spec.primary), None)


def directions(specs: Sequence[MetricSpec], metrics: Iterable[str]) -> dict[str, bool]:
    """``higher_is_better`` of each metric from its declaration; an undeclared metric is an
    error (a task must declare every metric it reports)."""
    out = {}
    for metric in metrics:
        spec = find_metric(specs, metric)
        if spec is None:
            raise ValueError(f"metric {metric!r} is not declared in the task's metrics")
        out[metric] = spec.higher_is_better
    return out
