"""A study worker: trials one at a time until the study's budget is met.

Each trial is an ordinary run: the sampled params become dotted overrides of the base
config and :func:`suite.runs.single.execute` trains and records it as a child of the
study's parent MLflow run. There is no second training loop.

Budget: ``n_trials`` counts finished trials, COMPLETE or PRUNED (a pruned trial is a
decision, not a loss); FAIL trials (crashes, dead workers) do not count and are made
up for. Several workers never overshoot: a trial only runs if the finished trials plus
the running trials numbered before it leave room (see :meth:`TrialObjective.claim`); a
trial that loses that race ends FAIL at once, marked ``suite:surplus``, before any work.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from suite.config import RunConfig
from suite.errors import ConfigError, SuiteError
from suite.results import TaskResult
from suite.studies.spec import StudySpec
from suite.studies.storage import (
    TrialHeartbeat,
    fail_stale_trials,
    has_builtin_heartbeat,
    open_storage,
)
from suite.studies.tracking import STUDY_TAG, TRIAL_TAG, mark_trial_runs
from suite.units import format_metric

METRICS_ATTR = "suite:metrics"
CONSTRAINTS_ATTR = "suite:constraints"
RUN_ATTR = "suite:mlflow_run_id"
HASH_ATTR = "suite:config_hash"
ERROR_ATTR = "suite:error"
SURPLUS_ATTR = "suite:surplus"
MAX_FAILURES_IN_ROW = 3
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass(frozen=True)
class StudySession:
    """What every worker of one session needs (picklable: sent to worker processes)."""

    spec: StudySpec
    storage_url: str
    parent_run_id: str | None
    deadline: float | None = None
    """``time.time()`` after which no trial starts (the budget's timeout)."""
    poll_s: float = 1.0
    quiet: bool = False


class SurplusTrial(Exception):
    """The budget was taken by other workers' trials; this one is not run."""


def quiet_optuna() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def make_sampler(spec: StudySpec, seed: int | None) -> optuna.samplers.BaseSampler:
    """The study's sampler. Constraints reach it through ``trial.set_constraint`` in the
    objective (Optuna 5's API; ``constraints_func`` is deprecated)."""
    s = spec.sampler
    if s.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if s.name == "nsga2":
        kwargs = {"population_size": s.population_size} if s.population_size else {}
        return optuna.samplers.NSGAIISampler(seed=seed, **kwargs)
    kwargs = {"n_startup_trials": s.n_startup_trials} if s.n_startup_trials is not None else {}
    return optuna.samplers.TPESampler(
        seed=seed,
        multivariate=True,
        group=spec.space.multi_method,
        **kwargs,
    )


def make_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    p = spec.pruning
    if p is None:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(
        n_startup_trials=p.n_startup_trials,
        n_warmup_steps=p.n_warmup_steps,
        interval_steps=p.interval_steps,
    )


def worker_seed(seed: int | None, existing_trials: int, index: int) -> int | None:
    """The sampler seed of one worker: the study's seed for the first worker of a fresh
    study (so a one-worker study reproduces), distinct for other workers and for later
    sessions (which would otherwise replay the first session's random samples)."""
    if seed is None:
        return None
    if existing_trials == 0 and index == 0:
        return seed
    return int(np.random.SeedSequence([seed, existing_trials, index]).generate_state(1)[0])


def load_study(spec: StudySpec, storage: Any, seed: int | None) -> optuna.Study:
    return optuna.load_study(
        study_name=spec.name,
        storage=storage,
        sampler=make_sampler(spec, seed),
        pruner=make_pruner(spec),
    )


class StaleTrialHandler:
    """Heartbeat-stale trial (its worker died): end its MLflow run KILLED and re-queue its
    params with Optuna's ``RetryHeartbeatStaleTrialCallback``."""

    def __init__(self, session: StudySession) -> None:
        self.session = session
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.retry = optuna.storages.RetryHeartbeatStaleTrialCallback(
                max_retry=session.spec.heartbeat.max_retry
            )

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        spec = self.session.spec
        print(
            f"[{spec.name}] trial {trial.number}: no heartbeat for {spec.heartbeat.grace_period}s "
            "(worker died); marked FAIL and re-queued",
            flush=True,
        )
        try:
            mark_trial_runs(
                spec.base.tracking.uri,
                self.session.parent_run_id,
                spec.name,
                trial.number,
                "STALE",
                end_status="KILLED",
            )
        except Exception as exc:  # tracking trouble must not stop the study
            print(
                f"[{spec.name}] could not end trial {trial.number}'s MLflow run: {exc}",
                file=sys.stderr,
            )
        self.retry(study, trial)


class TrialObjective:
    """The Optuna objective: sample, build the trial's config, run it, return objectives."""

    def __init__(
        self,
        session: StudySession,
        study: optuna.Study,
        index: int,
        storage: Any = None,
        bar: Any = None,
    ) -> None:
        self.session = session
        self.spec = session.spec
        self.study = study
        self.index = index
        self.storage = storage
        self.bar = bar
        self.last_state: TrialState | None = None
        self.last_error: str | None = None
        self.last_surplus = False
        self.fatal: str | None = None
        """A failure no other trial can avoid (the task lacks an objective's metric)."""

    def claim(self, trial: optuna.Trial) -> None:
        """Raise :class:`SurplusTrial` unless this trial still fits in ``n_trials``: the
        finished trials plus the running ones numbered before it (which asked first) must
        leave room. Trial numbers order the workers, so no two can both take the last slot."""
        n = self.spec.budget.n_trials
        if n is None:
            return
        trials = self.study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.RUNNING))
        taken = sum(1 for t in trials if t.state in FINISHED or t.number < trial.number)
        if taken >= n:
            trial.set_user_attr(SURPLUS_ATTR, True)
            raise SurplusTrial(f"the budget of {n} trials is taken by other workers; not run")

    def __call__(self, trial: optuna.Trial) -> float | list[float]:
        from suite.runs.single import execute

        config, tags = self.start(trial)
        try:
            with self._heartbeat(trial):
                result = execute(
                    config,
                    parent_run_id=self.session.parent_run_id,
                    extra_tags=tags,
                    on_validation=self._pruning_callback(trial),
                )
        except optuna.TrialPruned:
            self.mark_run(trial.number, "PRUNED", end_status="KILLED")
            raise
        except Exception as exc:
            self.failed(trial, exc)
            raise
        return self.values(trial, config, result)

    def start(self, trial: optuna.Trial) -> tuple[RunConfig, dict[str, str]]:
        """Claim a slot of the budget, sample the trial's params and return its run config
        and the MLflow tags of its run (what any executor needs to run it)."""
        spec = self.spec
        self.claim(trial)
        overrides = spec.space.sample(trial)
        try:
            config = spec.trial_config(
                {**overrides, "train.progress": False}, f"{spec.name}-t{trial.number}"
            )
        except ConfigError as exc:
            trial.set_user_attr(ERROR_ATTR, str(exc)[:2000])
            raise
        trial.set_user_attr(HASH_ATTR, config.config_hash())
        return config, {STUDY_TAG: spec.name, TRIAL_TAG: str(trial.number)}

    def failed(self, trial: optuna.Trial, exc: BaseException) -> None:
        """Record the trial's own error and tag its MLflow run FAIL."""
        trial.set_user_attr(ERROR_ATTR, f"{type(exc).__name__}: {exc}"[:2000])
        self.mark_run(trial.number, "FAIL")

    def values(
        self, trial: optuna.Trial, config: RunConfig, result: TaskResult
    ) -> float | list[float]:
        """The trial's objective values from its run's result (metrics, run id and
        constraint violations kept in its user attrs)."""
        spec = self.spec
        metrics = result.metrics
        needed = [o.metric for o in spec.objectives] + [c.metric for c in spec.constraints]
        missing = [m for m in needed if m not in metrics]
        if missing:
            message = (
                f"study {spec.name}: metric(s) {', '.join(missing)} not reported by task "
                f"{config.task.name} (it reports: {', '.join(sorted(metrics))})"
            )
            trial.set_user_attr(ERROR_ATTR, message)
            self.fatal = message
            raise ConfigError(message)
        trial.set_user_attr(METRICS_ATTR, {k: float(v) for k, v in metrics.items()})
        trial.set_user_attr(RUN_ATTR, result.mlflow_run_id)
        if spec.constraints:
            violations = [c.violation(metrics) for c in spec.constraints]
            trial.set_user_attr(CONSTRAINTS_ATTR, violations)
            for i, (constraint, violation) in enumerate(
                zip(spec.constraints, violations, strict=True)
            ):
                trial.set_constraint(f"{i}:{constraint.metric}", violation)
        values = [float(metrics[o.metric]) for o in spec.objectives]
        if any(not math.isfinite(v) for v in values):
            trial.set_user_attr(ERROR_ATTR, f"objective value is not finite: {values}")
            raise SuiteError(f"objective value is not finite: {values}")
        return values[0] if len(values) == 1 else values

    def _heartbeat(self, trial: optuna.Trial) -> Any:
        """Heartbeats for the trial where Optuna keeps none (a journal storage)."""
        if self.storage is None or has_builtin_heartbeat(self.storage):
            return contextlib.nullcontext()
        study_id = self.storage.get_study_id_from_name(self.spec.name)
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        return TrialHeartbeat(self.storage, trial_id, self.spec.heartbeat.interval)

    def _pruning_callback(self, trial: optuna.Trial) -> Any:
        pruner = self.spec.pruning
        if pruner is None:
            return None
        metric = self.spec.objectives[0].metric

        def on_validation(metrics: dict[str, float], step: int) -> None:
            if metric not in metrics:
                return
            trial.report(float(metrics[metric]), step)
            if trial.should_prune():
                raise optuna.TrialPruned(f"{metric}={metrics[metric]:.5f} at step {step}")

        return on_validation

    def mark_run(self, number: int, state: str, end_status: str | None = None) -> None:
        """Tag trial ``number``'s MLflow run with its Optuna state (and end it with
        ``end_status``); tracking trouble is one line on stderr, never the trial's outcome."""
        try:
            mark_trial_runs(
                self.spec.base.tracking.uri,
                self.session.parent_run_id,
                self.spec.name,
                number,
                state,
                end_status,
            )
        except Exception as exc:  # tracking trouble must not hide the trial's own outcome
            print(
                f"[{self.spec.name}] could not tag trial {number}'s MLflow run: {exc}",
                file=sys.stderr,
            )

    def after_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """Optuna callback: remember the outcome, print one line."""
        self.last_state = trial.state
        self.last_error = trial.user_attrs.get(ERROR_ATTR)
        self.last_surplus = bool(trial.user_attrs.get(SURPLUS_ATTR))
        if self.bar is not None and not self.last_surplus and trial.state in FINISHED:
            self.bar.update(1)
        if self.last_surplus or self.session.quiet:
            return
        line = f"[{self.spec.name}] {describe_trial(self.spec, trial)} (worker {self.index})"
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)


