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
    """

    dense: torch.Tensor
    sparse: torch.Tensor
    label: torch.Tensor

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def to(self, device: torch.device | str) -> Batch:
        if torch.device(device).type == "cpu":
            return self
        return Batch(
            self.dense.to(device, non_blocking=True),
            self.sparse.to(device, non_blocking=True),
            self.label.to(device, non_blocking=True),
        )
