"""recsuite: a benchmark suite for DLRM-family recommendation models.

``from suite import run, load_results, compare`` is the Python API (:mod:`suite.api`);
it loads on first use, so ``import suite`` (and the ``suite`` command) stays light.
"""

from __future__ import annotations

import os
from typing import Any

# OpenMP threads that spin after a parallel region (libgomp's default) steal the cores the
# next GEMM needs: on 2 shared cores that slowed the training step many times over. libgomp
# reads this once, when torch loads it, so it is set here, before anything imports torch; a
# value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
__all__ = ["__version__", "compare", "load_results", "run"]

_API = {"run", "load_results", "compare"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from suite import api

        return getattr(api, name)
    raise AttributeError(f"module 'suite' has no attribute {name!r}")
