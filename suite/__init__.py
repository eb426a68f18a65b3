"""recsuite: a benchmark suite for DLRM-family recommendation models.

``from suite import run, load_results, compare`` is the Python API (:mod:`suite.api`);
it loads on first use, so ``import suite`` (and the ``suite`` command) stays light.
"""

from __future__ import annotations

import os
from typing import Any


def _openmp_wait_policy() -> None:
    """On an oversubscribed machine (1-minute load >= CPUs), OpenMP threads that spin after
    a parallel region (libgomp's default) steal the cores the next GEMM needs: there a
    passive policy made the training step 3-100x faster; on a quiet machine spinning is
    1.3-2.5x faster (``benchmarks/bench_dense_step.py``). libgomp reads the variable once,
    when torch loads it, so this runs before anything imports torch; a user's value wins."""
    if "OMP_WAIT_POLICY" in os.environ:
        return
    try:
        load = os.getloadavg()[0]
    except OSError:
        return
    if load >= (os.cpu_count() or 1):
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


_openmp_wait_policy()

__version__ = "0.1.0"
__all__ = ["__version__", "compare", "load_results", "run"]

_API = {"run", "load_results", "compare"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from suite import api

        return getattr(api, name)
    raise AttributeError(f"module 'suite' has no attribute {name!r}")
