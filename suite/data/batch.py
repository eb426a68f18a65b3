"""The batch type every model consumes."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Batch:
    """One mini-batch.

    Attributes:
        dense: float32 ``[B, Dd]`` dense features (``Dd`` may be 0).
        sparse: int64 ``[B, F]`` categorical ids, one per feature.
        label: float32 ``[B]`` click labels in {0, 1}.
        weight: float32 ``[B]`` of 1 (a row) and 0 (padding), or ``None`` (all rows real).
        loss_norm: what the summed weighted loss is divided by (``None``: the mean loss).
            A rank of a distributed run gets ``global rows / world`` so that the ranks'
            losses add up to the global batch's mean loss.
    """

    dense: torch.Tensor
    sparse: torch.Tensor
    label: torch.Tensor
    weight: torch.Tensor | None = None
    loss_norm: float | None = None

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def to(self, device: torch.device | str) -> Batch:
        if torch.device(device).type == "cpu":
            return self
        return Batch(
            self.dense.to(device, non_blocking=True),
            self.sparse.to(device, non_blocking=True),
            self.label.to(device, non_blocking=True),
            None if self.weight is None else self.weight.to(device, non_blocking=True),
            self.loss_norm,
        )

    def pin_memory(self) -> Batch:
        """This batch in page-locked host memory, so that :meth:`to` a GPU is an
        asynchronous copy (a copy from pageable memory makes the host wait)."""
        return Batch(
            self.dense.pin_memory(),
            self.sparse.pin_memory(),
            self.label.pin_memory(),
            None if self.weight is None else self.weight.pin_memory(),
            self.loss_norm,
        )

    @property
    def rows(self) -> int:
        """Real (not padding) rows."""
        return len(self) if self.weight is None else int(self.weight.sum())
