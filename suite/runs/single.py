"""The one run path: resolved config -> prepared data -> task -> MLflow + results JSON."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from suite.config import RunConfig
from suite.data.prepared import PreparedDataset
from suite.data.source import get_prepared
from suite.engine.build import resolve_device, seed_everything
from suite.engine.checkpoint import remove_checkpoints, run_checkpoints
from suite.environment import environment
from suite.results import TaskResult, now_iso
from suite.tasks.base import RunContext, Task
from suite.tracking import Tracker, flatten


def result_path(config: RunConfig) -> Path:
    """Default place of a run's result JSON under ``tracking.results_dir``."""
    name = (
        f"{config.model.name}-{config.embedding.name}-{config.config_hash()}-seed{config.seed}.json"
    )
    return Path(config.tracking.results_dir) / config.task.name / config.dataset.name / name


def run_tags(config: RunConfig, fingerprint: str, env: dict[str, Any]) -> dict[str, str]:
    return {
        "suite.config_hash": config.config_hash(),
        "suite.data_fingerprint": fingerprint,
        "suite.task": config.task.name,
        "suite.model": config.model.name,
        "suite.embedding": config.embedding.name,
        "suite.dataset": config.dataset.name,
        "suite.protocol": str(config.dataset.protocol),
        "suite.seed": str(config.seed),
        "suite.git_commit": str(env["git_commit"]),
        "suite.version": str(env["suite_version"]),
        "torch.version": str(env["torch"]),
        "fbgemm.version": str(env["fbgemm"]),
        "suite.device": str(env["device"]),
        "suite.device_name": str(env["device_name"]),
    }


def preflight(config: RunConfig) -> tuple[torch.device, PreparedDataset, Task]:
    """Everything that can fail on user input, done before any MLflow run exists: the
    device, the task's own check of the config, and the prepared data."""
    device = resolve_device(config.device)
    task: Task = config.task.registry.get(config.task.name)()
    task.check(config)
    data = get_prepared(config.dataset, progress=config.train.progress)
    return device, data, task


def execute(
    config: RunConfig,
    out: str | Path | None = None,
    parent_run_id: str | None = None,
    extra_tags: dict[str, str] | None = None,
    on_validation: Callable[[dict[str, float], int], None] | None = None,
    resume: bool = False,
) -> TaskResult:
    """Run ``config``'s task and record it.

    Everything that can fail on user input (device, dataset preparation) is checked
    before the MLflow run is created; a failure after that marks the run FAILED.
    ``resume``: continue a killed run from its last checkpoint, in its MLflow run.
    """
    started = time.perf_counter()
    device, data, task = preflight(config)
    seed_everything(config.seed, config.train.threads)
    env = environment(config.device)
    checkpoints = run_checkpoints(config, data.fingerprint, resume)

    tracker: Tracker | None = None
    if checkpoints and resume and config.tracking.enabled:
        run_id = checkpoints.identity.get("mlflow_run_id")
        if run_id:
            tracker = Tracker.resume(config.tracking.uri, run_id)
    if config.tracking.enabled and tracker is None:
        tags = {**run_tags(config, data.fingerprint, env), **(extra_tags or {})}
        name = (
            config.tracking.run_name
            or f"{config.model.name}-{config.embedding.name}-{config.dataset.name}-s{config.seed}"
        )
        tracker = Tracker.start(
            config.tracking.uri, config.tracking.experiment, name, tags, parent_run_id
        )
    if checkpoints and tracker:
        checkpoints.identity["mlflow_run_id"] = tracker.run_id
    try:
        if tracker and not resume:
            tracker.log_params(flatten(config.identity()))
            tracker.log_text(config.to_yaml(), "config.yaml")

        def log_metrics(metrics: dict[str, float], step: int) -> None:
            if tracker:
                tracker.log_metrics(metrics, step)

        def validation(metrics: dict[str, float], step: int) -> None:
            log_metrics(metrics, step)
            if on_validation:
                on_validation(metrics, step)

        ctx = RunContext(config, data, device, log_metrics, validation, checkpoints)
        output = task.run(ctx)
        result = TaskResult(
            task=config.task.name,
            model=config.model.name,
            embedding=config.embedding.name,
            dataset=config.dataset.name,
            protocol=config.dataset.protocol,
            seed=config.seed,
            config=config.identity(),
            config_hash=config.config_hash(),
            data_fingerprint=data.fingerprint,
            metrics=output.metrics,
            higher_is_better=output.higher_is_better,
            details=output.details,
            environment=env,
            mlflow_run_id=tracker.run_id if tracker else None,
            mlflow_tracking_uri=tracker.uri if tracker else None,
            created=now_iso(),
            duration_s=round(time.perf_counter() - started, 3),
        )
        result.write(result_path(config))
        if out:
            result.write(out)
        if tracker:
            tracker.log_metrics(output.metrics)
            tracker.log_text(result.model_dump_json(indent=2), "result.json")
            tracker.log_text(_json(env), "environment.json")
            tracker.finish()
        if checkpoints:
            remove_checkpoints(checkpoints)
        return result
    except BaseException:
        if tracker:
            tracker.fail()
        if checkpoints:
            checkpoints.close()
        raise


def _json(data: Any) -> str:
    import json

    return json.dumps(data, indent=2, sort_keys=True)
