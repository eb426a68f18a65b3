"""The result schema every task's run is written in: JSON under ``results/`` and MLflow.

It sits on a low floor so that tasks, orchestration, reports and the leaderboard can all
read results without importing one another.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from suite.fileio import write_bytes_atomic, write_text_atomic

RESULT_SCHEMA_VERSION = 1
RESULTS_OPTION = "tracking.results_dir"
"""The setting that moves a run's result JSON (and its arrays), named on a full disk."""
OUT_OPTION = "--out"
"""The flag that writes a second copy of the result JSON, named on a full disk."""


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

    def write(self, path: str | Path, option: str | None = None) -> Path:
        """Write atomically (temp file + rename) so no half-written result exists; a full
        disk is one line naming ``path`` and ``option`` (the setting that moves it)."""
        return write_text_atomic(path, self.model_dump_json(indent=2), option)

    @classmethod
    def read(cls, path: str | Path) -> TaskResult:
        return cls.model_validate(json.loads(Path(path).read_text()))


ARRAYS_DETAIL = "arrays"
"""``details`` key naming the run's arrays file: ``{"file": path, "names": [...]}``."""


def write_arrays(
    result_json: str | Path, arrays: dict[str, Any], option: str | None = None
) -> dict[str, Any]:
    """Write a task's named arrays beside its result JSON (``<stem>.npz``, uncompressed,
    atomically); return the ``details`` entry naming them (the path as written). A full
    disk is one line naming ``option``, the setting that moves the file."""
    import io

    import numpy as np

    path = Path(result_json).with_suffix(".npz")
    buffer = io.BytesIO()
    named: dict[str, Any] = {name: np.asarray(value) for name, value in arrays.items()}
    np.savez(buffer, **named)  # typed Any: numpy's stub would match a name to allow_pickle
    write_bytes_atomic(path, buffer.getvalue(), option)
    return {"file": str(path), "names": sorted(arrays)}


def read_arrays(result: TaskResult) -> dict[str, Any] | None:
    """The arrays a run kept (:func:`write_arrays`), or None if it kept none or the file
    is gone."""
    import numpy as np

    entry = result.details.get(ARRAYS_DETAIL)
    if not entry or not Path(entry["file"]).is_file():
        return None
    with np.load(entry["file"], allow_pickle=False) as found:
        return {name: found[name] for name in found.files}


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


Kind = Literal["quality", "size", "count", "measured", "ratio"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric a task reports, declared in the task (as lm-evaluation-harness's
    ``metric_list``): its direction, whether it ranks the task's runs, and how to show it.

    ``name`` is the exact metric name, or a pattern with ``*`` for a family whose names
    carry parameters (``test_auc_*`` for ``test_auc_int8``); ``label`` then holds one
    ``{}`` per ``*``, filled with what it matched. ``kind`` says how the figure behaves: ``quality``
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

    def parts(self, metric: str) -> tuple[str, ...] | None:
        """What each ``*`` matched (``()`` for an exact name), or None if ``metric`` is not
        this spec's."""
        if "*" not in self.name:
            return () if metric == self.name else None
        pattern = "(.+?)".join(re.escape(piece) for piece in self.name.split("*"))
        found = re.fullmatch(pattern, metric)
        return found.groups() if found else None

    def matches(self, metric: str) -> str | None:
        """The text the ``*`` s matched, joined (``""`` for an exact name), or None."""
        parts = self.parts(metric)
        return None if parts is None else "_".join(parts)

    def label_for(self, metric: str) -> str:
        parts = self.parts(metric)
        return self.label.format(*parts) if parts else self.label

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


def repeatable_metrics(metrics: dict[str, float], specs: Sequence[MetricSpec]) -> dict[str, float]:
    """``metrics`` without those of kind ``measured`` (timings, throughputs, allocator
    peaks): the figures a rerun on the same machine reproduces bit for bit."""
    kept = {}
    for name, value in metrics.items():
        spec = find_metric(specs, name)
        if spec is None or spec.kind != "measured":
            kept[name] = value
    return kept


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