def describe_trial(spec: StudySpec, trial: FrozenTrial) -> str:
    """``trial 3 COMPLETE: method=qr val_auc=0.71 embedding_bytes=1.2e+06``."""
    parts = [f"trial {trial.number} {trial.state.name}:"]
    method = trial.params.get("method") or (
        next(iter(spec.space.methods)) if spec.space.methods else None
    )
    if method:
        parts.append(f"method={method}")
    metrics = trial.user_attrs.get(METRICS_ATTR) or {}
    for o in spec.objectives:
        if o.metric in metrics:
            parts.append(f"{o.metric}={format_metric(o.metric, metrics[o.metric])}")
    for c in spec.constraints:
        if c.metric in metrics and c.metric not in {o.metric for o in spec.objectives}:
            parts.append(f"{c.metric}={format_metric(c.metric, metrics[c.metric])}")
    violations = trial.user_attrs.get(CONSTRAINTS_ATTR)
    if violations and max(violations) > 0:
        parts.append("[infeasible]")
    if trial.state == TrialState.PRUNED and trial.intermediate_values:
        step = max(trial.intermediate_values)
        parts.append(f"pruned at step {step} ({trial.intermediate_values[step]:.5f})")
    if trial.state == TrialState.FAIL and trial.user_attrs.get(ERROR_ATTR):
        parts.append(str(trial.user_attrs[ERROR_ATTR]).splitlines()[0][:200])
    return " ".join(parts)


