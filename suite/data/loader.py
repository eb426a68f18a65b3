"""Batches as slices of (memory-mapped) arrays, with a seeded shuffle per epoch."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from suite.data.batch import Batch
from suite.data.prepared import SplitArrays


class BatchLoader:
    """Iterates a split in batches; no per-sample Python.

    With ``shuffle``, epoch ``e`` visits rows in the order of a permutation drawn from
    ``seed`` and ``e``, so a run's batches are the same every time.

    With ``part=(rank, world)``, each global batch is cut into ``world`` equal parts and
    only part ``rank`` is read (a distributed run's rank); parts of a short last batch are
    padded with weight-0 rows, and every part carries ``loss_norm = rows / world`` of its
    global batch (see :class:`~suite.data.batch.Batch`).
    """

    def __init__(
        self,
        split: SplitArrays,
        batch_size: int,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        part: tuple[int, int] | None = None,
    ) -> None:
        self.split = split
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self.part = part

    def __len__(self) -> int:
        n = len(self.split)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Batch]:
        return self.batches()

    def batches(self, first: int = 0) -> Iterator[Batch]:
        """This epoch's batches from batch number ``first`` on (a resumed run's position)."""
        n = len(self.split)
        order = (
            np.random.default_rng([self.seed, self.epoch]).permutation(n) if self.shuffle else None
        )
        for b in range(first, len(self)):
            start, stop = b * self.batch_size, min((b + 1) * self.batch_size, n)
            picked = np.sort(order[start:stop]) if order is not None else None
            if self.part is not None:
                rows = picked if picked is not None else np.arange(start, stop)
                yield self._part_of(rows, self.part)
            else:
                yield self._read(picked if picked is not None else slice(start, stop))

    def _read(
        self,
        rows: np.ndarray | slice,
        weight: torch.Tensor | None = None,
        loss_norm: float | None = None,
    ) -> Batch:
        return Batch(
            dense=torch.from_numpy(np.array(self.split.dense[rows], dtype=np.float32)),
            sparse=torch.from_numpy(np.array(self.split.sparse[rows], dtype=np.int64)),
            label=torch.from_numpy(np.array(self.split.label[rows], dtype=np.float32)),
            weight=weight,
            loss_norm=loss_norm,
        )

    def _part_of(self, rows: np.ndarray, part: tuple[int, int]) -> Batch:
        rank, world = part
        size = -(-len(rows) // world)
        mine = rows[rank * size : (rank + 1) * size]
        real = len(mine)
        if real < size:  # pad with a real row (weight 0) so every rank's part has one shape
            mine = np.concatenate([mine, np.full(size - real, rows[0], dtype=rows.dtype)])
        weight = torch.zeros(size, dtype=torch.float32)
        weight[:real] = 1.0
        return self._read(mine, weight=weight, loss_norm=len(rows) / world)
