"""DCNv2 (Wang et al. 2021): a cross network and an MLP over the concatenated features.

The input ``x0 = concat(dense, flatten(embedded))`` has width ``Dd + F*D``. Each cross layer
computes ``x_{l+1} = x0 * (W x_l + b) + x_l`` with a full-rank ``W`` or a low-rank
``U (V^T x_l)`` (the paper's cost-saving form, ``rank`` r). ``stacked`` feeds the cross
network's output to the MLP; ``parallel`` runs both on ``x0`` and concatenates their
outputs. A final linear layer gives the logit.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from suite.config import Frozen
from suite.models.base import Backbone, LayerSizes, linear_flops, mlp
from suite.registry import MODELS


class DCNv2Options(Frozen):
    """Cross depth and rank, structure, and the MLP's hidden widths."""

    cross_layers: int = Field(3, ge=1, description="cross layers")
    rank: int | None = Field(None, ge=1, description="low-rank cross (U V^T); None: full rank")
    structure: Literal["stacked", "parallel"] = "stacked"
    mlp: LayerSizes = [256, 128]


class CrossLayer(nn.Module):
    """``x_{l+1} = x0 * (W x_l + b) + x_l``; ``W`` is ``[w, w]`` or ``U [w, r] V^T [r, w]``."""

    def __init__(self, width: int, rank: int | None) -> None:
        super().__init__()
        if rank is None:
            self.weight: nn.Module = nn.Linear(width, width)
        else:
            self.weight = nn.Sequential(nn.Linear(width, rank, bias=False), nn.Linear(rank, width))

    def forward(self, x0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x0 * self.weight(x) + x


@MODELS.register("dcnv2")
class DCNv2(Backbone):
    """DCNv2: full- or low-rank cross network with an MLP, stacked or parallel."""

    Options = DCNv2Options

    def __init__(self, num_dense: int, num_sparse: int, dim: int, options: DCNv2Options) -> None:
        super().__init__()
        self.options = options
        width = num_dense + num_sparse * dim
        self.width = width
        self.cross = nn.ModuleList(
            CrossLayer(width, options.rank) for _ in range(options.cross_layers)
        )
        self.mlp = (
            mlp([width, *options.mlp], final_activation=True) if options.mlp else nn.Identity()
        )
        mlp_out = options.mlp[-1] if options.mlp else width
        head_in = mlp_out + (width if options.structure == "parallel" else 0)
        self.head = nn.Linear(head_in, 1)

    def forward(self, dense: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        """``dense [B, Dd]``, ``embedded [B, F, D]`` -> logits ``[B]``."""
        x0 = torch.cat([dense, embedded.flatten(1)], dim=1)
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        if self.options.structure == "stacked":
            features = self.mlp(x)
        else:
            features = torch.cat([x, self.mlp(x0)], dim=1)
        return self.head(features).squeeze(1)

    def flops_per_example(self) -> int:
        # every matmul is an nn.Linear applied once per example; the elementwise cross
        # product and residual add are not counted (as FlopCounterMode does not)
        return linear_flops(self)
