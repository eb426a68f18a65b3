"""MLflow tracking: one MLflow run per suite run, through MLflow's client.

The store is ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else an embedded SQLite
database at ``./mlruns/mlflow.db`` with artifacts under ``./mlruns/artifacts``.

A new SQLite store is built under a temporary name and renamed into place, while an
exclusive ``fcntl`` lock beside it is held, so two first runs at once, or a first run
killed during MLflow's schema migration, never leave a half-migrated database. Every
run is tagged with the host and process that own it (``suite.host``, ``suite.pid``,
``suite.pid_start``) and carries a heartbeat (``suite.heartbeat``, the owner's clock in
Unix seconds, rewritten every ``$RECSUITE_HEARTBEAT_S``, 60 s, by a thread of the owning
process). A RUNNING run is marked KILLED by the next command that opens the store (a
run's start or resume, ``suite resume``, a study, a reproduction) or by ``suite runs
clean``: on the owner's host once its process is gone, on any other host once its
heartbeat is older than ``$RECSUITE_STALE_AFTER_S`` (900 s; the hosts' clocks must agree
to well within it). Every failure of the store is one :class:`~suite.errors.SuiteError`
line naming the store.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from suite.errors import DiskFullError, SuiteError
from suite.fileio import disk_full_error, exception_chain, free_bytes, is_disk_full

# MLflow's limits: at most 100 params and 1000 metrics per batch call, 6000 characters per
# param value and 250 per key.
MAX_PARAMS_PER_CALL = 100
MAX_METRICS_PER_CALL = 1000
FLUSH_EVERY_S = 5.0
"""Logged metrics reach the store at most this many seconds late (or at the run's end)."""
MAX_PARAM_VALUE = 6000
MAX_KEY = 250
DEFAULT_DIR = Path("mlruns")
HOST_TAG = "suite.host"
PID_TAG = "suite.pid"
PID_START_TAG = "suite.pid_start"
KILLED_BY_TAG = "suite.killed_by"
HEARTBEAT_TAG = "suite.heartbeat"
HEARTBEAT_ENV = "RECSUITE_HEARTBEAT_S"
HEARTBEAT_EVERY_S = 60.0
"""How often a run's owner rewrites its heartbeat (``$RECSUITE_HEARTBEAT_S`` overrides)."""
STALE_AFTER_ENV = "RECSUITE_STALE_AFTER_S"
STALE_AFTER_S = 900.0
"""A RUNNING run of another host whose heartbeat is older than this is dead
(``$RECSUITE_STALE_AFTER_S`` or ``suite runs clean --stale-after`` overrides)."""
# MLflow 3's UI sorts runs of an experiment without this tag under GenAI "Evaluation runs"
# when it guesses the experiment is a GenAI one; a classic training experiment says so.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
PARENT_RUN_TAG = "mlflow.parentRunId"
"""The tag naming a child run's parent (MLflow's UI nests the child under it)."""
URI_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite:///./mlruns/mlflow.db)"
"""The ``--tracking-uri`` option's help, one text for every command that takes it."""

T = TypeVar("T")


def default_tracking_uri() -> str:
    return f"sqlite:///{(DEFAULT_DIR / 'mlflow.db').resolve()}"


def resolve_tracking_uri(uri: str | None) -> str:
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, else ``None``."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def end_in_place(uri: str, run_id: str, status: str) -> bool:
    """Set a run's status and end time directly in a SQLite store, its rollback journal
    kept in memory: an update of a row in place needs no new disk space, so it succeeds
    where MLflow's write (which journals to a file beside the store) fails on a full
    disk. Returns whether the run was updated; ``False`` for other stores or any error."""
    import sqlite3

    path = sqlite_path(uri)
    if path is None or not path.is_file():
        return False
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
            db.execute("PRAGMA journal_mode=MEMORY")
            cursor = db.execute(
                "UPDATE runs SET status = ?, end_time = ? WHERE run_uuid = ?",
                (status, int(time.time() * 1000), run_id),
            )
            db.commit()
            return cursor.rowcount == 1
    except sqlite3.Error:
        return False


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """Nested mappings -> ``{"a.b.c": "value"}`` with values as short strings."""
    out: dict[str, str] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
    else:
        text = json.dumps(data) if isinstance(data, list | tuple) else str(data)
        key = prefix.rstrip(".")[:MAX_KEY]
        out[key] = text if len(text) <= MAX_PARAM_VALUE else text[: MAX_PARAM_VALUE - 3] + "..."
    return out


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _store_call(uri: str, what: str, call: Callable[[], T]) -> T:
    """``call()``, with any failure of the store turned into one ``SuiteError`` line (a
    full disk: a :class:`~suite.errors.DiskFullError` naming the file and free space)."""
    try:
        with _quiet(STORE_ERROR_LOGGER):  # it logs each failure with its traceback
            return call()
    except SuiteError:
        raise
    except Exception as exc:
        if is_disk_full(exc):
            place = _full_place(uri, exc)
            full = (
                disk_full_error(place, _store_needed(place), "--tracking-uri", at_least=True)
                if place is not None
                else "disk full: free space or point --tracking-uri elsewhere"
            )
            raise DiskFullError(f"MLflow tracking store {uri}: cannot {what}: {full}") from None
        raise SuiteError(f"MLflow tracking store {uri}: cannot {what}: {_one_line(exc)}") from None


STORE_ERROR_LOGGER = "mlflow.store.db.utils"
"""MLflow's logger that prints a store failure's chained tracebacks before raising it."""


@contextlib.contextmanager
def _quiet(name: str, below: int = logging.CRITICAL) -> Iterator[None]:
    """Drop ``name``'s log records below ``below`` (CRITICAL) for the block."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(below)
    try:
        yield
    finally:
        logger.setLevel(level)


def _store_needed(place: Path) -> int:
    """A lower bound of the space a refused store write needed: more than the free space,
    and for SQLite at least two pages (the rollback journal's copy of a changed page and
    the page itself; the page size is read from the database header)."""
    page = 4096
    with contextlib.suppress(OSError, ValueError):
        with open(place, "rb") as handle:
            header = handle.read(18)
        if header.startswith(b"SQLite format 3\0"):
            size = int.from_bytes(header[16:18], "big")
            page = 65536 if size == 1 else size or page
    return max(2 * page, free_bytes(place) or 0)


def _full_place(uri: str, exc: BaseException) -> Path | None:
    """The file a full disk refused (an artifact's, from the ``OSError``), else the
    SQLite database, else ``None`` (a remote store)."""
    failed = [e for e in exception_chain(exc) if isinstance(e, OSError) and e.filename]
    if failed:
        return Path(str(failed[0].filename))
    return sqlite_path(uri)


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """An exclusive lock on a SQLite store (``<db>.lock``); a no-op for other stores.

    The kernel drops the lock when its holder dies, so a killed run never leaves it taken;
    the holder removes the file before releasing it, so none is left behind (a waiter
    that then finds its file unlinked takes the lock again on the new one).
    """
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            now = os.stat(lock)
        except FileNotFoundError:  # removed by the holder we waited for
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
            break
        os.close(fd)  # a lock on a file its holder removed: take the new one's
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)  # closing the descriptor releases the lock


def _initialise_sqlite(path: Path) -> None:
    """Build a fresh store's schema under a temporary name, then rename it into place
    (call with :func:`store_lock` held). Any failure (a full disk, Ctrl-C) removes the
    temporary file and its journal; only a killed process leaves them, and the next
    build removes those."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    for stale in path.parent.glob(f".{path.name}.init-*"):  # with SQLite's -journal
        stale.unlink(missing_ok=True)  # left by a run killed while building its store
    tmp = path.with_name(f".{path.name}.init-{os.getpid()}")
    chatty = [logging.getLogger(name) for name in ("mlflow.store.db.utils", "alembic")]
    levels = [logger.level for logger in chatty]
    for logger in chatty:
        logger.setLevel(logging.WARNING)  # "Creating initial MLflow database tables..."
    uri = f"sqlite:///{tmp}"
    try:
        store = SqlAlchemyStore(uri, (path.parent / "artifacts").resolve().as_uri())
        store.engine.dispose()
        os.replace(tmp, path)
    except BaseException:
        # MLflow keeps an engine per URI: one left open on the removed file would fail
        # this process's next build of the store ("disk I/O error")
        engine = getattr(SqlAlchemyStore, "_engine_map", {}).pop(uri, None)
        if engine is not None:
            engine.dispose()
        for suffix in ("", "-journal", "-wal", "-shm"):
            tmp.with_name(tmp.name + suffix).unlink(missing_ok=True)
        raise
    finally:
        for logger, level in zip(chatty, levels, strict=True):
            logger.setLevel(level)


def client_for(uri: str | None) -> Any:
    """An ``MlflowClient`` on the resolved store as it is (nothing created or checked):
    for reading runs, and for runs another process started."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=resolve_tracking_uri(uri))


class RunStore:
    """Runs already in a store, another process's or an earlier session's: read them, find
    a parent's children, fetch an artifact, re-tag, reopen or end them. With the run record
    (:mod:`suite.runs.record`) the only way the suite asks MLflow about runs."""

    def __init__(self, uri: str | None) -> None:
        self.uri = resolve_tracking_uri(uri)
        self.client = client_for(self.uri)
        path = sqlite_path(self.uri)
        if path is None or path.is_file():  # reading must not create a SQLite store
            close_dead_runs(self.client, self.uri)

    def run(self, run_id: str) -> Any:
        """The MLflow ``Run`` (``info``, ``data.tags``); raises MLflow's error if absent."""
        return self.client.get_run(run_id)

    def experiment_of(self, run_id: str) -> str:
        return str(self.run(run_id).info.experiment_id)

    def find(self, experiment_ids: list[str], query: str, max_results: int = 1000) -> list[Any]:
        """The runs of ``experiment_ids`` matching an MLflow filter string."""
        found = self.client.search_runs(
            experiment_ids, filter_string=query, max_results=max_results
        )
        return list(found)

    def download(self, run_id: str, artifact: str, into: str | Path) -> Path:
        """One artifact of ``run_id`` copied under the folder ``into``; its local path."""
        return Path(self.client.download_artifacts(run_id, artifact, str(into)))

    def list_artifacts(self, run_id: str) -> list[Any]:
        return list(self.client.list_artifacts(run_id))

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.client.set_tag(run_id, key, value)

    def end(self, run_id: str, status: str) -> None:
        """End ``run_id`` with ``status`` (``KILLED``, ``FAILED``, ``FINISHED``)."""
        self.client.set_terminated(run_id, status=status)

    def reopen(self, run_id: str) -> None:
        """Mark an ended run RUNNING again (a study's parent resumed in a later session)."""
        self.client.update_run(run_id, status="RUNNING")

    def clean_dead_runs(self, experiment_ids: list[str] | None = None) -> list[Any]:
        """:func:`clean_dead_runs` on this store."""
        return clean_dead_runs(self.client, self.uri, experiment_ids)


def open_client(uri: str | None) -> tuple[Any, str]:
    """An ``MlflowClient`` on the resolved store, the store created safely if new.
    Returns ``(client, resolved_uri)``; any failure is one ``SuiteError`` line."""
    resolved = resolve_tracking_uri(uri)
    path = sqlite_path(resolved)

    def make() -> Any:
        from mlflow.tracking import MlflowClient

        if path is not None and not path.exists():
            with store_lock(resolved):
                if not path.exists():
                    _initialise_sqlite(path)
        client = MlflowClient(tracking_uri=resolved)
        client.search_experiments(max_results=1)  # opens (and checks) the store now
        return client

    return _store_call(resolved, "open it", make), resolved


def close_dead_runs(client: Any, uri: str) -> list[Any]:
    """:func:`clean_dead_runs` over the whole store, as every command that opens it does
    (a run's start or resume, :class:`RunStore`): a SIGKILLed run, which could not end
    itself, is KILLED by the next command on its store and host; a store
    that cannot be searched or written (read-only, say) is left as it is."""
    try:
        return clean_dead_runs(client, uri)
    except SuiteError:
        return []


def process_start(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot (Linux), else ``""``:
    with the pid it names one process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def process_alive(pid: int, start: str) -> bool:
    """Whether process ``pid`` (started at ``start``, if known) still runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    return not start or process_start(pid) in ("", start)


def owner_tags() -> dict[str, str]:
    """The tags naming the host and process that own a run, and its first heartbeat."""
    pid = os.getpid()
    return {
        HOST_TAG: socket.gethostname(),
        PID_TAG: str(pid),
        PID_START_TAG: process_start(pid),
        HEARTBEAT_TAG: f"{time.time():.3f}",
    }


def seconds_from_env(name: str, default: float) -> float:
    """The positive number of seconds in ``$name``, else ``default``; anything else in it is
    one :class:`~suite.errors.SuiteError` line naming the variable."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise SuiteError(f"${name}: expected a positive number of seconds, got {text!r}")
    return value


class Heartbeat:
    """A daemon thread that rewrites ``run_id``'s :data:`HEARTBEAT_TAG` every ``every``
    seconds until :meth:`stop` (or :func:`stop_heartbeat` on the run, from any
    :class:`Tracker` of this process). A write that fails is skipped: the next one
    tries again, and a run whose heartbeats all fail is found stale, as a dead one."""

    live: dict[str, Heartbeat] = {}  # by run id, in this process
    _lock = threading.Lock()

    def __init__(self, client: Any, run_id: str, every: float) -> None:
        self.client = client
        self.run_id = run_id
        self.every = every
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"suite-heartbeat-{run_id[:8]}", daemon=True
        )

    @classmethod
    def start(cls, client: Any, run_id: str) -> Heartbeat:
        beat = cls(client, run_id, seconds_from_env(HEARTBEAT_ENV, HEARTBEAT_EVERY_S))
        with cls._lock:
            old = cls.live.pop(run_id, None)
            cls.live[run_id] = beat
        if old is not None:
            old.stop()
        beat._thread.start()
        return beat

    def _loop(self) -> None:
        while not self._stopped.wait(self.every):
            try:
                with _quiet(STORE_ERROR_LOGGER):
                    self.client.set_tag(self.run_id, HEARTBEAT_TAG, f"{time.time():.3f}")
            except Exception:  # a missed beat: see the class docstring
                continue

    def stop(self) -> None:
        self._stopped.set()
        with Heartbeat._lock:
            if Heartbeat.live.get(self.run_id) is self:
                del Heartbeat.live[self.run_id]
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


def stop_heartbeat(run_id: str) -> None:
    """Stop this process's heartbeat of ``run_id``, if it keeps one (the run ended)."""
    beat = Heartbeat.live.get(run_id)
    if beat is not None:
        beat.stop()


def clean_dead_runs(
    client: Any,
    uri: str,
    experiment_ids: list[str] | None = None,
    stale_after: float | None = None,
) -> list[Any]:
    """Mark KILLED every RUNNING run of this host whose process is gone, and every RUNNING
    run of another host whose heartbeat is older than ``stale_after`` seconds (default
    ``$RECSUITE_STALE_AFTER_S``, else :data:`STALE_AFTER_S`; a run without a heartbeat
    predates it and is left alone). Returns them."""
    host = socket.gethostname()
    stale_after = stale_after or seconds_from_env(STALE_AFTER_ENV, STALE_AFTER_S)

    def find() -> list[Any]:
        ids = experiment_ids or [e.experiment_id for e in client.search_experiments()]
        if not ids:
            return []
        query = "attributes.status = 'RUNNING'"
        return list(client.search_runs(ids, filter_string=query, max_results=50000))

    dead = []
    for run in _store_call(uri, "search its runs", find):
        reason = death_of(run.data.tags, host, stale_after, time.time())
        if reason is None:
            continue

        def mark(run_id: str = run.info.run_id, reason: str = reason) -> None:
            client.set_tag(run_id, KILLED_BY_TAG, reason)
            client.set_terminated(run_id, status="KILLED")

        _store_call(uri, "mark a dead run KILLED", mark)
        dead.append(run)
    return dead


def death_of(tags: dict[str, str], host: str, stale_after: float, now: float) -> str | None:
    """Why a RUNNING run with ``tags``, seen from ``host`` at ``now``, is dead, or None."""
    owner = tags.get(HOST_TAG, "")
    pid = tags.get(PID_TAG, "")
    if owner == host:
        if not pid.isdigit() or process_alive(int(pid), tags.get(PID_START_TAG, "")):
            return None
        return f"process {pid} on {host} died without ending the run"
    try:
        last = float(tags.get(HEARTBEAT_TAG, ""))
    except ValueError:
        return None  # no heartbeat: a run of a version before it, or of no suite process
    if not owner or now - last <= stale_after:
        return None
    return (
        f"no heartbeat from process {pid} on {owner} for {now - last:.0f} s "
        f"(stale after {stale_after:.0f} s)"
    )


class Tracker:
    """An open MLflow run. Use :meth:`start`; end with :meth:`finish`, :meth:`fail` or
    :meth:`kill`. Every call's failure is one ``SuiteError`` line."""

    def __init__(self, client: Any, run_id: str, uri: str) -> None:
        self.client = client
        self.run_id = run_id
        self.uri = uri
        self._logged: set[tuple[str, int, float]] = set()
        """``(key, step, value)`` already in the run's history: a resumed run trains again
        from its checkpoint to where it was killed and would log those figures twice."""
        self._pending: list[Any] = []
        """Metrics logged but not yet sent: one store write per :data:`FLUSH_EVERY_S`
        instead of one per call (a write costs ~40 ms on SQLite, a third of a small run)."""
        self._last_flush = time.monotonic()

    @classmethod
    def start(
        cls,
        uri: str | None,
        experiment: str,
        run_name: str | None = None,
        tags: dict[str, str] | None = None,
        parent_run_id: str | None = None,
    ) -> Tracker:
        client, resolved = open_client(uri)

        def create() -> str:
            with store_lock(resolved):  # two first runs must not both create the experiment
                found = client.get_experiment_by_name(experiment)
                if found is None:
                    artifacts = None
                    if resolved == default_tracking_uri():
                        artifacts = (DEFAULT_DIR / "artifacts").resolve().as_uri()
                    experiment_id = client.create_experiment(
                        experiment,
                        artifact_location=artifacts,
                        tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
                    )
                else:
                    experiment_id = found.experiment_id
                    if EXPERIMENT_KIND_TAG not in found.tags:
                        client.set_experiment_tag(
                            experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND
                        )
            close_dead_runs(client, resolved)  # every experiment's, not only this one's
            all_tags = {**(tags or {}), **owner_tags()}
            if parent_run_id:
                all_tags[PARENT_RUN_TAG] = parent_run_id
            return client.create_run(experiment_id, tags=all_tags, run_name=run_name).info.run_id

        tracker = cls(client, _store_call(resolved, "create a run", create), resolved)
        Heartbeat.start(client, tracker.run_id)
        return tracker

    @classmethod
    def resume(cls, uri: str | None, run_id: str) -> Tracker:
        """Reopen an existing run (a resumed training run): RUNNING again, owned by this
        process (so a start elsewhere does not take it for a dead one)."""
        client, resolved = open_client(uri)
        close_dead_runs(client, resolved)
        tracker = cls(client, run_id, resolved)
        tracker.set_tags(owner_tags())
        tracker.call("reopen it", lambda: client.update_run(run_id, status="RUNNING"))
        Heartbeat.start(client, run_id)
        keys = tracker.call("read it", lambda: list(client.get_run(run_id).data.metrics))
        for key in keys:
            history = tracker.call(
                f"read metric {key}", partial(client.get_metric_history, run_id, key)
            )
            tracker._logged.update((m.key, int(m.step), float(m.value)) for m in history)
        return tracker

    @classmethod
    def of(cls, uri: str | None, run_id: str) -> Tracker:
        """An existing run as it is (not reopened): a parent run that another process or
        an earlier session started, to add to and end."""
        return cls(client_for(uri), run_id, resolve_tracking_uri(uri))

    def call(self, what: str, call: Callable[[], T]) -> T:
        """``call()`` on this run's store; a failure is one ``SuiteError`` line."""
        return _store_call(self.uri, f"{what} (run {self.run_id})", call)

    def log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in sorted(params.items())]
        for i in range(0, len(items), MAX_PARAMS_PER_CALL):
            batch = items[i : i + MAX_PARAMS_PER_CALL]
            self.call("log params", partial(self.client.log_batch, self.run_id, params=batch))

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        """Log the finite ``metrics`` at ``step`` (NaN and infinities are left out), each
        ``(key, step, value)`` once: the same figure at the same step again (a step trained
        and validated again after a resume) adds no second entry to the history."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        for k, v in metrics.items():
            entry = (k[:MAX_KEY], int(step), float(v))
            if math.isfinite(entry[2]) and entry not in self._logged:
                self._logged.add(entry)
                self._pending.append(Metric(entry[0], entry[2], now, entry[1]))
        if time.monotonic() - self._last_flush >= FLUSH_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Send the metrics logged since the last flush (the run's end flushes too)."""
        items, self._pending = self._pending, []
        self._last_flush = time.monotonic()
        for i in range(0, len(items), MAX_METRICS_PER_CALL):
            batch = items[i : i + MAX_METRICS_PER_CALL]
            self.call("log metrics", partial(self.client.log_batch, self.run_id, metrics=batch))

    def set_tags(self, tags: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        items = [RunTag(k, str(v)) for k, v in tags.items()]
        self.call("set tags", lambda: self.client.log_batch(self.run_id, tags=items))

    def log_text(self, text: str, artifact_file: str) -> None:
        self.call(
            f"log {artifact_file}", lambda: self.client.log_text(self.run_id, text, artifact_file)
        )

    def log_artifact(
        self, path: str | Path, artifact_dir: str | None = None, what: str | None = None
    ) -> None:
        """The file ``path`` as an artifact of the run (under ``artifact_dir``)."""
        self.call(
            what or f"log {Path(path).name}",
            lambda: self.client.log_artifact(self.run_id, str(path), artifact_dir),
        )

    def log_pytorch_model(
        self, model: Any, name: str, params: dict[str, str], requirements: list[str], step: int
    ) -> str:
        """Save the torch module ``model`` as an MLflow logged model (pickle format) whose
        source is this run, linked to the run as its output at ``step``. Its id."""
        import mlflow.pytorch
        from mlflow.entities import LoggedModelOutput

        client = self.client

        def save() -> str:
            run = client.get_run(self.run_id)
            logged = client.create_logged_model(
                run.info.experiment_id,
                name=name,
                source_run_id=self.run_id,
                params=params,
                model_type="recsuite",
            )
            with tempfile.TemporaryDirectory() as tmp:
                # its pickle warning is dropped: pickle is chosen on purpose
                with _quiet("mlflow.pytorch", logging.ERROR):
                    mlflow.pytorch.save_model(
                        model,
                        str(Path(tmp) / "model"),
                        pip_requirements=requirements,
                        serialization_format="pickle",
                    )
                client.log_model_artifacts(logged.model_id, str(Path(tmp) / "model"))
            client.finalize_logged_model(logged.model_id, "READY")
            client.log_outputs(self.run_id, [LoggedModelOutput(logged.model_id, step)])
            return logged.model_id

        return self.call("log the model", save)

    def log_dataset(
        self, name: str, digest: str, source: str, context: str = "training", **profile: Any
    ) -> None:
        """Record the run's dataset as an MLflow input (the run's Datasets column)."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(
            name=name,
            digest=digest[:36],
            source_type="local",
            source=json.dumps({"uri": source}),
            profile=json.dumps(profile, sort_keys=True) if profile else None,
        )
        entry = DatasetInput(dataset, tags=[InputTag("mlflow.data.context", context)])

        def log() -> None:
            try:
                self.client.log_inputs(self.run_id, [entry])
            except Exception as exc:
                # two workers' first runs on one dataset: the other inserted it between
                # MLflow's lookup and its insert; the second try finds it
                if "UNIQUE constraint failed: datasets" not in str(exc):
                    raise
                self.client.log_inputs(self.run_id, [entry])

        self.call("log its dataset", log)

    def finish(self) -> None:
        self._end("FINISHED")

    def fail(self) -> None:
        """End the run FAILED; on a SQLite store whose disk is full, by writing the status
        in place (:func:`end_in_place`) when MLflow cannot."""
        try:
            self._end("FAILED")
        except DiskFullError:
            if not end_in_place(self.uri, self.run_id, "FAILED"):
                raise

    def kill(self, reason: str) -> None:
        """End the run KILLED (interrupted), saying by what."""
        self.set_tags({KILLED_BY_TAG: reason})
        self._end("KILLED")

    def _end(self, status: str) -> None:
        """Flush the pending metrics and end the run ``status``. A flush that fails
        (a full store, say) fails a FINISHED end (the caller then ends it FAILED); a
        failing or killed run ends anyway, its last seconds of history lost."""
        try:
            self.flush()
        except SuiteError:
            if status == "FINISHED":
                raise
        stop_heartbeat(self.run_id)
        self.call(
            f"end it {status}", lambda: self.client.set_terminated(self.run_id, status=status)
        )
