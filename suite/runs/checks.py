"""Checks done before a run starts work: where it writes, whether its tables and batches
fit in memory, and whether its thread count suits the machine."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import torch

from suite.config import MAX_THREADS, RunConfig
from suite.environment import ram_available_bytes
from suite.errors import ConfigError
from suite.units import human_bytes

FLOAT_BYTES = 4
ID_BYTES = 8  # int64 ids
THREADS_PER_CPU = 4  # at most this many torch threads per usable CPU


def check_output_path(
    path: str | Path, field: str, kind: str = "file", may_exist: bool = True
) -> None:
    """Refuse, in one line naming ``field``, an output path the run could not write at
    its end: a directory given for a file (or the reverse), or a parent that is not a
    writable directory."""
    path = Path(path).expanduser()
    if kind == "file" and path.is_dir():
        raise ConfigError(
            f"{field}: {path} is a directory; give a file path (e.g. {path}/result.json)"
        )
    if kind == "dir" and path.exists() and not path.is_dir():
        raise ConfigError(f"{field}: {path} exists and is not a directory")
    if kind == "file" and path.exists() and not may_exist:
        raise ConfigError(f"{field}: {path} already exists")
    target = path if kind == "dir" and path.exists() else path.parent
    ancestor = target
    while not ancestor.exists():
        if ancestor.parent == ancestor:
            break
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"{field}: cannot write {path}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(f"{field}: cannot write {path}: {ancestor} is not writable")
    refused = _refuses_new_files(ancestor)
    if refused and not (kind == "file" and path.exists()):
        raise ConfigError(
            f"{field}: {path} is a path that cannot exist: {ancestor} takes no new files "
            f"({refused}); give a path on a real filesystem"
        )
    if kind == "file" and path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{field}: cannot write {path}: permission denied")


def _refuses_new_files(directory: Path) -> str | None:
    """Why ``directory`` takes no new file (``/proc``: "No such file or directory"), found
    by creating and removing an empty one; ``None`` where it takes one, or where only a
    full disk refused it (said by the writer, with the space)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".suite-probe-", dir=directory)
    except OSError as exc:
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        return None if full else exc.strerror or type(exc).__name__
    os.close(fd)
    Path(probe).unlink(missing_ok=True)
    return None


def available_bytes(device: torch.device) -> int:
    """Memory a run on ``device`` may use: the GPU's total, or RAM available plus free swap."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[1])
    have = ram_available_bytes()
    return 2**63 - 1 if have is None else have  # unknown: do not refuse


def table_bytes(config: RunConfig, cardinalities: list[int]) -> int:
    """Bytes the embedding tables need at least: for ``full``, its float32 ``[rows, D]``
    tables and their row-wise optimizer state (one float per row); other methods 0."""
    if config.embedding.name != "full":
        return 0
    rows = sum(cardinalities)
    return rows * _dim(config) * FLOAT_BYTES + rows * FLOAT_BYTES


def batch_bytes(config: RunConfig, features: int, batch: int, train: bool) -> int:
    """Bytes one batch of ``batch`` rows needs at least: its ids ``[B, F]`` (int64) and
    labels ``[B]``, the embedding output ``[B, F, D]`` (float32) and, in training, its
    gradient; in evaluation the logits ``[B]``."""
    per_row = features * ID_BYTES + FLOAT_BYTES
    per_row += (2 if train else 1) * features * _dim(config) * FLOAT_BYTES
    per_row += 0 if train else FLOAT_BYTES
    return batch * per_row


def embedding_bytes_lower_bound(config: RunConfig, cardinalities: list[int]) -> int:
    """Bytes the run needs at least: the tables plus the larger of its train and eval
    batches (see :func:`table_bytes`, :func:`batch_bytes`)."""
    train = batch_bytes(config, len(cardinalities), config.train.batch_size, train=True)
    evaluate = batch_bytes(config, len(cardinalities), config.train.eval_batch_size, train=False)
    return table_bytes(config, cardinalities) + max(train, evaluate)


def _dim(config: RunConfig) -> int:
    return int(getattr(config.embedding.typed_options(), "dim", 0) or 0)


def _amount(count: int) -> str:
    return f"{count:,} bytes ({human_bytes(count)})"


def check_memory(config: RunConfig, cardinalities: list[int], device: torch.device) -> None:
    """Refuse, before allocating, tables that would not fit in memory (naming
    ``embedding.options.dim``), or a train or eval batch that would not fit beside them
    (naming ``train.batch_size`` / ``train.eval_batch_size``), each with the bytes needed
    and the bytes the machine has."""
    have = available_bytes(device)
    tables = table_bytes(config, cardinalities)
    if tables > have:
        raise ConfigError(
            f"embedding.options.dim: {config.embedding.name} with dim {_dim(config)} on "
            f"{len(cardinalities)} features ({sum(cardinalities):,} rows) needs at least "
            f"{_amount(tables)} for its tables but {device.type} has {_amount(have)} available"
        )
    batches = (
        ("train.batch_size", config.train.batch_size, True),
        ("train.eval_batch_size", config.train.eval_batch_size, False),
    )
    for field, batch, train in batches:
        need = batch_bytes(config, len(cardinalities), batch, train)
        if tables + need > have:
            raise ConfigError(
                f"{field}: a batch of {batch:,} rows needs at least {_amount(need)} (ids, "
                f"labels, [B, {len(cardinalities)}, {_dim(config)}] embeddings"
                f"{' and their gradients' if train else ''}) besides {_amount(tables)} of "
                f"tables, but {device.type} has {_amount(have)} available; use a smaller {field} "
                "(or embedding.options.dim)"
            )


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; all of the machine's if unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_threads(config: RunConfig) -> None:
    """Refuse, in one line naming ``train.threads``, more torch threads than
    ``THREADS_PER_CPU`` per usable CPU of this machine (the schema caps it at
    ``MAX_THREADS`` on any machine): thousands of OpenMP threads crash the process."""
    threads = config.train.threads
    cpus = usable_cpus()
    if threads is not None and threads > THREADS_PER_CPU * cpus:
        raise ConfigError(
            f"train.threads: {threads} threads on a machine with {cpus} usable CPU(s); expected "
            f"at most {THREADS_PER_CPU * cpus} ({THREADS_PER_CPU} per CPU, {MAX_THREADS} on "
            "any machine)"
        )


def check_checkpoint_dir(config: RunConfig) -> None:
    """A run that writes checkpoints needs ``train.checkpoint_dir`` to be a directory it
    can create and write."""
    if config.train.checkpoint_every is not None:
        check_output_path(config.train.checkpoint_dir, "train.checkpoint_dir", kind="dir")
