"""Jobs as tasks on a Ray cluster (``--executor ray --address HOST:PORT``).

No shared filesystem is assumed: each task prepares its dataset on its node (or finds it
in that node's cache) and checks the fingerprint against the driver's before training; the
task's value comes back to the driver with the arrays it kept (test labels and logits),
which the driver writes where the node wrote them, so the driver stores results exactly as
the local executor does. MLflow is the tracking server the configs name, which every node
reaches; the parent run stays the driver's.

Faults: a task whose node dies is retried elsewhere by Ray (``max_retries``); a task that
fails for its own reasons (a bad config, a NaN) is not retried and fails with its error,
as locally; a task no live node can place fails with one line after ``unplaceable_after_s``
instead of waiting forever; an error or Ctrl-C in the driver cancels every task still
queued or running, and what finished before stays the caller's.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from suite.errors import SuiteError
from suite.executors.base import Needs
from suite.results import ARRAYS_DETAIL, TaskResult, read_arrays, write_arrays

J = TypeVar("J")

MAX_RETRIES = 3
"""Times Ray reruns a task whose worker or node died (never for the task's own errors)."""

UNPLACEABLE_AFTER_S = 30.0
"""How long a queued task may fit no live node before the run fails with its needs."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # the optional extra
        raise SuiteError(
            "--executor ray needs Ray: pip install -e '.[ray]' (on the driver and every node)"
        ) from exc
    return ray


def on_node(work: Callable[[Any], Any], job: Any, fingerprint: str | None) -> tuple[Any, Any]:
    """A Ray task's body: check the node's prepared data, run ``work(job)``, and return
    the value with the arrays it wrote on this node (None where it kept none)."""
    config = getattr(job, "config", None)
    if fingerprint is not None and config is not None:
        from suite.data.source import get_prepared

        here = get_prepared(config.dataset, progress=False).fingerprint
        if here != fingerprint:
            import socket

            raise SuiteError(
                f"{socket.gethostname()}: dataset {config.dataset.name} prepared here has "
                f"fingerprint {here}, the driver's is {fingerprint}: the node's raw files "
                "or suite version differ"
            )
    value = work(job)
    arrays = read_arrays(value) if isinstance(value, TaskResult) else None
    return value, arrays


def land_arrays(value: Any, arrays: dict[str, Any] | None) -> Any:
    """Write the arrays a task sent back where its node wrote them (a temporary folder of
    this machine where that path is not writable here) and point the result at them."""
    if not arrays or not isinstance(value, TaskResult):
        return value
    written = Path(value.details[ARRAYS_DETAIL]["file"])
    try:
        entry = write_arrays(written.with_suffix(".json"), arrays)
    except (OSError, SuiteError):
        fallback = Path(tempfile.gettempdir()) / "recsuite-ray-arrays" / written.name
        entry = write_arrays(fallback.with_suffix(".json"), arrays)
    return value.model_copy(update={"details": {**value.details, ARRAYS_DETAIL: entry}})


def live_capacity(ray: Any) -> list[dict[str, float]]:
    """Each live node's total resources."""
    return [dict(n.get("Resources", {})) for n in ray.nodes() if n.get("Alive")]


def placeable(needs: Needs, capacity: list[dict[str, float]]) -> bool:
    return any(
        node.get("CPU", 0.0) >= needs.cpus and node.get("GPU", 0.0) >= needs.gpus
        for node in capacity
    )


def describe_capacity(capacity: list[dict[str, float]]) -> str:
    if not capacity:
        return "no live node"
    nodes = [f"{int(n.get('CPU', 0))} CPU/{int(n.get('GPU', 0))} GPU" for n in capacity]
    return f"live nodes: {', '.join(nodes)}"


def slots_for(needs: Needs, capacity: list[dict[str, float]]) -> int:
    """How many jobs of ``needs`` the live nodes hold at once (each node's CPUs and GPUs
    divided by the job's, the smaller, summed over the nodes)."""
    total = 0
    for node in capacity:
        fits = int(node.get("CPU", 0.0) // max(needs.cpus, 1))
        if needs.gpus:
            fits = min(fits, int(node.get("GPU", 0.0) // needs.gpus))
        total += fits
    return total


def node_of() -> dict[str, str]:
    """Where the calling process runs: its host name and, inside a Ray task, its node id."""
    import socket

    here = {"host": socket.gethostname()}
    try:
        import ray

        if ray.is_initialized():
            here["ray_node"] = ray.get_runtime_context().get_node_id()
    except ImportError:
        pass
    return here


class RayExecutor:
    """Tasks on the Ray cluster at ``address`` (None: a cluster Ray starts on this machine)."""

    name = "ray"

    def __init__(
        self,
        address: str | None,
        fingerprints: dict[str, str] | None = None,
        max_retries: int = MAX_RETRIES,
        unplaceable_after_s: float = UNPLACEABLE_AFTER_S,
    ) -> None:
        self.address = address
        self.fingerprints = fingerprints or {}
        self.max_retries = max_retries
        self.unplaceable_after_s = unplaceable_after_s

    def fingerprint(self, job: Any) -> str | None:
        """The driver's fingerprint of ``job``'s dataset, for its node to check (None: unknown)."""
        config = getattr(job, "config", None)
        return None if config is None else self.fingerprints.get(config.dataset.model_dump_json())

    @contextlib.contextmanager
    def connect(self) -> Iterator[RaySession]:
        """``with executor.connect() as session:`` the cluster, to submit jobs one at a time
        (a study asks its next trial as one finishes). Leaving the block on an error, a
        Ctrl-C or a closed generator cancels every job still queued or running."""
        ray = import_ray()
        started_here = not ray.is_initialized()
        if started_here:
            try:
                ray.init(
                    address=self.address,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                    include_dashboard=False,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise SuiteError(
                    f"--address {self.address}: no Ray cluster there ({first})"
                ) from exc
        session = RaySession(self, ray)
        try:
            yield session
        except BaseException:  # an error, Ctrl-C, or the caller closing the iteration
            session.cancel()
            raise
        finally:
            if started_here:
                ray.shutdown()

    def run(
        self, jobs: Sequence[J], work: Callable[[J], Any], needs: Callable[[J], Needs]
    ) -> Iterator[tuple[J, Any]]:
        with self.connect() as session:
            capacity = session.capacity()
            for job in jobs:
                session.submit(job, work, needs(job), capacity)
            while session.pending:
                yield session.next()


class RaySession:
    """Jobs submitted to a connected cluster one at a time and collected as they finish
    (see :meth:`RayExecutor.connect`)."""

    def __init__(self, executor: RayExecutor, ray: Any) -> None:
        self.executor = executor
        self.ray = ray
        self.task = ray.remote(on_node)
        self.pending: dict[Any, tuple[Any, Needs]] = {}
        self._unplaceable_since: float | None = None

    def capacity(self) -> list[dict[str, float]]:
        """Each live node's total resources."""
        return live_capacity(self.ray)

    def slots(self, needs: Needs) -> int:
        """How many jobs of ``needs`` the cluster runs at once (at least 1)."""
        return max(1, slots_for(needs, self.capacity()))

    def submit(
        self,
        job: Any,
        work: Callable[[Any], Any],
        need: Needs,
        capacity: list[dict[str, float]] | None = None,
    ) -> None:
        """Queue ``work(job)`` as a task asking for ``need``; one line at once where no live
        node has that much."""
        self._check_placeable(job, need, self.capacity() if capacity is None else capacity)
        ref = self.task.options(
            num_cpus=need.cpus,
            num_gpus=need.gpus,
            max_retries=self.executor.max_retries,
            retry_exceptions=False,
        ).remote(work, job, self.executor.fingerprint(job))
        self.pending[ref] = (job, need)

    def cancel(self) -> None:
        """Cancel every job still queued or running."""
        for ref in list(self.pending):
            try:
                self.ray.cancel(ref, force=True)
            except Exception as exc:  # a task already finished or lost
                print(f"note: cancelling a Ray task: {exc}", file=sys.stderr)
        self.pending.clear()

    def _check_placeable(self, job: Any, need: Needs, capacity: list[dict[str, float]]) -> None:
        if not placeable(need, capacity):
            label = getattr(job, "label", repr(job))
            raise SuiteError(
                f"{label} needs {need.describe()} on one node; no node of the Ray cluster "
                f"has them ({describe_capacity(capacity)})"
            )

    def next(self, catch: bool = False) -> tuple[Any, Any]:
        """The next job to finish and its value. A job's own error is raised as itself, a
        job lost on every retry as one line; with ``catch`` either is returned as the value
        instead (a study fails that trial and goes on). A job no live node can place fails
        the session after ``unplaceable_after_s``, whatever ``catch``."""
        while self.pending:
            ready, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=1.0)
            if ready:
                self._unplaceable_since = None
                job, _ = self.pending.pop(ready[0])
                try:
                    return job, self._value(ready[0], job)
                except Exception as exc:
                    if catch:
                        return job, exc
                    raise
            self._check_stuck()
        raise SuiteError("no Ray task is pending")

    def _check_stuck(self) -> None:
        capacity = live_capacity(self.ray)
        stuck = [(j, n) for j, n in self.pending.values() if not placeable(n, capacity)]
        if not stuck:
            self._unplaceable_since = None
            return
        self._unplaceable_since = self._unplaceable_since or time.monotonic()
        if time.monotonic() - self._unplaceable_since >= self.executor.unplaceable_after_s:
            job, need = stuck[0]
            self._check_placeable(job, need, capacity)

    def _value(self, ref: Any, job: Any) -> Any:
        ray = self.ray
        label = getattr(job, "label", repr(job))
        try:
            value, arrays = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # the job's own error, not retried
            cause = exc.cause
            if isinstance(cause, BaseException) and not isinstance(cause, ray.exceptions.RayError):
                raise cause from None
            raise SuiteError(f"{label}: {str(exc).strip().splitlines()[-1]}") from exc
        except ray.exceptions.RayError as exc:  # its worker or node died, every retry
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SuiteError(
                f"{label}: lost {self.executor.max_retries + 1} times on the Ray cluster ({first})"
            ) from exc
        return land_arrays(value, arrays)
