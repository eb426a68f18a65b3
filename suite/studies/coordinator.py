"""Run a study: open (or resume) it, start the workers, write and log its summary.

The coordinating process does everything that must happen once before any worker
starts: it checks the search space against the config, prepares the dataset, creates or
loads the Optuna study and creates or finds the study's MLflow parent run. Then it runs
one worker in-process (``--workers 1``), N worker processes (spawned, so no worker
inherits a forked torch) or, with ``--executor ray``, the trials as tasks on a Ray cluster
(:mod:`suite.studies.on_ray`), waits for them, and writes the summary.

Re-running the same study resumes it (``load_if_exists``): the budget counts the trials
already finished, trials left RUNNING by a dead worker are failed once their heartbeat
is older than the grace period and their params re-queued.
"""

from __future__ import annotations

import multiprocessing
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from suite.errors import ConfigError, SuiteError
from suite.executors.factory import make_executor
from suite.executors.ray_cluster import RayExecutor
from suite.progress import progress_bar
from suite.studies.on_ray import run_on_ray
from suite.studies.report import StudySummary, summarize
from suite.studies.spec import StudySpec
from suite.studies.storage import (
    check_storage_for_workers,
    default_storage_url,
    describe,
    open_storage,
)
from suite.studies.tracking import ensure_parent_run, log_summary
from suite.studies.worker import (
    StudySession,
    count_trials,
    quiet_optuna,
    run_worker,
    worker_main,
)
from suite.tracking import Tracker

RESULTS_ROOT = Path("results/studies")
SPEC_ATTR = "suite:spec_hash"


@dataclass
class StudyOutcome:
    """What a session of a study did, and where its outputs are."""

    summary: StudySummary
    storage_url: str
    parent_run_id: str | None
    out_dir: Path
    complete: bool
    """Whether the study has reached its ``n_trials`` (always true for a timeout budget)."""


def default_out_dir(name: str) -> Path:
    return RESULTS_ROOT / name


def open_study(spec: StudySpec, storage: Any) -> tuple[optuna.Study, bool]:
    """Create the Optuna study, or load it when it exists; return it and whether it was
    created here. Creation is atomic in every storage, so exactly one process creates it."""
    try:
        study = optuna.create_study(
            study_name=spec.name, storage=storage, directions=spec.directions
        )
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=spec.name, storage=storage)
        created = False
    stored = [d.name.lower() for d in study.directions]
    if stored != spec.directions:
        raise SuiteError(
            f"study {spec.name!r} in the storage has directions {stored}, the study file asks for "
            f"{spec.directions}; rename the study or use another --storage"
        )
    names = [o.metric for o in spec.objectives]
    if study.metric_names != names:  # optuna-dashboard shows these names, not "Objective 0"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(names)
    if created:
        study.set_user_attr(SPEC_ATTR, _space_hash(spec))
    elif study.user_attrs.get(SPEC_ATTR) not in (None, _space_hash(spec)):
        warnings.warn(
            f"study {spec.name!r}: the search space, objectives or base config changed since the "
            "study started; earlier trials stay in it",
            stacklevel=2,
        )
    return study, created


def _space_hash(spec: StudySpec) -> str:
    from suite.config import stable_hash

    data = spec.model_dump(mode="json", include={"space", "objectives", "constraints"})
    data["base"] = spec.base.config_hash()
    return stable_hash(data)


