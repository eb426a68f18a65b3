"""The one run path: resolved config -> prepared data -> task -> MLflow + results JSON."""

from __future__ import annotations

import contextlib
import math
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
from suite.engine.distributed import check_shardable
from suite.engine.parallel import Parallel, join_process_group, leave_process_group
from suite.environment import environment
from suite.errors import ConfigError, DiskFullError, SuiteError
from suite.models.base import RecModel
from suite.results import (
    ARRAYS_DETAIL,
    OUT_OPTION,
    RESULTS_OPTION,
    TaskResult,
    now_iso,
    write_arrays,
)
from suite.runs.checks import (
    check_checkpoint_dir,
    check_memory,
    check_output_path,
    check_threads,
)
from suite.runs.names import run_name
from suite.runs.signals import interruptible, interruption, note_killed_run
from suite.tasks.base import RunContext, Task
from suite.tracking import Tracker, flatten, resolve_tracking_uri, sqlite_path

FINGERPRINT_CHARS = 12


def result_path(config: RunConfig, fingerprint: str) -> Path:
    """Default place of a run's result JSON under ``tracking.results_dir``: named by the
    config hash and the data fingerprint, so runs on different data never share a file."""
    name = (
        f"{config.model.name}-{config.embedding.name}-{config.config_hash()}"
        f"-data{fingerprint[:FINGERPRINT_CHARS]}-seed{config.seed}.json"
    )
    return Path(config.tracking.results_dir) / config.task.name / config.dataset.name / name


def run_tags(config: RunConfig, fingerprint: str, env: dict[str, Any]) -> dict[str, str]:
    commit = str(env["git_commit"])
    tags = {
        "suite.config_hash": config.config_hash(),
        "suite.data_fingerprint": fingerprint,
        "suite.task": config.task.name,
        "suite.model": config.model.name,
        "suite.embedding": config.embedding.name,
        "suite.dataset": config.dataset.name,
        "suite.protocol": str(config.dataset.protocol),
        "suite.seed": str(config.seed),
        "suite.git_commit": commit,
        "suite.version": str(env["suite_version"]),
        "torch.version": str(env["torch"]),
        "fbgemm.version": str(env["fbgemm"]),
        "suite.device": str(env["device"]),
        "suite.device_name": str(env["device_name"]),
        # what MLflow's UI shows under Source
        "mlflow.source.type": "LOCAL",
        "mlflow.source.name": "suite",
    }
    if commit != "unknown":
        tags["mlflow.source.git.commit"] = commit.removesuffix("-dirty")
        tags["suite.git_dirty"] = str(commit.endswith("-dirty")).lower()
    return tags


def check_outputs(config: RunConfig, extra: dict[str, str | Path | None] | None = None) -> None:
    """Every place the run will write, checked before any work: the result directory,
    the checkpoint directory, the SQLite tracking store, and ``extra`` (``{"--out": path}``)."""
    for field, path in (extra or {}).items():
        if path is not None:
            check_output_path(path, field, kind="file")
    check_output_path(config.tracking.results_dir, "tracking.results_dir", kind="dir")
    check_checkpoint_dir(config)
    if config.tracking.enabled:
        store = sqlite_path(resolve_tracking_uri(config.tracking.uri))
        if store is not None:
            check_output_path(store, "--tracking-uri", kind="file", may_exist=True)


def preflight(
    config: RunConfig, outputs: dict[str, str | Path | None] | None = None
) -> tuple[torch.device, PreparedDataset, Task]:
    """Everything that can fail on user input, done before any MLflow run exists: the
    device, the thread count, the output paths, the task's own check of the config, the
    prepared data and whether the model's tables and batches fit in memory."""
    device = resolve_device(config.device)
    check_threads(config)
    check_outputs(config, outputs)
    task: Task = config.task.registry.get(config.task.name)()
    task.check(config)
    data = get_prepared(config.dataset, progress=config.train.progress)
    check_memory(config, data.schema.cardinalities, device)
    return device, data, task


def log_data_input(tracker: Tracker, config: RunConfig, data: PreparedDataset) -> None:
    """The prepared data as the run's MLflow dataset input, its fingerprint as digest."""
    tracker.log_dataset(
        name=f"{config.dataset.name}/{config.dataset.protocol}",
        digest=data.fingerprint,
        source=str(data.path) if data.path else config.dataset.name,
        context="training",
        rows=data.manifest.get("rows", {}),
        fingerprint=data.fingerprint,
    )


def check_distributed(config: RunConfig, parallel: Parallel) -> None:
    """What a distributed run cannot do, refused in one line before any work."""
    task = config.task.registry.get(config.task.name)
    if not getattr(task, "distributed", False):
        runs = sorted(
            n
            for n in config.task.registry.names()
            if getattr(config.task.registry.get(n), "distributed", False)
        )
        raise ConfigError(
            f"task.name={config.task.name} runs in one process; distributed runs "
            f"({parallel.world} ranks) take the tasks: {', '.join(runs)}"
        )
    check_shardable(config)


