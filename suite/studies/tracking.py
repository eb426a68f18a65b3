"""The study's MLflow runs: one parent run per study, a child run per trial.

The parent is tagged ``suite.study_parent=<name>`` (how to find studies in the
experiment) and its run id is stored in the Optuna study's user attrs, so every worker
and every later session of the same study, on any machine sharing its tracking store, uses
the same parent. It is created by the process that created the Optuna study
(``create_study`` is atomic in every storage) before any worker starts, so workers never
race to create it. A study resumed where its parent is not in the tracking store (its
storage committed and resumed on a fresh clone, without the machine's MLflow store)
gets a new parent there, tagged with the one it continues, every earlier parent kept in
the study's user attrs (:data:`EARLIER_PARENTS_ATTR`), and says so on stderr. Children
are ordinary runs made by :func:`suite.runs.single.execute` with
the parent-run tag and the tags ``suite.study`` and ``suite.trial``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from suite.tracking import PARENT_RUN_TAG, RunStore, Tracker, resolve_tracking_uri

PARENT_TAG = "suite.study_parent"
STUDY_TAG = "suite.study"
TRIAL_TAG = "suite.trial"
TRIAL_STATE_TAG = "suite.trial_state"
PARENT_ATTR = "suite:mlflow_parent_run_id"
EARLIER_PARENTS_ATTR = "suite:mlflow_earlier_parent_runs"
CONTINUES_TAG = "suite.study_continues_parent"
PARENT_WAIT_S = 30.0


def create_parent_run(
    uri: str | None, experiment: str, study_name: str, tags: dict[str, str]
) -> str:
    tracker = Tracker.start(
        uri, experiment, f"study-{study_name}", {PARENT_TAG: study_name, **tags}
    )
    return tracker.run_id


def ensure_parent_run(
    study: Any, created: bool, uri: str | None, experiment: str, tags: dict[str, str]
) -> str:
    """The study's parent run id: created (and stored in the study) by the process that
    created the study; others wait for it (``PARENT_WAIT_S``), then create it themselves
    (the creator died between the two steps)."""
    run_id = study.user_attrs.get(PARENT_ATTR)
    if run_id is None and not created:
        deadline = time.monotonic() + PARENT_WAIT_S
        while run_id is None and time.monotonic() < deadline:
            time.sleep(0.5)
            run_id = study.user_attrs.get(PARENT_ATTR)
    if run_id is None:
        run_id = create_parent_run(uri, experiment, study.study_name, tags)
        study.set_user_attr(PARENT_ATTR, run_id)
        return run_id
    store = RunStore(uri)
    try:
        run = store.run(run_id)
    except Exception:
        return _continue_parent(study, run_id, uri, experiment, tags)
    if run.info.status != "RUNNING":
        store.reopen(run_id)
    return run_id


def _continue_parent(
    study: Any, earlier: str, uri: str | None, experiment: str, tags: dict[str, str]
) -> str:
    """A new parent run in this tracking store for a study whose parent ``earlier`` is in
    another (the storage travelled without it): tagged with ``earlier``, recorded as the
    study's parent with ``earlier`` appended to :data:`EARLIER_PARENTS_ATTR`."""
    finished = sum(t.state.is_finished() for t in study.get_trials(deepcopy=False))
    run_id = create_parent_run(uri, experiment, study.study_name, {**tags, CONTINUES_TAG: earlier})
    study.set_user_attr(
        EARLIER_PARENTS_ATTR, [*study.user_attrs.get(EARLIER_PARENTS_ATTR, []), earlier]
    )
    study.set_user_attr(PARENT_ATTR, run_id)
    print(
        f"study {study.study_name!r}: its MLflow parent run {earlier} is not in the tracking "
        f"store {resolve_tracking_uri(uri)} (the storage came from another machine, or "
        f"another --tracking-uri); its {finished} finished trials stay in the Optuna storage "
        f"and the trials from here log under a new parent run {run_id}",
        file=sys.stderr,
        flush=True,
    )
    return run_id


def trial_runs(store: RunStore, parent_run_id: str, study_name: str, number: int) -> list[Any]:
    """The child runs of one trial (normally one)."""
    query = (
        f"tags.`{STUDY_TAG}` = '{study_name}' AND tags.`{TRIAL_TAG}` = '{number}' "
        f"AND tags.`{PARENT_RUN_TAG}` = '{parent_run_id}'"
    )
    return store.find([store.experiment_of(parent_run_id)], query)


def mark_trial_runs(
    uri: str | None,
    parent_run_id: str | None,
    study_name: str,
    number: int,
    state: str,
    end_status: str | None = None,
) -> None:
    """Tag a trial's child runs with its Optuna state (``suite.trial_state``) and, with
    ``end_status``, end those not FINISHED with it: a pruned trial's run (which the runner
    ended FAILED) and a dead worker's run (left RUNNING) become KILLED."""
    if parent_run_id is None:
        return
    store = RunStore(uri)
    for run in trial_runs(store, parent_run_id, study_name, number):
        store.set_tag(run.info.run_id, TRIAL_STATE_TAG, state)
        if end_status and run.info.status != "FINISHED":
            store.end(run.info.run_id, end_status)


def log_summary(
    uri: str | None,
    parent_run_id: str,
    files: list[Path],
    metrics: dict[str, float],
    tags: dict[str, str],
    finished: bool,
) -> None:
    """Attach the summary files, figures and tags to the parent run."""
    tracker = Tracker.of(uri, parent_run_id)
    for path in files:
        tracker.log_artifact(path)
    if metrics:
        tracker.log_metrics(metrics)
    if tags:
        tracker.set_tags(tags)
    if finished:
        tracker.finish()