def run_study(
    spec: StudySpec,
    workers: int = 1,
    storage: str | None = None,
    out_dir: str | Path | None = None,
    quiet: bool = False,
    executor: str = "local",
    address: str | None = None,
) -> StudyOutcome:
    """Run (or resume) ``spec`` with ``workers`` processes on this machine (``executor``
    ``local``), or with its trials as tasks on the Ray cluster at ``address`` (``ray``: the
    storage and the sampler stay in this process, see :mod:`suite.studies.on_ray`)."""
    from suite.data.source import get_prepared

    if workers < 1:
        raise SuiteError(f"--workers must be >= 1, got {workers}")
    runs_on = make_executor(executor, workers, address)
    if isinstance(runs_on, RayExecutor) and workers != 1:
        raise ConfigError(
            "--workers counts processes on this machine; with --executor ray the cluster's "
            "CPUs and GPUs set how many trials run at once"
        )
    quiet_optuna()
    out = (Path(out_dir) if out_dir else default_out_dir(spec.name)).resolve()
    url = storage or default_storage_url(out, workers)
    check_storage_for_workers(url, workers)
    spec.check_space()
    spec.check_metrics()
    base = spec.base
    prepared = get_prepared(base.dataset, progress=base.train.progress and not quiet)
    if isinstance(runs_on, RayExecutor):  # each node checks its own prepared data against it
        runs_on.fingerprints = {base.dataset.model_dump_json(): prepared.fingerprint}

    store = open_storage(url, spec.heartbeat)
    study, created = open_study(spec, store)
    parent_run_id = None
    if base.tracking.enabled:
        tags = {
            "suite.study_storage": describe(url),
            "suite.dataset": base.dataset.name,
            "suite.task": base.task.name,
        }
        parent_run_id = ensure_parent_run(
            study, created, base.tracking.uri, base.tracking.experiment, tags
        )
        if created:
            Tracker.of(base.tracking.uri, parent_run_id).log_text(_spec_yaml(spec), "study.yaml")
    deadline = time.time() + spec.budget.timeout if spec.budget.timeout else None
    session = StudySession(spec, url, parent_run_id, deadline, quiet=quiet)
    if not quiet:
        verb = "created" if created else "resuming"
        where = (
            f"trials on the Ray cluster {address or '(RAY_ADDRESS, else started here)'}"
            if isinstance(runs_on, RayExecutor)
            else f"{workers} worker(s)"
        )
        print(
            f"[{spec.name}] {verb} study in {describe(url)}; {where}; "
            f"budget {spec.budget.n_trials or 'unlimited'} trials"
            f"{f', {spec.budget.timeout:g}s' if spec.budget.timeout else ''}",
            flush=True,
        )

    bar = _progress(spec, study, quiet)
    try:
        if isinstance(runs_on, RayExecutor):
            run_on_ray(session, runs_on, bar)
            errors: list[str] = []
        else:
            errors = _run_workers(session, workers, study, bar)
    finally:
        bar.close()
    summary = summarize(spec, optuna.load_study(study_name=spec.name, storage=store), out)
    n = spec.budget.n_trials
    finished = summary.counts["complete"] + summary.counts["pruned"]
    complete = n is None or finished >= n
    if parent_run_id:
        log_summary(
            base.tracking.uri,
            parent_run_id,
            [*summary.files, *summary.best_configs],
            summary.metrics,
            _summary_tags(summary),
            finished=complete,
        )
    if errors:
        raise SuiteError("; ".join(errors) + f" (summary so far in {out})")
    return StudyOutcome(summary, url, parent_run_id, out, complete)


def _progress(spec: StudySpec, study: optuna.Study, quiet: bool) -> Any:
    """A bar over the budget's finished trials, with rate and ETA."""
    finished, _ = count_trials(study)
    return progress_bar(
        total=spec.budget.n_trials,
        initial=finished,
        desc=f"study {spec.name}",
        unit="trial",
        enabled=not quiet,
    )


def _run_workers(session: StudySession, workers: int, study: optuna.Study, bar: Any) -> list[str]:
    if workers == 1:
        run_worker(session, 0, bar)
        return []
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=worker_main, args=(session, i), name=f"study-worker-{i}")
        for i in range(workers)
    ]
    for process in processes:
        process.start()
    try:
        for process in processes:
            while process.is_alive():  # the workers are other processes: poll the storage
                process.join(timeout=2.0)
                finished, _ = count_trials(study)
                bar.update(max(0, finished - bar.n))
    except KeyboardInterrupt:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
        raise
    return [
        f"worker {i} exited with code {p.exitcode}" for i, p in enumerate(processes) if p.exitcode
    ]


def _spec_yaml(spec: StudySpec) -> str:
    import yaml

    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)


def _summary_tags(summary: StudySummary) -> dict[str, str]:
    return {
        "suite.pareto_trials": ",".join(str(n) for n in summary.pareto),
        "suite.best_trials": ",".join(str(n) for n in summary.best),
    }
