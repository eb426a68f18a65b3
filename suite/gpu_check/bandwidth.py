"""Bytes moved per second by fbgemm's table-batched embedding (TBE), forward and backward,
against the device's own measured copy bandwidth.

The tables are the suite's :class:`~suite.embeddings.tables.PhysicalTables` with the
``fbgemm`` backend and its fused row-wise Adagrad (what training runs); the lookups go to
their kernel with ``L`` ids per bag (``L = 1`` is the suite's models, one id per feature;
larger ``L`` is production-like pooling). Ids are uniform over each table's rows.

Bytes moved, counted from the workload (not from hardware counters), fp32 rows of ``D``:

- forward: ``lookups x 4D`` (rows read) ``+ indices + offsets`` (int64, read)
  ``+ B x T x 4D`` (pooled outputs written), ``lookups = B x T x L``;
- backward (fused row-wise Adagrad, exact): ``B x T x 4D`` (output gradients read)
  ``+ indices + offsets + unique rows x 2 x (4D + 4)`` (each updated row and its one
  optimizer float read and written once).

Copy bandwidth: ``dst.copy_(src)`` of one large buffer, counted as read plus write
(``2 x size`` per copy, as CUDA's ``bandwidthTest`` counts device-to-device copies).
The published reference (fbgemm's TBE on production workloads) is forward about 65% and
backward about 26% of HBM *peak*; a measured copy reaches only part of peak, so ratios
against the copy read higher than the same kernel's share of peak.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from suite.embeddings.tables import PhysicalTables

PUBLISHED_FRACTION_OF_PEAK = {"forward": 0.65, "backward": 0.26}
"""fbgemm TBE's published share of HBM peak on production workloads."""
TARGET_SHARE_OF_COPY = {"forward": 0.60, "backward": 0.25}
"""The suite's targets for TBE (issue 70): forward and backward bytes/s at least these
shares of the measured copy bandwidth, on a GPU."""

BYTES_COUNTED = (
    "forward: B*T*L rows x 4D + indices + offsets + B*T x 4D outputs; "
    "backward: B*T x 4D output grads + indices + offsets + unique rows x 2 x (4D + 4) "
    "(row and row-wise Adagrad state, read and written); copy: 2 x buffer bytes"
)


@dataclass(frozen=True)
class TBEShape:
    """``tables`` tables of ``rows x dim`` fp32, ``batch`` bags per table of ``pooling`` ids."""

    tables: int
    rows: int
    dim: int
    batch: int
    pooling: int


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def copy_bandwidth(device: torch.device, nbytes: int, repeats: int = 10) -> float:
    """Bytes per second of ``dst.copy_(src)`` on ``device`` for one ``nbytes`` buffer,
    counting read plus write (``2 x nbytes`` per copy); the best of ``repeats``."""
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    _synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        _synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best


def tbe_bytes(shape: TBEShape, unique_rows: int) -> dict[str, int]:
    """Bytes one forward and one backward move (see the module docstring); index and
    offset tensors int64."""
    lookups = shape.tables * shape.batch * shape.pooling
    row = 4 * shape.dim
    ids = 8 * lookups + 8 * (shape.tables * shape.batch + 1)
    outputs = shape.tables * shape.batch * row
    return {
        "forward": lookups * row + ids + outputs,
        "backward": outputs + ids + unique_rows * 2 * (row + 4),
    }


def tbe_bandwidth(shape: TBEShape, device: torch.device, iterations: int = 20) -> dict:
    """Forward and backward bytes per second of the suite's fbgemm tables on ``device``
    (mean over ``iterations`` after one warm-up step), with the bytes counted and the
    unique rows of the batch. Raises ``RuntimeError`` where the tables did not land in
    fbgemm's kernel (fbgemm-gpu unavailable)."""
    tables = PhysicalTables(
        [shape.rows] * shape.tables,
        [shape.dim] * shape.tables,
        backend="fbgemm",
        learning_rate=1e-3,
        device=device,
    )
    kernel = tables.kernel
    if kernel is None:
        raise RuntimeError("the tables run on the torch backend (fbgemm-gpu unavailable)")
    per_table = shape.batch * shape.pooling
    generator = torch.Generator().manual_seed(0)
    indices = torch.randint(0, shape.rows, (shape.tables * per_table,), generator=generator)
    unique = sum(int(part.unique().numel()) for part in indices.split(per_table))
    indices = indices.to(device)
    offsets = torch.arange(0, indices.numel() + 1, shape.pooling, device=device)
    grad = torch.full((shape.batch, shape.tables * shape.dim), 1e-3, device=device)
    kernel(indices, offsets).backward(grad)  # warm-up: kernels compiled, caches set up
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(iterations):
        out = kernel(indices, offsets)
    _synchronize(device)
    forward_s = (time.perf_counter() - start) / iterations
    backward_s = 0.0
    for _ in range(iterations):
        out = kernel(indices, offsets)
        _synchronize(device)
        start = time.perf_counter()
        out.backward(grad)
        _synchronize(device)
        backward_s += time.perf_counter() - start
    backward_s /= iterations
    moved = tbe_bytes(shape, unique)
    return {
        **vars(shape),
        "unique_rows": unique,
        "forward_bytes": moved["forward"],
        "backward_bytes": moved["backward"],
        "forward_seconds": forward_s,
        "backward_seconds": backward_s,
        "forward_bytes_per_s": moved["forward"] / forward_s,
        "backward_bytes_per_s": moved["backward"] / backward_s,
    }


def bandwidth_report(
    shapes: list[TBEShape], device: torch.device, copy_bytes: int, iterations: int
) -> dict:
    """The copy bandwidth and, per shape, TBE forward and backward bytes per second with
    their ratio to it, beside the published share of peak."""
    copy = copy_bandwidth(device, copy_bytes)
    rows = []
    for shape in shapes:
        figures = tbe_bandwidth(shape, device, iterations)
        for direction in ("forward", "backward"):
            ratio = figures[f"{direction}_bytes_per_s"] / copy
            figures[f"{direction}_ratio_to_copy"] = ratio
            on_gpu = device.type == "cuda"  # a CPU's ratios are no GPU target's
            figures[f"{direction}_meets_target"] = (
                ratio >= TARGET_SHARE_OF_COPY[direction] if on_gpu else None
            )
        rows.append(figures)
    return {
        "copy_bytes": copy_bytes,
        "copy_bytes_per_s": copy,
        "bytes_counted": BYTES_COUNTED,
        "published_fraction_of_peak": PUBLISHED_FRACTION_OF_PEAK,
        "target_share_of_copy": TARGET_SHARE_OF_COPY,
        "shapes": rows,
    }
