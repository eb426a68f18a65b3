"""The leaderboard's view of a task's metrics: the declarations in the task class.

Each task declares its metrics (:class:`suite.results.MetricSpec`: direction, primary,
label, unit, kind, bounds); the leaderboard reads them here and nowhere else. A metric a
task does not declare (an older submission, an unknown task) gets a plain fallback: its
raw name as label, compared within the tolerance, hidden by default.
"""

from __future__ import annotations

from suite.registry import TASKS
from suite.results import MetricSpec, find_metric


def task_metrics(task: str) -> tuple[MetricSpec, ...]:
    """The metrics ``task`` declares (empty for a task this suite does not know)."""
    if task not in TASKS:
        return ()
    return tuple(getattr(TASKS.get(task), "metrics", ()))


def declared(task: str, metric: str) -> MetricSpec | None:
    return find_metric(task_metrics(task), metric)


def spec_for(task: str, metric: str, higher_is_better: bool = True) -> MetricSpec:
    """The declared spec of ``metric``, or the fallback for an undeclared one."""
    return declared(task, metric) or MetricSpec(metric, higher_is_better, metric)


def primary_metric(task: str) -> str | None:
    """The exact name of the metric that ranks ``task``'s entries, if the task names one."""
    spec = next((s for s in task_metrics(task) if s.primary), None)
    return spec.name if spec is not None and "*" not in spec.name else None


def required_metrics(task: str) -> list[str]:
    """Metrics every submission of ``task`` must report: its primary and each exactly named
    quality metric (for ``accuracy``: val/test AUC and log loss)."""
    return [
        s.name
        for s in task_metrics(task)
        if "*" not in s.name and (s.primary or s.kind == "quality")
    ]
