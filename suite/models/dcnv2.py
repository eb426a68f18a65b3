"""DCNv2 (Wang et al. 2021): a cross network and an MLP over the concatenated features.

The input ``x0 = concat(dense, flatten(embedded))`` has width ``Dd + F*D``. Each cross layer
computes ``x_{l+1} = x0 * (W x_l + b) + x_l`` with a full-rank ``W`` or a low-rank
``U (V^T x_l)`` (the paper's cost-saving form, ``rank`` r). ``stacked`` feeds the cross
network's output to the MLP; ``parallel`` runs both on ``x0`` and concatenates their
outputs. A final linear layer gives the logit.

``init: reference`` starts the layers as the paper's TensorFlow code does
(tensorflow_recommenders ``layers.dcn.Cross`` and Keras ``Dense`` defaults): cross
kernels from a normal of std 0.05 truncated at two std, cross biases zero, MLP and head
Glorot-uniform with zero biases. ``init: torch`` keeps torch's ``nn.Linear`` defaults.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from suite.config import Frozen
from suite.embeddings.base import Init
from suite.models.base import Backbone, LayerSizes, keras_dense_init_, linear_flops, mlp
from suite.registry import MODELS


class DCNv2Options(Frozen):
    """Cross depth and rank, structure, and the MLP's hidden widths."""

    cross_layers: int = Field(3, ge=1, description="cross layers")
    rank: int | None = Field(None, ge=1, description="low-rank cross (U V^T); None: full rank")
    structure: Literal["stacked", "parallel"] = "stacked"
    mlp: LayerSizes = [256, 128]
    init: Init = Field("reference", description="reference: the paper's TensorFlow defaults")


CROSS_KERNEL_STD = 0.05
"""Keras' ``truncated_normal`` initializer: std 0.05, redrawn beyond two std."""


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

    @torch.no_grad()
    def reference_init_(self) -> None:
        """Kernels truncated-normal (std 0.05, cut at two std), biases zero."""
        for layer in self.weight.modules():
            if isinstance(layer, nn.Linear):
                std = CROSS_KERNEL_STD
                nn.init.trunc_normal_(layer.weight, 0.0, std, -2 * std, 2 * std)
                if layer.bias is not None:
                    layer.bias.zero_()


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
        if options.init == "reference":
            keras_dense_init_(self.mlp)
            keras_dense_init_(self.head)
            for layer in self.cross:
                layer.reference_init_()

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
