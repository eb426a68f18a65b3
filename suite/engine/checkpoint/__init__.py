"""Checkpoints of a training run: exact resume, and Check-N-Run's incremental and
quantized checkpoints (Eisenman et al., arXiv 2010.08679).

One job per module:

- :mod:`~suite.engine.checkpoint.store`: the on-disk format (lock, atomic fsync'ed writes,
  SHA-256 of every file and of the manifest, DCP tensor files, verified reads);
- :mod:`~suite.engine.checkpoint.checknrun`: Check-N-Run's row tracking, row-wise
  quantization and chains of increments;
- :mod:`~suite.engine.checkpoint.capture`: RNG, dense and optimizer state in and out;
- :mod:`~suite.engine.checkpoint.checkpointer`: interval and policy, writing and restoring
  a run's training state, and its wiring into a run.
"""

from suite.engine.checkpoint.checknrun import (
    ADAPTIVE_MAX_BITS,
    BITS,
    GREEDY_BINS,
    GREEDY_RATIO,
    RowTracker,
    adaptive_bits,
    dequantize_rows,
    greedy_range,
    quantization_bound,
    quantize_rows,
    quantized_row_bytes,
)
from suite.engine.checkpoint.checkpointer import (
    DEFAULT_EVERY,
    Checkpointer,
    CheckpointEvery,
    CheckpointInfo,
    CheckpointPolicy,
    LoopState,
    remove_checkpoints,
    run_checkpoints,
)
from suite.engine.checkpoint.store import (
    CHECKPOINT_OPTION,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    CheckpointDiskFull,
    CheckpointError,
    CheckpointStore,
    manifest_digest,
    read_tensors,
    write_tensors,
)

__all__ = [
    "ADAPTIVE_MAX_BITS",
    "BITS",
    "CHECKPOINT_OPTION",
    "DEFAULT_EVERY",
    "FORMAT",
    "FORMAT_VERSION",
    "GREEDY_BINS",
    "GREEDY_RATIO",
    "MANIFEST",
    "CheckpointDiskFull",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointPolicy",
    "CheckpointStore",
    "Checkpointer",
    "CheckpointEvery",
    "LoopState",
    "RowTracker",
    "adaptive_bits",
    "dequantize_rows",
    "greedy_range",
    "manifest_digest",
    "quantization_bound",
    "quantize_rows",
    "quantized_row_bytes",
    "read_tensors",
    "remove_checkpoints",
    "run_checkpoints",
    "write_tensors",
]
