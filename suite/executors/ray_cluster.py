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

    def _fingerprint(self, job: Any) -> str | None:
        config = getattr(job, "config", None)
        return None if config is None else self.fingerprints.get(config.dataset.model_dump_json())

    def run(
        self, jobs: Sequence[J], work: Callable[[J], Any], needs: Callable[[J], Needs]
    ) -> Iterator[tuple[J, Any]]:
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
        task = ray.remote(on_node)
        pending: dict[Any, tuple[J, Needs]] = {}
        try:
            capacity = live_capacity(ray)
            for job in jobs:
                need = needs(job)
                self._check_placeable(job, need, capacity)
                ref = task.options(
                    num_cpus=need.cpus,
                    num_gpus=need.gpus,
                    max_retries=self.max_retries,
                    retry_exceptions=False,
                ).remote(work, job, self._fingerprint(job))
                pending[ref] = (job, need)
            yield from self._collect(ray, pending)
        except BaseException:  # an error, Ctrl-C, or the caller closing the iteration
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception as exc:  # a task already finished or lost
                    print(f"note: cancelling a Ray task: {exc}", file=sys.stderr)
            raise
        finally:
            if started_here:
                ray.shutdown()

    def _check_placeable(self, job: Any, need: Needs, capacity: list[dict[str, float]]) -> None:
        if not placeable(need, capacity):
            label = getattr(job, "label", repr(job))
            raise SuiteError(
                f"{label} needs {need.describe()} on one node; no node of the Ray cluster "
                f"has them ({describe_capacity(capacity)})"
            )

    def _collect(self, ray: Any, pending: dict[Any, tuple[J, Needs]]) -> Iterator[tuple[J, Any]]:
        unplaceable_since: float | None = None
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in ready:
                job, _ = pending.pop(ref)
                yield job, self._value(ray, ref, job)
            if ready or not pending:
                unplaceable_since = None
                continue
            capacity = live_capacity(ray)
            stuck = [(j, n) for j, n in pending.values() if not placeable(n, capacity)]
            if not stuck:
                unplaceable_since = None
                continue
            unplaceable_since = unplaceable_since or time.monotonic()
            if time.monotonic() - unplaceable_since >= self.unplaceable_after_s:
                job, need = stuck[0]
                self._check_placeable(job, need, capacity)

    def _value(self, ray: Any, ref: Any, job: Any) -> Any:
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
                f"{label}: lost {self.max_retries + 1} times on the Ray cluster ({first})"
            ) from exc
        return land_arrays(value, arrays)