def count_trials(study: optuna.Study) -> tuple[int, int]:
    """(finished, running) trials of the study."""
    trials = study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.RUNNING))
    finished = sum(1 for t in trials if t.state in FINISHED)
    return finished, len(trials) - finished


def run_worker(session: StudySession, index: int = 0, bar: Any = None) -> int:
    """Run trials until the budget is met or the deadline passes; return how many ran.

    Before each trial, and while the remaining budget is covered by running trials (the
    worker then waits), trials of dead workers are failed by heartbeat so their
    re-queued copies get run. ``bar``: a progress bar to advance per finished trial.
    """
    quiet_optuna()
    spec = session.spec
    handler = StaleTrialHandler(session)
    storage = open_storage(session.storage_url, spec.heartbeat, handler)
    probe = optuna.load_study(study_name=spec.name, storage=storage)
    existing = len(probe.get_trials(deepcopy=False))
    study = load_study(spec, storage, worker_seed(spec.sampler.seed, existing, index))
    objective = TrialObjective(session, study, index, storage, bar)
    n = spec.budget.n_trials
    ran = failures_in_row = 0
    while session.deadline is None or time.time() < session.deadline:
        fail_stale_trials(study, storage, spec.heartbeat.grace_period, handler)
        finished, running = count_trials(study)
        if n is not None and finished >= n:
            break
        if n is not None and finished + running >= n:
            time.sleep(session.poll_s)
            continue
        objective.last_state = None
        study.optimize(objective, n_trials=1, catch=(Exception,), callbacks=[objective.after_trial])
        ran += 1
        if objective.fatal:
            raise SuiteError(objective.fatal)
        if objective.last_state == TrialState.FAIL and not objective.last_surplus:
            failures_in_row += 1
            if failures_in_row >= MAX_FAILURES_IN_ROW:
                raise SuiteError(
                    f"study {spec.name}: {failures_in_row} trials failed in a row in worker {index}; "
                    f"last error: {objective.last_error or 'see the log above'}"
                )
        elif objective.last_state in FINISHED:
            failures_in_row = 0
    return ran


def worker_main(session: StudySession, index: int) -> None:
    """Entry point of a worker process."""
    try:
        run_worker(session, index)
    except SuiteError as exc:
        print(f"error: worker {index}: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
