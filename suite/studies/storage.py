"""Where a study's trials live, and dead-worker detection for every kind of storage.

- one worker: a local SQLite file, ``results/studies/<name>/optuna.db``;
- ``--workers N`` on one machine: Optuna's ``JournalStorage`` over a
  ``JournalFileBackend`` (``results/studies/<name>/optuna.journal``): an append-only
  file with a lock, safe for processes on one machine (SQLite is not);
- workers on many machines: a database URL (``postgresql+psycopg2://...``) given with
  ``--storage``, which every machine passes.

``--storage`` takes an SQLAlchemy URL (``sqlite:///...``, ``postgresql+psycopg2://...``,
``mysql+pymysql://...``) or ``journal:PATH`` for a journal file.

Heartbeats: Optuna's ``RDBStorage`` records a heartbeat per running trial
(``heartbeat_interval``); at the start of each trial (and while a worker waits) trials
whose heartbeat is older than ``grace_period`` are marked FAIL and handed to
``heartbeat_stale_trial_callback`` (Optuna 5's name; ``failed_trial_callback`` is its
deprecated alias), here :class:`optuna.storages.RetryHeartbeatStaleTrialCallback`, which
re-queues the same params as a WAITING trial. Optuna 5's ``JournalStorage`` has no
heartbeat, so :class:`HeartbeatJournalStorage` adds one (the heartbeat is a trial system
attr) through the same Optuna interface, and the same machinery runs on both.
"""

from __future__ import annotations

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

try:  # the interface Optuna's optimize loop checks for heartbeats (not exported)
    from optuna.storages._heartbeat import BaseHeartbeat
except ImportError:  # pragma: no cover - a future Optuna without it
    BaseHeartbeat = None  # type: ignore[assignment,misc]

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


class _HeartbeatMixin:
    """Heartbeats stored as a trial system attr: enough for any storage Optuna can read."""

    heartbeat_interval: int
    grace_period: int
    stale_callback: StaleCallback | None

    def record_heartbeat(self, trial_id: int) -> None:
        self.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())  # type: ignore[attr-defined]

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = time.time()
        stale = []
        trials = self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))  # type: ignore[attr-defined]
        for trial in trials:
            beat = trial.system_attrs.get(HEARTBEAT_ATTR)
            if beat is None:
                beat = trial.datetime_start.timestamp() if trial.datetime_start else now
            if now - float(beat) > self.grace_period:
                stale.append(trial._trial_id)
        return stale

    def get_heartbeat_interval(self) -> int | None:
        return self.heartbeat_interval

    def get_heartbeat_stale_trial_callback(self) -> StaleCallback | None:
        return self.stale_callback


if BaseHeartbeat is not None:

    class HeartbeatJournalStorage(_HeartbeatMixin, JournalStorage, BaseHeartbeat):
        """``JournalStorage`` with Optuna's heartbeat interface (which Optuna 5 only
        implements for ``RDBStorage``)."""

        def __init__(
            self,
            backend: Any,
            heartbeat_interval: int,
            grace_period: int,
            stale_callback: StaleCallback | None,
        ) -> None:
            super().__init__(backend)
            self.heartbeat_interval = heartbeat_interval
            self.grace_period = grace_period
            self.stale_callback = stale_callback


def open_storage(
    url: str, heartbeat: HeartbeatSpec, stale_callback: StaleCallback | None = None
) -> Any:
    """An Optuna storage for ``url`` with heartbeats and stale-trial re-queueing."""
    if url.startswith(JOURNAL_PREFIX):
        path = Path(url.removeprefix(JOURNAL_PREFIX)).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        backend = JournalFileBackend(str(path))
        if BaseHeartbeat is None:  # pragma: no cover
            warnings.warn(
                "this Optuna has no heartbeat interface: dead workers' trials stay RUNNING",
                stacklevel=2,
            )
            return JournalStorage(backend)
        return HeartbeatJournalStorage(
            backend, heartbeat.interval, heartbeat.grace_period, stale_callback
        )
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
