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
    """

    def __init__(
        self,
        split: SplitArrays,
        batch_size: int,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        self.split = split
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0

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
            rows = np.sort(order[start:stop]) if order is not None else slice(start, stop)
            yield Batch(
                dense=torch.from_numpy(np.array(self.split.dense[rows], dtype=np.float32)),
                sparse=torch.from_numpy(np.array(self.split.sparse[rows], dtype=np.int64)),
                label=torch.from_numpy(np.array(self.split.label[rows], dtype=np.float32)),
            )