class Diverged(SuiteError):
    """Training produced a non-finite loss."""


def _check_finite(config: RunConfig, metrics: dict[str, float], step: int) -> None:
    for name, value in metrics.items():
        if "loss" in name and not math.isfinite(value):
            raise Diverged(
                f"training diverged: {name} is {value} at step {step} "
                f"(train.dense_lr={config.train.dense_lr}, train.sparse_lr={config.train.sparse_lr}); "
                "try smaller learning rates"
            )


class _TrackedContext(RunContext):
    """The task's context, remembering the last model it built (to log it)."""

    model: RecModel | None = None

    def build_model(self, config: RunConfig | None = None) -> RecModel:
        self.model = super().build_model(config)
        return self.model


def execute(
    config: RunConfig,
    out: str | Path | None = None,
    parent_run_id: str | None = None,
    extra_tags: dict[str, str] | None = None,
    on_validation: Callable[[dict[str, float], int], None] | None = None,
    resume: bool = False,
) -> TaskResult:
    """Run ``config``'s task and record it.

    Everything that can fail on user input (device, output paths, dataset preparation,
    memory, the checkpoints to resume from) is checked before the MLflow run is created. A
    failure after that marks the run FAILED; SIGINT/SIGTERM mark it KILLED with the metrics
    logged so far (and re-raise :class:`~suite.runs.signals.Interrupted`/``KeyboardInterrupt``).
    ``resume``: continue a killed run from its last checkpoint, in its own MLflow run.
    """
    started = time.perf_counter()
    parallel = join_process_group(resolve_device(config.device))
    try:
        return _execute(
            config, out, parent_run_id, extra_tags, on_validation, resume, started, parallel
        )
    finally:
        if parallel is not None:
            leave_process_group()


def _execute(
    config: RunConfig,
    out: str | Path | None,
    parent_run_id: str | None,
    extra_tags: dict[str, str] | None,
    on_validation: Callable[[dict[str, float], int], None] | None,
    resume: bool,
    started: float,
    parallel: Parallel | None,
) -> TaskResult:
    if parallel is not None:
        check_distributed(config, parallel)
        if not parallel.leader:  # rank 0 alone records the run, and prepares the data first
            config = config.with_overrides({"tracking.enabled": False})
            out = None
            parallel.barrier()
    device, data, task = preflight(config, {"--out": out})
    if parallel is not None and parallel.leader:
        parallel.barrier()  # the others find the data prepared
    seed_everything(config.seed, config.train.threads)
    env = environment(config.device)
    if parallel is not None:
        env["world_size"] = parallel.world
    checkpoints = run_checkpoints(config, data.fingerprint, resume, parallel)

    with interruptible():
        tracker: Tracker | None = None
        if checkpoints and resume and config.tracking.enabled:
            run_id = checkpoints.identity.get("mlflow_run_id")
            if run_id:
                tracker = Tracker.resume(config.tracking.uri, run_id)
        resumed = tracker is not None
        if config.tracking.enabled and tracker is None:
            tags = {**run_tags(config, data.fingerprint, env), **(extra_tags or {})}
            if parallel is not None:
                tags["suite.world_size"] = str(parallel.world)
            tracker = Tracker.start(
                config.tracking.uri,
                config.tracking.experiment,
                run_name(config),
                tags,
                parent_run_id,
            )
        if checkpoints and tracker:
            checkpoints.identity["mlflow_run_id"] = tracker.run_id
        try:
            result = _run(
                config,
                data,
                task,
                device,
                env,
                tracker,
                out,
                on_validation,
                started,
                checkpoints,
                resumed,
                parallel,
            )
            if checkpoints:
                remove_checkpoints(checkpoints)
            return result
        except BaseException as exc:
            if tracker:
                signal_name = interruption(exc)
                if signal_name:
                    with contextlib.suppress(SuiteError):  # the store may be what failed
                        saved = bool(checkpoints and checkpoints.has_checkpoints())
                        note_killed_run(exc, tracker.run_id, tracker.uri, saved)
                        tracker.kill(f"{signal_name} during the run")
                else:
                    _end_failed(tracker, exc)
            if checkpoints:
                checkpoints.close()
            if not interruption(exc):
                kept = [p for p in (result_path(config, data.fingerprint), out) if p]
                _note_kept_results(exc, kept, time.time() - (time.perf_counter() - started))
            raise


def _end_failed(tracker: Tracker, exc: BaseException) -> None:
    """End the run FAILED with its error as a tag (on a full SQLite store, in place). If the
    store still cannot record it, the run stays RUNNING and ``exc``'s message says so."""
    with contextlib.suppress(SuiteError):  # a full store may still take the status
        tracker.set_tags({"suite.error": str(exc)[:5000] or type(exc).__name__})
    try:
        tracker.fail()
    except SuiteError as failed:
        reason = "its store is full" if isinstance(failed, DiskFullError) else str(failed)
        _add_to_message(
            exc,
            f"MLflow run {tracker.run_id} could not be marked FAILED ({reason}) and stays "
            "RUNNING until `suite runs clean` marks it KILLED",
        )


