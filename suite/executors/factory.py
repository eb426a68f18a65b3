"""The executor ``--executor`` names, built from the command's options."""

from __future__ import annotations

from suite.errors import ConfigError
from suite.executors import EXECUTORS
from suite.executors.base import Executor
from suite.executors.local import LocalExecutor
from suite.executors.ray_cluster import RayExecutor


def make_executor(
    name: str,
    workers: int,
    address: str | None = None,
    fingerprints: dict[str, str] | None = None,
) -> Executor:
    """``local`` with ``workers`` processes, or ``ray`` on the cluster at ``address``
    (whose nodes check their prepared data against ``fingerprints``, keyed by the dataset
    spec's JSON)."""
    if name == "local":
        if address:
            raise ConfigError("--address names a Ray cluster: it goes with --executor ray")
        return LocalExecutor(workers)
    if name == "ray":
        return RayExecutor(address, fingerprints)
    raise ConfigError(f"--executor {name!r}: expected one of {', '.join(EXECUTORS)}")
