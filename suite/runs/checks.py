"""Checks done before a run starts work: where it writes, and whether its tables fit."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from suite.config import RunConfig
from suite.errors import ConfigError
from suite.units import human_bytes

FLOAT_BYTES = 4


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
    if kind == "file" and path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{field}: cannot write {path}: permission denied")


def available_bytes(device: torch.device) -> int:
    """Memory a run on ``device`` may use: the GPU's total, or RAM available plus free swap."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[1])
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        kib = int(info["MemAvailable"].split()[0]) + int(info.get("SwapFree", "0 kB").split()[0])
        return kib * 1024
    except (OSError, KeyError, ValueError):
        return 2**63 - 1  # unknown: do not refuse


def embedding_bytes_lower_bound(config: RunConfig, cardinalities: list[int]) -> int:
    """Bytes the embedding needs at least: its ``[B, F, D]`` float32 output for the larger
    of the train and eval batches (values and gradients), and for ``full`` its tables and
    their row-wise optimizer state."""
    dim = int(getattr(config.embedding.typed_options(), "dim", 0) or 0)
    batch = max(config.train.batch_size, config.train.eval_batch_size)
    total = 2 * batch * len(cardinalities) * dim * FLOAT_BYTES
    if config.embedding.name == "full":
        rows = sum(cardinalities)
        total += rows * dim * FLOAT_BYTES + rows * FLOAT_BYTES
    return total


def check_memory(config: RunConfig, cardinalities: list[int], device: torch.device) -> None:
    """Refuse, before allocating, an embedding whose tables would not fit in memory."""
    need = embedding_bytes_lower_bound(config, cardinalities)
    have = available_bytes(device)
    if need > have:
        raise ConfigError(
            f"embedding.options.dim: {config.embedding.name} with dim "
            f"{getattr(config.embedding.typed_options(), 'dim', '?')} on {len(cardinalities)} "
            f"features needs at least {need:,} bytes ({human_bytes(need)}) but {device.type} has "
            f"{have:,} ({human_bytes(have)}) available"
        )