def _note_kept_results(exc: BaseException, paths: list[str | Path], since: float) -> None:
    """Say in ``exc``'s message which result files this run wrote before it failed."""
    written = [str(p) for p in paths if Path(p).is_file() and Path(p).stat().st_mtime >= since]
    if written:
        _add_to_message(exc, f"the result was written and is kept: {', '.join(written)}")


def _add_to_message(exc: BaseException, note: str) -> None:
    """Append ``note`` to a one-line :class:`SuiteError`'s message (its type kept for
    callers); other exceptions get it as a traceback note."""
    if isinstance(exc, SuiteError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        exc.args = (f"{exc.args[0]}; {note}",)
    else:
        exc.add_note(note)


def _run(
    config: RunConfig,
    data: PreparedDataset,
    task: Task,
    device: torch.device,
    env: dict[str, Any],
    tracker: Tracker | None,
    out: str | Path | None,
    on_validation: Callable[[dict[str, float], int], None] | None,
    started: float,
    checkpoints: Any,
    resumed: bool,
    parallel: Parallel | None = None,
) -> TaskResult:
    if tracker and not resumed:
        tracker.log_params(flatten(config.identity()))
        tracker.log_text(config.to_yaml(), "config.yaml")
        log_data_input(tracker, config, data)
    last_step = 0

    def log_metrics(metrics: dict[str, float], step: int) -> None:
        nonlocal last_step
        last_step = max(last_step, step)
        if tracker:
            tracker.log_metrics(metrics, step)
        _check_finite(config, metrics, step)

    def validation(metrics: dict[str, float], step: int) -> None:
        log_metrics(metrics, step)
        if on_validation:
            on_validation(metrics, step)

    ctx = _TrackedContext(config, data, device, log_metrics, validation, checkpoints, parallel)
    output = task.run(ctx)
    plan = output.details.get("sharding_plan")
    plan_text = None
    if plan:
        from suite.engine.distributed import format_plan

        plan_text = format_plan(plan)
        if parallel is None or parallel.leader:
            print(plan_text, flush=True)
    final_step = int(output.details.get("steps", last_step) or last_step)
    _check_finite(config, output.metrics, final_step)
    path = result_path(config, data.fingerprint)
    details = dict(output.details)
    leader = parallel is None or parallel.leader
    if output.arrays and config.tracking.keep_arrays and leader:
        details[ARRAYS_DETAIL] = write_arrays(path, output.arrays, RESULTS_OPTION)
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
        higher_is_better=task.higher_is_better(output),
        details=details,
        environment=env,
        mlflow_run_id=tracker.run_id if tracker else None,
        mlflow_tracking_uri=tracker.uri if tracker else None,
        created=now_iso(),
        duration_s=round(time.perf_counter() - started, 3),
    )
    if not leader:
        return result
    result.write(path, RESULTS_OPTION)
    if out:
        result.write(out, OUT_OPTION)
    if tracker:
        # the final figures belong to the last training step, after the last validation
        tracker.log_metrics(output.metrics, final_step)
        tracker.log_text(result.model_dump_json(indent=2), "result.json")
        tracker.log_text(_json(env), "environment.json")
        if ARRAYS_DETAIL in details:
            arrays_file = details[ARRAYS_DETAIL]["file"]
            tracker.call(
                "log its arrays", lambda: tracker.client.log_artifact(tracker.run_id, arrays_file)
            )
        log_plots(tracker, plot_paths(details))
        if plan_text is not None:
            tracker.log_text(plan_text, "sharding_plan.txt")
            tracker.log_text(_json(plan), "sharding_plan.json")
        if ctx.model is not None and parallel is None:
            from suite.runs.model_log import log_model

            log_model(tracker, config, ctx.model, final_step)
        tracker.finish()
    return result


PLOTS_ARTIFACT_DIR = "plots"


def plot_paths(details: dict[str, Any]) -> list[Path]:
    """The figures a task drew that exist on disk: ``details["plots"]`` (a list of paths)
    and ``details["plot"]`` (one path, the scaling task's)."""
    listed = details.get("plots") or []
    if isinstance(listed, (str, Path)):
        listed = [listed]
    single = details.get("plot")
    paths = [Path(p) for p in [*listed, *([single] if single else [])]]
    return [p for p in dict.fromkeys(paths) if p.is_file()]


def log_plots(tracker: Tracker, paths: list[Path]) -> None:
    """Each of ``paths`` as an artifact of the run, under ``plots/``."""
    for path in paths:
        tracker.call(
            f"log its plot {path.name}",
            lambda p=path: tracker.client.log_artifact(tracker.run_id, str(p), PLOTS_ARTIFACT_DIR),
        )


def _json(data: Any) -> str:
    import json

    return json.dumps(data, indent=2, sort_keys=True)
