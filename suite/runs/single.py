"""The one run path: resolved config -> prepared data -> task -> results JSON, recorded in
MLflow by its run record (:mod:`suite.runs.record`)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from suite.config import RunConfig
from suite.data.prepared import PreparedDataset
from suite.data.source import get_prepared
from suite.engine.build import resolve_device, seed_everything
from suite.engine.checkpoint import remove_checkpoints, run_checkpoints
from suite.engine.distributed import check_distributed
from suite.engine.parallel import process_group
from suite.environment import environment
from suite.errors import SuiteError
from suite.fileio import check_space
from suite.models.base import Ranks, RecModel
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
from suite.runs.record import RunRecord, add_to_message, run_tags
from suite.runs.signals import interruptible, interruption
from suite.tasks.base import RunContext, Task, TaskOutput
from suite.tracking import flatten, resolve_tracking_uri, sqlite_path

FINGERPRINT_CHARS = 12


def result_path(config: RunConfig, fingerprint: str) -> Path:
    """Default place of a run's result JSON under ``tracking.results_dir``: named by the
    config hash and the data fingerprint, so runs on different data never share a file."""
    name = (
        f"{config.model.name}-{config.embedding.name}-{config.config_hash()}"
        f"-data{fingerprint[:FINGERPRINT_CHARS]}-seed{config.seed}.json"
    )
    return Path(config.tracking.results_dir) / config.task.name / config.dataset.name / name


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
    check_result_space(config, data, (outputs or {}).get("--out"))
    return device, data, task


RESULT_JSON_BYTES = 64 << 10
"""Room kept for a result JSON (a few KiB as written; its details, plots' names and the
environment vary)."""
ARRAY_BYTES_PER_TEST_ROW = 9
"""The kept arrays' bytes per test row: its logit (at most float64) and its label (uint8)."""


def check_result_space(config: RunConfig, data: PreparedDataset, out: str | Path | None) -> None:
    """Refuse, before training, a result folder (or ``--out``) whose filesystem has no room
    for the result JSON and the arrays it keeps (:class:`~suite.errors.DiskFullError`)."""
    need = RESULT_JSON_BYTES
    if config.tracking.keep_arrays:
        need += ARRAY_BYTES_PER_TEST_ROW * int(data.manifest.get("rows", {}).get("test", 0))
    check_space(result_path(config, data.fingerprint), need, RESULTS_OPTION)
    if out is not None:
        check_space(out, RESULT_JSON_BYTES, OUT_OPTION)


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
    with process_group(resolve_device(config.device)) as ranks:
        run = _prepare(config, out, on_validation, started, ranks)
        return _execute(run, parent_run_id, extra_tags, resume)


@dataclass
class _Run:
    """A single run once prepared: what it was given and what its preflight found."""

    config: RunConfig
    out: str | Path | None
    on_validation: Callable[[dict[str, float], int], None] | None
    started: float
    ranks: Ranks
    device: torch.device
    data: PreparedDataset
    task: Task
    env: dict[str, Any]

    @property
    def leader(self) -> bool:
        """Whether this process writes the results (rank 0, or the only process)."""
        return self.ranks.leader


def _prepare(
    config: RunConfig,
    out: str | Path | None,
    on_validation: Callable[[dict[str, float], int], None] | None,
    started: float,
    ranks: Ranks,
) -> _Run:
    """The preflight (:func:`preflight`), the seeds and the environment, on every rank."""
    check_distributed(config, ranks)
    if not ranks.leader:  # rank 0 alone records the run, and prepares the data first
        config = config.with_overrides({"tracking.enabled": False})
        out = None
        ranks.barrier()
    device, data, task = preflight(config, {"--out": out})
    if ranks.leader:
        ranks.barrier()  # the others find the data prepared
    seed_everything(config.seed, config.train.threads)
    env = {**environment(config.device), **ranks.environment()}
    return _Run(config, out, on_validation, started, ranks, device, data, task, env)


def _execute(
    run: _Run, parent_run_id: str | None, extra_tags: dict[str, str] | None, resume: bool
) -> TaskResult:
    checkpoints = run_checkpoints(run.config, run.data.fingerprint, resume, run.ranks)
    with interruptible():
        record = _open_record(run, checkpoints, resume, parent_run_id, extra_tags)
        try:
            with record:  # ends the MLflow run FINISHED, FAILED or KILLED
                result = _run(run, record, checkpoints)
                record.finish()
                if checkpoints:
                    remove_checkpoints(checkpoints)
            return result
        except BaseException as exc:
            if checkpoints:
                checkpoints.close()
            if not interruption(exc):
                kept = [p for p in (result_path(run.config, run.data.fingerprint), run.out) if p]
                _note_kept_results(exc, kept, time.time() - (time.perf_counter() - run.started))
            raise


