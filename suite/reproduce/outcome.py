"""What a reproduction found: each config's runs under every seed (:class:`SeededRun`), each
paper's judged claims (:class:`PaperOutcome`) and the whole (:class:`Reproduction`), which
the report and plots read."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from suite.config import RunConfig
from suite.decisions import INTERVAL_LEVEL
from suite.reproduce.claims import COMPUTE_METRIC, ClaimOutcome, NoiseLookup
from suite.reproduce.plan import ReproductionPlan
from suite.reproduce.spec import ReproductionSpec
from suite.reproduce.store import predictions
from suite.results import TaskResult, find_metric
from suite.stats import Interval, ScalingFit, mean_ci


@dataclass
class SeededRun:
    """One config run under every seed of the profile."""

    run_id: str
    config: RunConfig
    seeds: list[int]
    results: dict[int, TaskResult] = field(default_factory=dict)

    @property
    def per_seed(self) -> dict[int, dict[str, float]]:
        return {seed: seed_metrics(r) for seed, r in self.results.items()}

    def interval(self, metric: str) -> Interval:
        values = [m[metric] for m in self.per_seed.values() if metric in m]
        return mean_ci(values, INTERVAL_LEVEL)

    @property
    def metrics(self) -> dict[str, float]:
        """Mean of each metric over seeds."""
        per_seed = list(self.per_seed.values())
        names = [k for k in per_seed[0] if all(k in m for m in per_seed)] if per_seed else []
        return {k: float(np.mean([m[k] for m in per_seed])) for k in names}

    @property
    def duration_s(self) -> float:
        return float(sum(r.duration_s for r in self.results.values()))

    @property
    def mlflow_run_ids(self) -> dict[int, str | None]:
        return {seed: r.mlflow_run_id for seed, r in self.results.items()}

    def test_predictions(self, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The run's test ``(labels [N], logits [N])`` under ``seed``, if it kept them."""
        result = self.results.get(seed)
        return predictions(result) if result is not None else None

    def metric_kind(self, metric: str) -> str | None:
        """The declared kind of one of this run's metrics (``measured`` for timings), or
        None where its task does not declare it (figures the runner derives)."""
        task = self.config.task.registry.get(self.config.task.name)
        spec = find_metric(task.metrics, metric)
        return spec.kind if spec else None


def seed_metrics(result: TaskResult) -> dict[str, float]:
    """A run's metrics plus its training compute (3 x forward FLOPs x examples)."""
    metrics = dict(result.metrics)
    examples = result.details.get("examples")
    if examples is not None and "flops_per_example" in metrics:
        metrics[COMPUTE_METRIC] = 3.0 * metrics["flops_per_example"] * float(examples)
    return metrics


@dataclass
class PaperOutcome:
    spec: ReproductionSpec
    profile: str
    runs: dict[str, SeededRun]
    claims: list[ClaimOutcome]
    fits: dict[str, ScalingFit] = field(default_factory=dict)
    noise: NoiseLookup | None = None
    """The test-set noise the claims were judged with (``suite.reproduce.judge.NoiseBook``)."""
    unreachable: dict[str, str] = field(default_factory=dict)
    """Run id -> why the plan has no config for it (a curve point under its budget)."""

    @property
    def families(self) -> dict[str, list[str]]:
        return {f: list(ms) for f, ms in self.spec.profiles[self.profile].families.items()}


@dataclass
class Reproduction:
    """What ``reproduce`` did: the papers' outcomes and where it is tracked."""

    plan: ReproductionPlan
    papers: list[PaperOutcome]
    seeds: list[int]
    """The seeds judged (an interim report's: the plan's seeds less :attr:`seeds_left`)."""
    mlflow_run_id: str | None = None
    tracking_uri: str | None = None
    duration_s: float = 0.0
    seeds_left: list[int] = field(default_factory=list)
    """The profile's seeds an interim report leaves out (their jobs not all trained yet)."""

    @property
    def profile(self) -> str:
        return self.plan.profile

    @property
    def overrides(self) -> dict[str, Any]:
        return self.plan.overrides

    def results(self) -> list[TaskResult]:
        """Every job's result once (runs shared between papers counted once)."""
        unique: dict[tuple[str, int], TaskResult] = {}
        for outcome in self.papers:
            for rec in outcome.runs.values():
                for seed, result in rec.results.items():
                    unique[(rec.config.config_hash(), seed)] = result
        return list(unique.values())


def training_wall_s(results: list[TaskResult]) -> tuple[float, int]:
    """``(seconds, stretches)``: the wall time during which at least one of ``results``
    was training (the union of their ``[created - duration_s, created]`` intervals), and the
    number of separate stretches it falls in (a killed and resumed reproduction has two or
    more). Read off the stored jobs, so a resumed or regenerated report still counts the
    invocations that left no manifest."""
    spans = sorted(
        (end - r.duration_s, end) for r in results if (end := _timestamp(r.created)) is not None
    )
    total, stretches, reach = 0.0, 0, -math.inf
    for start, end in spans:
        if start > reach + WALL_GAP_S:
            stretches += 1
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total, stretches


WALL_GAP_S = 120.0
"""Two jobs' intervals further apart than this belong to separate stretches of work."""


def stretch_of(results: list[TaskResult]) -> list[int | None]:
    """Each result's stretch of work, as :func:`training_wall_s` splits them: 0 for the
    earliest, in time order; None for a result without a timestamp. Two results in one
    stretch trained side by side, under the same load on the machine."""
    spans = sorted(
        (end - r.duration_s, end, i)
        for i, r in enumerate(results)
        if (end := _timestamp(r.created)) is not None
    )
    out: list[int | None] = [None] * len(results)
    stretch, reach = -1, -math.inf
    for start, end, i in spans:
        if start > reach + WALL_GAP_S:
            stretch += 1
        reach = max(reach, end)
        out[i] = stretch
    return out


def _timestamp(iso: str | None) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None
