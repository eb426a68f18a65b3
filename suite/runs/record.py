"""A tracked run's whole MLflow record, from its start (or resume) to its end.

::

    record = RunRecord.start(config, name, tags)       # or .resume(config, run_id), .off()
    with record:
        record.log_setup(params, config, data)          # params, config.yaml, dataset input
        ...                                             # record.log_metrics(...) as it trains
        record.log_text(...); record.log_plots(details)  # artifacts
    # the run is FINISHED

Leaving the block by an exception ends the run FAILED with the error as its
``suite.error`` tag (on a full SQLite store the status is written in place, with SQLite's
journal in memory: :func:`suite.tracking.end_in_place`); by SIGINT/SIGTERM/Ctrl-C
(``KeyboardInterrupt``) KILLED with ``suite.killed_by``, and the exception remembers the
run for :func:`~suite.runs.signals.interrupted_message`. The exception is re-raised either
way, so a run is never left RUNNING by this process. A record with tracking off does
nothing, so callers have no ``if tracking`` branches.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from suite.config import RunConfig
from suite.data.prepared import PreparedDataset
from suite.errors import DiskFullError, SuiteError
from suite.models.base import RecModel
from suite.runs.signals import interruption, note_killed_run
from suite.tracking import Tracker

ERROR_TAG = "suite.error"
MAX_ERROR_TAG = 5000
PLOTS_ARTIFACT_DIR = "plots"


def run_tags(config: RunConfig, fingerprint: str, env: dict[str, Any]) -> dict[str, str]:
    """The tags of a run of ``config`` on data ``fingerprint`` in environment ``env``."""
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


def plot_paths(details: dict[str, Any]) -> list[Path]:
    """The figures a task drew that exist on disk: ``details["plots"]`` (a list of paths)
    and ``details["plot"]`` (one path, the scaling task's)."""
    listed = details.get("plots") or []
    if isinstance(listed, (str, Path)):
        listed = [listed]
    single = details.get("plot")
    paths = [Path(p) for p in [*listed, *([single] if single else [])]]
    return [p for p in dict.fromkeys(paths) if p.is_file()]


def add_to_message(exc: BaseException, note: str) -> None:
    """Append ``note`` to a one-line :class:`SuiteError`'s message (its type kept for
    callers); other exceptions get it as a traceback note."""
    if isinstance(exc, SuiteError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        exc.args = (f"{exc.args[0]}; {note}",)
    else:
        exc.add_note(note)


class RunRecord:
    """One run's MLflow record, a context manager that ends the run (see the module).

    ``what``: the run's kind in the ``suite.killed_by`` reason (``"SIGTERM during the
    run"``). ``resumable``: whether a killed run can be resumed (it holds a checkpoint),
    asked when it is killed; ``None`` for a run ``suite resume`` does not take.
    ``error_tag``: a failure writes ``suite.error`` and says on the exception when the
    status could not be written (off for a multi-seed parent: the failing seed's own run
    says it).
    """

    def __init__(
        self,
        tracker: Tracker | None,
        resumed: bool = False,
        what: str = "run",
        resumable: Callable[[], bool] | None = None,
        error_tag: bool = True,
    ) -> None:
        self.tracker = tracker
        self.resumed = resumed
        self.what = what
        self.resumable = resumable
        self.error_tag = error_tag
        self.finished = False

    @classmethod
    def off(cls) -> RunRecord:
        """The record of a run with tracking off (or a rank that does not record)."""
        return cls(None)

    @classmethod
    def start(
        cls,
        config: RunConfig,
        name: str | None,
        tags: dict[str, str],
        parent_run_id: str | None = None,
        **options: Any,
    ) -> RunRecord:
        """A new run in ``config``'s store and experiment (``options``: see the class)."""
        tracking = config.tracking
        tracker = Tracker.start(tracking.uri, tracking.experiment, name, tags, parent_run_id)
        return cls(tracker, **options)

    @classmethod
    def resume(cls, config: RunConfig, run_id: str, **options: Any) -> RunRecord:
        """Run ``run_id`` reopened (RUNNING again, owned by this process): a resumed run,
        whose params, config and dataset input are already recorded."""
        return cls(Tracker.resume(config.tracking.uri, run_id), resumed=True, **options)

    @property
    def run_id(self) -> str | None:
        return self.tracker.run_id if self.tracker else None

    @property
    def uri(self) -> str | None:
        return self.tracker.uri if self.tracker else None

    def __bool__(self) -> bool:
        """Whether the run is tracked."""
        return self.tracker is not None

    # -- what the run records

    def log_setup(self, params: dict[str, str], config: RunConfig, data: PreparedDataset) -> None:
        """The run's params, its config as ``config.yaml`` and the prepared data as its
        dataset input (its fingerprint as digest); nothing for a resumed run, which has them."""
        if not self.tracker or self.resumed:
            return
        self.tracker.log_params(params)
        self.tracker.log_text(config.to_yaml(), "config.yaml")
        self.tracker.log_dataset(
            name=f"{config.dataset.name}/{config.dataset.protocol}",
            digest=data.fingerprint,
            source=str(data.path) if data.path else config.dataset.name,
            context="training",
            rows=data.manifest.get("rows", {}),
            fingerprint=data.fingerprint,
        )

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        if self.tracker:
            self.tracker.log_metrics(metrics, step)

    def set_tags(self, tags: dict[str, Any]) -> None:
        if self.tracker:
            self.tracker.set_tags(tags)

    def log_text(self, text: str, artifact_file: str) -> None:
        if self.tracker:
            self.tracker.log_text(text, artifact_file)

    def log_json(self, data: Any, artifact_file: str) -> None:
        """``data`` as indented JSON with sorted keys."""
        self.log_text(json.dumps(data, indent=2, sort_keys=True), artifact_file)

    def log_artifact(self, path: str | Path, what: str, artifact_dir: str | None = None) -> None:
        if self.tracker:
            self.tracker.log_artifact(path, artifact_dir, what)

    def log_plots(self, details: dict[str, Any]) -> None:
        """The figures the task drew (:func:`plot_paths`), under ``plots/``."""
        for path in plot_paths(details):
            self.log_artifact(path, f"log its plot {path.name}", PLOTS_ARTIFACT_DIR)

    def log_model(self, config: RunConfig, model: RecModel, step: int) -> None:
        """The trained model as the run's logged model, as ``tracking.log_model`` says."""
        if self.tracker:
            from suite.runs.model_log import log_model

            log_model(self.tracker, config, model, step)

    # -- its end

    def finish(self) -> None:
        """End the run FINISHED (its pending metrics sent); leaving the block does it too."""
        if self.tracker:
            self.tracker.finish()
        self.finished = True

    def __enter__(self) -> RunRecord:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            if not self.finished:
                try:
                    self.finish()
                except BaseException as failed:
                    self.end(failed)
                    raise
            return
        self.end(exc)

    def end(self, exc: BaseException) -> None:
        """End the run for ``exc``: KILLED for an interruption, else FAILED."""
        if not self.tracker:
            return
        signal_name = interruption(exc)
        if signal_name:
            with contextlib.suppress(SuiteError):  # the store may be what failed
                resumable = self.resumable() if self.resumable else None
                note_killed_run(exc, self.tracker.run_id, self.tracker.uri, resumable)
                self.tracker.kill(f"{signal_name} during the {self.what}")
        elif self.error_tag:
            self._end_failed(exc)
        else:
            with contextlib.suppress(SuiteError):
                self.tracker.fail()

    def _end_failed(self, exc: BaseException) -> None:
        """End the run FAILED with its error as a tag (on a full SQLite store, in place).
        If the store still cannot record it, the run stays RUNNING and ``exc``'s message
        says so."""
        assert self.tracker is not None
        with contextlib.suppress(SuiteError):  # a full store may still take the status
            self.tracker.set_tags({ERROR_TAG: str(exc)[:MAX_ERROR_TAG] or type(exc).__name__})
        try:
            self.tracker.fail()
        except SuiteError as failed:
            reason = "its store is full" if isinstance(failed, DiskFullError) else str(failed)
            add_to_message(
                exc,
                f"MLflow run {self.tracker.run_id} could not be marked FAILED ({reason}) and "
                "stays RUNNING until `suite runs clean` marks it KILLED",
            )
