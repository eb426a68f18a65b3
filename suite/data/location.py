"""Where prepared datasets are cached: a rule that needs neither numpy nor torch, so
``suite list`` can say whether a dataset is prepared without loading them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from suite.stable_hash import stable_hash

if TYPE_CHECKING:
    from suite.config import DatasetSpec


def cache_root(spec: DatasetSpec | None = None) -> Path:
    """Root of prepared datasets: ``dataset.cache_dir``, else ``$RECSUITE_CACHE``, else
    ``~/.cache/recsuite/prepared``."""
    if spec is not None and spec.cache_dir:
        return Path(spec.cache_dir).expanduser()
    env = os.environ.get("RECSUITE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "recsuite" / "prepared"


def prepared_dir(spec: DatasetSpec) -> Path:
    """Cache directory for a dataset name + protocol + options."""
    key = stable_hash({"protocol": spec.protocol, "options": spec.options})
    return cache_root(spec) / spec.name / f"{spec.protocol}-{key}"
