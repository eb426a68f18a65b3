"""A study's trials as tasks on a Ray cluster (``suite study FILE --executor ray``).

The Optuna storage and the sampler stay on the driver (this process): it asks each trial
(``study.ask``), samples its params and builds its run config as a local worker would
(:meth:`~suite.studies.worker.TrialObjective.start`), ships the config to the cluster as
one task asking for the run's CPUs (its torch threads) and one GPU when it trains on CUDA
(:class:`~suite.executors.ray_cluster.RayExecutor`), and tells the result back
(:meth:`~suite.studies.worker.TrialObjective.values`) when the task returns. Only the
driver reaches the storage, so the default SQLite file serves; the nodes reach MLflow,
where each trial is a child of the study's parent run, as locally.

As many trials run at once as the cluster's live nodes hold; the next is asked as one
finishes, so the sampler sees every finished trial first. Each trial records where it ran
(``suite:ran_on``: host and Ray node id). The driver beats each running trial's
heartbeat, so a killed driver's trials go stale and the next session re-queues them.

Pruning needs a trial to read the study while it trains, and the storage stays here: on
Ray each trial runs to its end and its validation reports are recorded afterwards (the
median pruner of a later local session uses them).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from suite.config import RunConfig
from suite.errors import ConfigError, SuiteError
from suite.executors.base import needs_of
from suite.executors.ray_cluster import RayExecutor, RaySession, node_of
from suite.results import TaskResult
from suite.studies.storage import TrialHeartbeat, fail_stale_trials, open_storage
from suite.studies.worker import (
    ERROR_ATTR,
    FINISHED,
    MAX_FAILURES_IN_ROW,
    SURPLUS_ATTR,
    StaleTrialHandler,
    StudySession,
    SurplusTrial,
    TrialObjective,
    count_trials,
    load_study,
    quiet_optuna,
    worker_seed,
)

RAN_ON_ATTR = "suite:ran_on"
"""Trial user attr: where its task ran (``host``, and ``ray_node``: the Ray node id)."""


@dataclass(frozen=True)
class TrialJob:
    """One trial's run, as a Ray task's argument."""

    number: int
    config: RunConfig
    tags: dict[str, str]
    report: str | None = None
    """The metric whose validation values come back (the pruned objective), or None."""

    @property
    def label(self) -> str:
        return f"trial {self.number}"


@dataclass(frozen=True)
class TrialRan:
    """What a trial's task sends back: its result, its validation reports, where it ran."""

    result: TaskResult
    reports: list[tuple[int, float]] = field(default_factory=list)
    where: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunTrial:
    """A trial's task body: the one run path, as a child of the study's parent run."""

    parent_run_id: str | None

    def __call__(self, job: TrialJob) -> TrialRan:
        from suite.runs.single import execute

        reports: list[tuple[int, float]] = []

        def on_validation(metrics: dict[str, float], step: int) -> None:
            if job.report in metrics:
                reports.append((step, float(metrics[job.report])))

        result = execute(
            job.config,
            parent_run_id=self.parent_run_id,
            extra_tags=job.tags,
            on_validation=on_validation if job.report else None,
        )
        return TrialRan(result, reports, node_of())


@dataclass
class _Running:
    trial: optuna.Trial
    config: RunConfig
    heartbeat: TrialHeartbeat


