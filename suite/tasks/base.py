"""The task interface and the context a task runs in (the result schema is :mod:`suite.results`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel

from suite.config import NoOptions, RunConfig
from suite.data.prepared import PreparedDataset
from suite.engine.checkpoint import Checkpointer
from suite.models.base import ONE_PROCESS, Ranks, RecModel
from suite.results import MetricSpec, directions


@dataclass(frozen=True)
class TaskOutput:
    """A task's figures before the runner adds identity and environment; their directions
    come from the task's declarations (:meth:`Task.directions`), not from the output."""

    metrics: dict[str, float]
    _: KW_ONLY
    details: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    """Named arrays (e.g. test predictions ``[N]``) the run path keeps beside the result
    JSON and as an MLflow artifact; ``details["arrays"]`` names the file."""


@dataclass
class RunContext:
    """Everything a task may use: the config, prepared data and the run's tracker."""

    config: RunConfig
    data: PreparedDataset
    device: torch.device
    log_metrics: Callable[[dict[str, float], int], None]
    on_validation: Callable[[dict[str, float], int], None] | None = None
    checkpoints: Checkpointer | None = None
    """The run's checkpoints (``train.checkpoint_every``, ``--resume``), for its training."""
    ranks: Ranks = ONE_PROCESS
    """The processes the run's model is spread over (one process: rank 0 of 1)."""

    def build_model(self, config: RunConfig | None = None) -> RecModel:
        from suite.engine.build import build_model

        return build_model(config or self.config, self.data, self.ranks)

    def plot_dir(self, task: str) -> Path:
        """Where ``task`` draws its figures for this run:
        ``<results_dir>/plots/<task>/<dataset>-<config hash>``."""
        cfg = self.config
        name = f"{cfg.dataset.name}-{cfg.config_hash()}"
        return Path(cfg.tracking.results_dir) / "plots" / task / name


class Task:
    """A measurement. Subclasses set ``Options`` and implement :meth:`run`."""

    Options: ClassVar[type[BaseModel]] = NoOptions
    metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    """Every metric the task reports: direction, primary, label and unit (one place)."""
    distributed: ClassVar[bool] = False
    """Whether the task runs across the ranks of a distributed run (``--nproc-per-node``)."""

    @classmethod
    def directions(cls, names: Iterable[str]) -> dict[str, bool]:
        """``higher_is_better`` of each metric name, from :attr:`metrics` alone (a family's
        pattern resolves a name with parameters, e.g. ``lru_hit_rate_0.01``); a name the
        task does not declare raises ``ValueError``."""
        return directions(cls.metrics, names)

    @classmethod
    def higher_is_better(cls, output: TaskOutput) -> dict[str, bool]:
        """The direction of each metric ``output`` reports (:meth:`directions`)."""
        return cls.directions(output.metrics)

    def check(self, config: RunConfig) -> None:
        """Reject a config this task cannot run (raise ``ConfigError``), before any work
        and before any MLflow run exists."""

    def run(self, ctx: RunContext) -> TaskOutput:
        raise NotImplementedError
