"""Raw embedding traces in the facebookresearch/dlrm_datasets format.

A trace file is ``torch.save((indices, offsets, lengths))``, optionally gzipped: ``indices
[L]`` row ids, ``offsets [T*B + 1]`` bag boundaries (bag ``t*B + b`` is table ``t``,
sample ``b``) and ``lengths [T, B]`` bag sizes, which must agree with ``offsets``. Loaded
with ``weights_only=True``: a trace is tensors, never code.
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np

from suite.data.access import AccessStream
from suite.errors import DataError


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_trace(path: str | Path) -> AccessStream:
    """The access stream of a dlrm_datasets trace; errors name the file and the problem."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise DataError(f"trace file {path} does not exist")
    try:
        with path.open("rb") as raw:
            magic = raw.read(2)
        opener = gzip.open if magic == b"\x1f\x8b" else open
        with opener(path, "rb") as handle:
            loaded = torch.load(handle, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises many types for a foreign or torn file
        raise DataError(
            f"trace file {path}: not a dlrm_datasets trace (torch.save of (indices, offsets, "
            f"lengths)): {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    if not (isinstance(loaded, tuple | list) and len(loaded) == 3):
        raise DataError(
            f"trace file {path}: expected a tuple (indices, offsets, lengths), "
            f"got {type(loaded).__name__}"
        )
    indices, offsets, lengths = (np.asarray(t.cpu().numpy()) for t in loaded)
    if lengths.ndim != 2:
        raise DataError(f"trace file {path}: lengths must be [tables, batch], got {lengths.shape}")
    tables, batch = lengths.shape
    if offsets.shape != (tables * batch + 1,):
        raise DataError(
            f"trace file {path}: offsets has shape {offsets.shape}, expected "
            f"({tables * batch + 1},) for lengths {lengths.shape}"
        )
    if not np.array_equal(np.diff(offsets), lengths.reshape(-1)) or offsets[-1] != len(indices):
        raise DataError(f"trace file {path}: offsets do not agree with lengths and indices")
    if indices.size and indices.min() < 0:
        raise DataError(f"trace file {path}: negative row index {int(indices.min())}")
    bag_table = np.repeat(np.arange(tables * batch) // batch, lengths.reshape(-1))
    rows = np.zeros(tables, dtype=np.int64)
    if indices.size:
        np.maximum.at(rows, bag_table, indices.astype(np.int64) + 1)
    return AccessStream.from_bags(indices, offsets, tables, rows)