class RayTrials:
    """The driver's loop: keep the cluster's slots full of trials until the budget is met."""

    def __init__(self, session: StudySession, executor: RayExecutor, bar: Any = None) -> None:
        quiet_optuna()
        self.session = session
        self.spec = spec = session.spec
        self.executor = executor
        self.handler = StaleTrialHandler(session)
        self.storage = open_storage(session.storage_url, spec.heartbeat, self.handler)
        probe = optuna.load_study(study_name=spec.name, storage=self.storage)
        existing = len(probe.get_trials(deepcopy=False))
        self.study = load_study(spec, self.storage, worker_seed(spec.sampler.seed, existing, 0))
        self.objective = TrialObjective(session, self.study, 0, self.storage, bar)
        self.work = RunTrial(session.parent_run_id)
        self.running: dict[int, _Running] = {}
        self.failures_in_row = 0
        pruning = spec.pruning
        self.report = spec.objectives[0].metric if pruning is not None else None

    def _may_start(self) -> bool:
        deadline, n = self.session.deadline, self.spec.budget.n_trials
        if deadline is not None and time.time() >= deadline:
            return False
        finished, running = count_trials(self.study)
        return n is None or finished + running < n

    def run(self) -> int:
        """Run trials until the budget is met or the deadline passes; return how many ran."""
        if self.report is not None and not self.session.quiet:
            print(
                f"[{self.spec.name}] note: on Ray each trial runs to its end (pruning needs the "
                "study's storage, which stays on this machine); its validations are recorded",
                file=sys.stderr,
                flush=True,
            )
        ran = 0
        with self.executor.connect() as cluster:
            slots = cluster.slots(needs_of(self.spec.base))
            try:
                while True:
                    fail_stale_trials(
                        self.study, self.storage, self.spec.heartbeat.grace_period, self.handler
                    )
                    while len(self.running) < slots and self._may_start():
                        if not self._submit(cluster):
                            break
                    if not self.running:
                        if not self._may_start() and self._budget_or_deadline_reached():
                            break
                        time.sleep(self.session.poll_s)  # other sessions hold the budget
                        continue
                    job, outcome = cluster.next(catch=True)
                    self._tell(job, outcome)
                    ran += 1
            except BaseException:
                self._stop_running()  # their tasks are cancelled as the session ends
                raise
        return ran

    def _budget_or_deadline_reached(self) -> bool:
        deadline, n = self.session.deadline, self.spec.budget.n_trials
        if deadline is not None and time.time() >= deadline:
            return True
        finished, _ = count_trials(self.study)
        return n is not None and finished >= n

    def _submit(self, cluster: RaySession) -> bool:
        """Ask a trial and queue its task; False where it was not run (a surplus trial)."""
        trial = self.study.ask()
        try:
            config, tags = self.objective.start(trial)
        except SurplusTrial:
            trial.set_user_attr(SURPLUS_ATTR, True)
            self._after(self.study.tell(trial, state=TrialState.FAIL))
            return False
        except ConfigError:  # this trial's sampled config is invalid (recorded by start)
            self._after(self.study.tell(trial, state=TrialState.FAIL))
            return True
        job = TrialJob(trial.number, config, tags, self.report)
        cluster.submit(job, self.work, needs_of(config))
        study_id = self.storage.get_study_id_from_name(self.spec.name)
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        beat = TrialHeartbeat(self.storage, trial_id, self.spec.heartbeat.interval)
        self.running[trial.number] = _Running(trial, config, beat.__enter__())
        return True

    def _tell(self, job: TrialJob, outcome: Any) -> None:
        if isinstance(outcome, BaseException):
            self.objective.failed(self.running[job.number].trial, outcome)
            self._end(job.number, None, state=TrialState.FAIL)
            return
        running = self.running[job.number]
        trial = running.trial
        trial.set_user_attr(RAN_ON_ATTR, outcome.where)
        for step, value in outcome.reports:
            trial.report(value, step)
        try:
            values = self.objective.values(trial, running.config, outcome.result)
        except (ConfigError, SuiteError):
            self._end(job.number, None, state=TrialState.FAIL)
            if self.objective.fatal:
                raise SuiteError(self.objective.fatal) from None
            return
        self._end(job.number, values)

    def _end(
        self, number: int, values: float | list[float] | None, state: TrialState | None = None
    ) -> None:
        running = self.running.pop(number)
        running.heartbeat.__exit__(None, None, None)
        self._after(self.study.tell(running.trial, values, state=state))

    def _stop_running(self) -> None:
        """Fail the trials still running (the driver stops: an error, Ctrl-C), their MLflow
        runs ended KILLED, so none waits for a heartbeat grace period."""
        for number, running in list(self.running.items()):
            self.running.pop(number)
            running.heartbeat.__exit__(None, None, None)
            try:
                running.trial.set_user_attr(ERROR_ATTR, "stopped with the driver")
                self.study.tell(running.trial, state=TrialState.FAIL)
            except Exception as exc:  # the storage itself may be what failed
                print(f"[{self.spec.name}] trial {number}: {exc}", file=sys.stderr)
            self.objective.mark_run(number, "FAIL", end_status="KILLED")

    def _after(self, frozen: Any) -> None:
        """The one line per trial, and the stop after too many failures in a row."""
        self.objective.after_trial(self.study, frozen)
        if frozen.state == TrialState.FAIL and not self.objective.last_surplus:
            self.failures_in_row += 1
            if self.failures_in_row >= MAX_FAILURES_IN_ROW:
                raise SuiteError(
                    f"study {self.spec.name}: {self.failures_in_row} trials failed in a row on "
                    f"the Ray cluster; last error: {self.objective.last_error or 'see above'}"
                )
        elif frozen.state in FINISHED:
            self.failures_in_row = 0


def run_on_ray(session: StudySession, executor: RayExecutor, bar: Any = None) -> int:
    """Run ``session``'s trials as tasks on ``executor``'s cluster; return how many ran."""
    return RayTrials(session, executor, bar).run()
