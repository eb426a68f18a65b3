"""A process's place in a distributed run, and joining or leaving its process group.

Kept apart from :mod:`suite.engine.distributed` (TorchRec, DMP) and free of heavy
imports at module level, so the task interface can name it cheaply.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

    from suite.models.base import Ranks


@dataclass(frozen=True)
class Parallel:
    """This process's place among ``world`` ranks of one ``torch.distributed`` job (the
    :class:`~suite.models.base.Ranks` of a sharded model)."""

    rank: int
    world: int

    @property
    def leader(self) -> bool:
        """Rank 0: the one that writes MLflow and results."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return True

    def environment(self) -> dict[str, int]:
        """What a run records of its ranks: the world size."""
        return {"world_size": self.world}

    @property
    def part(self) -> tuple[int, int]:
        """This rank's part of each global batch, as :class:`~suite.data.loader.BatchLoader`
        takes it."""
        return self.rank, self.world

    def part_sizes(self, rows: int) -> list[int]:
        """Real rows of each rank's part of a global batch of ``rows`` rows (the parts
        :class:`~suite.data.loader.BatchLoader` cuts with ``part``)."""
        size = -(-rows // self.world)
        return [max(0, min(size, rows - r * size)) for r in range(self.world)]

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over the ranks (float64)."""
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def min(self, value: int) -> int:
        """The smallest of the ranks' ``value``."""
        import torch
        import torch.distributed as dist

        tensor = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
        return int(tensor.item())

    def gather_parts(self, local: np.ndarray, n: int, batch: int) -> np.ndarray:
        """The ``[n]`` values of a split read in global batches of ``batch`` rows, from
        each rank's ``local`` values of its parts (in batch order), on every rank."""
        import numpy as np
        import torch
        import torch.distributed as dist

        sizes = [self.part_sizes(min(batch, n - start)) for start in range(0, n, batch)]
        longest = max((sum(s[r] for s in sizes) for r in range(self.world)), default=0)
        padded = torch.zeros(longest, dtype=torch.float32)
        padded[: len(local)] = torch.from_numpy(np.ascontiguousarray(local, dtype=np.float32))
        gathered = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(gathered, padded)
        arrays = [g.numpy() for g in gathered]
        out = np.empty(n, dtype=np.float32)
        offsets, at = [0] * self.world, 0
        for part in sizes:
            for r, count in enumerate(part):
                out[at : at + count] = arrays[r][offsets[r] : offsets[r] + count]
                offsets[r] += count
                at += count
        return out

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()


def launched_by_torchrun() -> bool:
    """Whether this process is a rank of a ``torchrun`` job (its environment says so)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or (
        "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ
    )


def join_process_group(device: torch.device) -> Parallel | None:
    """Join the job ``torchrun`` started (gloo on CPU, NCCL on CUDA); ``None`` outside one."""
    if not launched_by_torchrun():
        return None
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    return Parallel(dist.get_rank(), dist.get_world_size())


@contextlib.contextmanager
def process_group(device: torch.device) -> Iterator[Ranks]:
    """This process's ranks for a run: the ``torchrun`` job's (joined, and left at the
    end), else :data:`~suite.models.base.ONE_PROCESS`."""
    joined = join_process_group(device)
    try:
        from suite.models.base import ONE_PROCESS

        yield joined or ONE_PROCESS
    finally:
        if joined is not None:
            leave_process_group()


def leave_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


# -- a local gloo group for measurements (not runs: those go through torchrun) --


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn_gloo(fn: Callable[..., None], world: int, *args: Any) -> None:
    """Run ``fn(rank, world, *args)`` in ``world`` fresh processes joined by a gloo group
    on this machine (a free local port); raises if any rank fails. ``fn`` must be
    importable (a module-level function)."""
    import torch.multiprocessing as mp

    mp.spawn(_gloo_entry, args=(world, _free_port(), fn, args), nprocs=world, join=True)


def _gloo_entry(rank: int, world: int, port: int, fn: Callable[..., None], args: tuple) -> None:
    import warnings

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
        }
    )
    with warnings.catch_warnings():  # a measurement's worker: its output is its figures
        warnings.simplefilter("ignore")
        dist.init_process_group("gloo", rank=rank, world_size=world)
        try:
            fn(rank, world, *args)
            dist.barrier()
        finally:
            dist.destroy_process_group()


def gather_to_file(rank: int, figures: Any, path: str) -> None:
    """All ranks' ``figures`` as a JSON list, written atomically by rank 0."""
    import json

    import torch.distributed as dist

    from suite.fileio import write_text_atomic

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, figures)
    if rank == 0:
        write_text_atomic(path, json.dumps(gathered))
