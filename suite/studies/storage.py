"""Where a study's trials live, and dead-worker detection for every kind of storage.

- one worker: a local SQLite file, ``results/studies/<name>/optuna.db``;
- ``--workers N`` on one machine: Optuna's ``JournalStorage`` over a
  ``JournalFileBackend`` (``results/studies/<name>/optuna.journal``): an append-only
  file with a lock, safe for processes on one machine (SQLite is not);
- workers on many machines: a database URL (``postgresql+psycopg2://...``) given with
  ``--storage``, which every machine passes.

``--storage`` takes an SQLAlchemy URL (``sqlite:///...``, ``postgresql+psycopg2://...``,
``mysql+pymysql://...``) or ``journal:PATH`` for a journal file.

Heartbeats (a dead worker's trial must not stay RUNNING for ever): on an ``RDBStorage``
(SQLite, PostgreSQL, MySQL) Optuna's own heartbeat runs (``heartbeat_interval``,
``grace_period``) and its public ``fail_stale_trials`` marks stale trials FAIL and hands
them to ``heartbeat_stale_trial_callback``. Optuna has no heartbeat for
``JournalStorage``, so for a journal :class:`TrialHeartbeat` writes the time into the
running trial's system attrs every ``interval`` seconds, and :func:`fail_stale_trials`
fails trials whose last beat is older than ``grace_period``, through the storage's public
methods only. Either way the callback (here one wrapping Optuna's
``RetryHeartbeatStaleTrialCallback``) re-queues the trial's params as a WAITING trial.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from suite.errors import ConfigError
from suite.studies.spec import HeartbeatSpec

JOURNAL_PREFIX = "journal:"
HEARTBEAT_ATTR = "suite:heartbeat"
StaleCallback = Callable[[optuna.Study, FrozenTrial], None]


def default_storage_url(out_dir: Path, workers: int) -> str:
    """SQLite for one worker, a journal file for several; an existing store of the other
    kind is reused, so re-running a study with another ``--workers`` resumes it."""
    sqlite_path, journal_path = out_dir / "optuna.db", out_dir / "optuna.journal"
    journal_url, sqlite_url = f"{JOURNAL_PREFIX}{journal_path}", f"sqlite:///{sqlite_path}"
    if journal_path.exists():
        return journal_url
    if sqlite_path.exists():
        if workers > 1:
            raise ConfigError(
                f"this study is stored in SQLite ({sqlite_path}), which is not safe for "
                f"{workers} worker processes; resume it with --workers 1, or pass --storage"
            )
        return sqlite_url
    return journal_url if workers > 1 else sqlite_url


def check_storage_for_workers(url: str, workers: int) -> None:
    if workers > 1 and url.startswith("sqlite"):
        raise ConfigError(
            f"--storage {url}: SQLite is not safe for {workers} worker processes; use "
            "journal:PATH on one machine or a PostgreSQL URL"
        )


def describe(url: str) -> str:
    """The URL without a password, for messages and tags."""
    if "://" in url and "@" in url.split("://", 1)[1]:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}@{host}"
    return url


class TrialHeartbeat:
    """``with TrialHeartbeat(storage, trial_id, interval):`` records the time in the trial's
    system attrs every ``interval`` seconds from a thread, until the block ends. Used where
    the storage has no heartbeat of its own (``JournalStorage``), and by a driver whose
    trials run elsewhere (Ray tasks), where on an ``RDBStorage`` it records Optuna's own
    heartbeat instead."""

    def __init__(self, storage: Any, trial_id: int, interval: float) -> None:
        self.storage, self.trial_id, self.interval = storage, trial_id, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="trial-heartbeat", daemon=True)

    def _beat(self) -> None:
        while True:
            try:
                if has_builtin_heartbeat(self.storage):
                    self.storage.record_heartbeat(self.trial_id)
                else:
                    self.storage.set_trial_system_attr(self.trial_id, HEARTBEAT_ATTR, time.time())
            except optuna.exceptions.UpdateFinishedTrialError:
                return  # failed as stale meanwhile (this process was frozen too long)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> TrialHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def has_builtin_heartbeat(storage: Any) -> bool:
    """Whether Optuna itself keeps heartbeats on ``storage`` (``RDBStorage`` does)."""
    return isinstance(storage, RDBStorage)


def fail_stale_trials(
    study: optuna.Study, storage: Any, grace_period: float, callback: StaleCallback | None
) -> list[int]:
    """Mark FAIL the RUNNING trials whose heartbeat is older than ``grace_period`` seconds
    (or, without any beat yet, whose start is) and pass each to ``callback``; return their
    numbers. On an ``RDBStorage`` this is Optuna's own ``fail_stale_trials``."""
    if has_builtin_heartbeat(storage):
        before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        after = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
        return sorted(t.number for t in after if t.number not in before)
    now = time.time()
    study_id = storage.get_study_id_from_name(study.study_name)
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        beat = trial.system_attrs.get(HEARTBEAT_ATTR)
        if beat is None:
            beat = trial.datetime_start.timestamp() if trial.datetime_start else now
        if now - float(beat) <= grace_period:
            continue
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        try:
            if not storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another worker failed it first, and re-queued it
        failed.append(trial.number)
        if callback is not None:
            callback(study, storage.get_trial(trial_id))
    return failed


def open_storage(
    url: str, heartbeat: HeartbeatSpec, stale_callback: StaleCallback | None = None
) -> Any:
    """An Optuna storage for ``url``. An ``RDBStorage`` gets Optuna's heartbeat and
    ``stale_callback``; on a journal the worker keeps heartbeats itself
    (:class:`TrialHeartbeat`, :func:`fail_stale_trials`)."""
    if url.startswith(JOURNAL_PREFIX):
        path = Path(url.removeprefix(JOURNAL_PREFIX)).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    if "://" not in url:
        raise ConfigError(
            f"--storage {url!r}: expected a database URL (sqlite:///FILE, postgresql+psycopg2://...) "
            f"or {JOURNAL_PREFIX}PATH"
        )
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 60}}
    else:
        engine_kwargs = {"pool_pre_ping": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            return RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat.interval,
                grace_period=heartbeat.grace_period,
                heartbeat_stale_trial_callback=stale_callback,
            )
        except ImportError as exc:
            raise ConfigError(
                f"--storage {describe(url)}: {exc} (for PostgreSQL: pip install psycopg2-binary)"
            ) from None
        except Exception as exc:  # unreachable server, bad credentials, bad URL
            raise ConfigError(f"cannot open study storage {describe(url)}: {exc}") from None