def _open_record(
    run: _Run,
    checkpoints: Any,
    resume: bool,
    parent_run_id: str | None,
    extra_tags: dict[str, str] | None,
) -> RunRecord:
    """The run's MLflow record: the killed run its checkpoints name, reopened (``resume``),
    else a new run; off with tracking off (and on every rank but 0)."""
    config = run.config
    if not config.tracking.enabled:
        return RunRecord.off()
    options: dict[str, Any] = {
        "resumable": lambda: bool(checkpoints and checkpoints.has_checkpoints())
    }
    run_id = checkpoints.identity.get("mlflow_run_id") if checkpoints and resume else None
    if run_id:
        record = RunRecord.resume(config, run_id, **options)
    else:
        ranks = {f"suite.{k}": str(v) for k, v in run.ranks.environment().items()}
        tags = {**run_tags(config, run.data.fingerprint, run.env), **(extra_tags or {}), **ranks}
        record = RunRecord.start(config, run_name(config), tags, parent_run_id, **options)
    if checkpoints:
        checkpoints.identity["mlflow_run_id"] = record.run_id
    return record


def _note_kept_results(exc: BaseException, paths: list[str | Path], since: float) -> None:
    """Say in ``exc``'s message which result files this run wrote before it failed."""
    written = [str(p) for p in paths if Path(p).is_file() and Path(p).stat().st_mtime >= since]
    if written:
        add_to_message(exc, f"the result was written and is kept: {', '.join(written)}")


def _run(run: _Run, record: RunRecord, checkpoints: Any) -> TaskResult:
    """Train and measure, write the result JSON and record the run's figures and files."""
    record.log_setup(flatten(run.config.identity()), run.config, run.data)
    output, last_step, model = _train(run, record, checkpoints)
    plan = output.details.get("sharding_plan")
    plan_text = _show_plan(plan, run.leader) if plan else None
    final_step = int(output.details.get("steps", last_step) or last_step)
    _check_finite(run.config, output.metrics, final_step)
    # the final figures belong to the last training step, after the last validation; they
    # reach MLflow before any file is written, so a results disk that fails loses none
    record.log_metrics(output.metrics, final_step)
    result = _result(run, record, output)
    if not run.leader:
        return result
    record.log_text(result.model_dump_json(indent=2), "result.json")
    record.log_json(run.env, "environment.json")
    result.write(result_path(run.config, run.data.fingerprint), RESULTS_OPTION)
    if run.out:
        result.write(run.out, OUT_OPTION)
    if ARRAYS_DETAIL in result.details:
        record.log_artifact(result.details[ARRAYS_DETAIL]["file"], "log its arrays")
    record.log_plots(result.details)
    if plan_text is not None:
        record.log_text(plan_text, "sharding_plan.txt")
        record.log_json(plan, "sharding_plan.json")
    if model is not None:
        record.log_model(run.config, model, final_step)
    return result


def _train(
    run: _Run, record: RunRecord, checkpoints: Any
) -> tuple[TaskOutput, int, RecModel | None]:
    """The task's output, the last step it logged and the last model it built."""
    last_step = 0

    def log_metrics(metrics: dict[str, float], step: int) -> None:
        nonlocal last_step
        last_step = max(last_step, step)
        record.log_metrics(metrics, step)
        _check_finite(run.config, metrics, step)

    def validation(metrics: dict[str, float], step: int) -> None:
        log_metrics(metrics, step)
        if run.on_validation:
            run.on_validation(metrics, step)

    ctx = _TrackedContext(
        run.config, run.data, run.device, log_metrics, validation, checkpoints, run.ranks
    )
    output = run.task.run(ctx)
    return output, last_step, ctx.model


def _show_plan(plan: Any, leader: bool) -> str:
    """The sharding plan as text, shown by the leader on stderr (stdout carries the
    result only; the plan is also the run's ``sharding_plan.txt`` artifact)."""
    from suite.engine.planning import format_plan

    text = format_plan(plan)
    if leader:
        print(text, file=sys.stderr, flush=True)
    return text


def _result(run: _Run, record: RunRecord, output: TaskOutput) -> TaskResult:
    """The run's result; the leader keeps the task's arrays beside it (``keep_arrays``)."""
    config = run.config
    details = dict(output.details)
    if output.arrays and config.tracking.keep_arrays and run.leader:
        path = result_path(config, run.data.fingerprint)
        details[ARRAYS_DETAIL] = write_arrays(path, output.arrays, RESULTS_OPTION)
    return TaskResult(
        task=config.task.name,
        model=config.model.name,
        embedding=config.embedding.name,
        dataset=config.dataset.name,
        protocol=config.dataset.protocol,
        seed=config.seed,
        config=config.identity(),
        config_hash=config.config_hash(),
        data_fingerprint=run.data.fingerprint,
        metrics=output.metrics,
        higher_is_better=run.task.higher_is_better(output),
        details=details,
        environment=run.env,
        mlflow_run_id=record.run_id,
        mlflow_tracking_uri=record.uri,
        created=now_iso(),
        duration_s=round(time.perf_counter() - run.started, 3),
    )
