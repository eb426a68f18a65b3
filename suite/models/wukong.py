"""Wukong (Zhang et al. 2024): a stack of factorization-machine and linear-compress blocks.

The embeddings (sparse ones, plus the dense features mapped into the same space by an MLP)
form ``X0 [n, d]``. Each interaction layer maps ``X_i [n_i, d]`` to ``X_{i+1} [n_F + n_L, d]``::

    FMB(X) = reshape(MLP(LN(flatten(X (X^T Y)))))     [n_F, d]   (optimized FM, Y [n_i, k])
    LCB(X) = W X                                      [n_L, d]   (W [n_L, n_i])
    X_{i+1} = LN(concat(FMB(X), LCB(X)) + P X)                   (P = identity when n_i = n_F + n_L)

and a final MLP maps the flattened last ``X_l`` to the logit. Stacking ``l`` layers yields
interactions up to order ``2^l``.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field, field_validator
from torch import nn

from suite.config import Frozen
from suite.embeddings.base import Init
from suite.models.base import Backbone, LayerSizes, linear_flops, mlp
from suite.registry import MODELS


class WukongOptions(Frozen):
    """Wukong's depth, widths and FM rank.

    ``fm_mlp`` lists the FMB MLP's hidden widths (a last layer to ``num_fm * dim`` is
    added); ``dense_mlp`` the hidden widths of the dense-feature MLP (a last layer to
    ``dense_embeddings * dim`` is added); ``top_mlp`` the final MLP's hidden widths (a last
    layer to one logit is added).
    """

    layers: int = Field(2, ge=1, description="interaction layers l")
    num_fm: int = Field(8, ge=1, description="embeddings n_F out of each FM block")
    num_lcb: int = Field(8, ge=1, description="embeddings n_L out of each linear compress block")
    rank: int = Field(8, ge=1, description="rank k of the optimized FM's projection Y [n, k]")
    fm_mlp: LayerSizes = [64]
    dense_mlp: LayerSizes = [64]
    dense_embeddings: int = Field(1, ge=1, description="embeddings the dense features become")
    top_mlp: LayerSizes = [64]
    init: Init = Field("torch", description="torch only: no reference code was published")

    @field_validator("init")
    @classmethod
    def _no_reference(cls, value: str) -> str:
        if value == "reference":
            raise ValueError(
                "wukong has no published reference code to initialise as; use init: torch"
            )
        return value


class FeatureMix(nn.Module):
    """A linear map over the feature axis: ``[B, n_in, d] -> [B, n_out, d]`` (no bias)."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(self.weight, x)

    def flops(self, dim: int) -> int:
        n_out, n_in = self.weight.shape
        return 2 * n_out * n_in * dim


class FactorizationMachineBlock(nn.Module):
    """Optimized FM: ``X (X^T Y)`` ``[n, k]`` instead of ``X X^T`` ``[n, n]``, then LN and
    an MLP to ``[n_F, d]``. ``Y [n, k]`` is a learned projection (one per layer)."""

    def __init__(self, n_in: int, n_out: int, dim: int, rank: int, hidden: list[int]) -> None:
        super().__init__()
        self.n_in, self.n_out, self.dim, self.rank = n_in, n_out, dim, rank
        self.projection = nn.Parameter(torch.randn(n_in, rank) / math.sqrt(n_in))
        self.norm = nn.LayerNorm(n_in * rank)
        self.mlp = mlp([n_in * rank, *hidden, n_out * dim], final_activation=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [B, d, n] @ [n, k] -> [B, d, k]; then [B, n, d] @ [B, d, k] -> [B, n, k]
        compressed = torch.matmul(x.transpose(1, 2), self.projection)
        interactions = torch.bmm(x, compressed).flatten(1)
        return self.mlp(self.norm(interactions)).view(-1, self.n_out, self.dim)

    def flops(self) -> int:
        return 4 * self.n_in * self.dim * self.rank + linear_flops(self.mlp)


class WukongLayer(nn.Module):
    """``[B, n_in, d] -> [B, n_F + n_L, d]``: FMB and LCB side by side, residual, LN."""

    def __init__(self, n_in: int, dim: int, options: WukongOptions) -> None:
        super().__init__()
        n_out = options.num_fm + options.num_lcb
        self.dim = dim
        self.fmb = FactorizationMachineBlock(
            n_in, options.num_fm, dim, options.rank, options.fm_mlp
        )
        self.lcb = FeatureMix(n_in, options.num_lcb)
        self.residual = FeatureMix(n_in, n_out) if n_in != n_out else None
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.cat([self.fmb(x), self.lcb(x)], dim=1)
        skip = x if self.residual is None else self.residual(x)
        return self.norm(out + skip)

    def flops(self) -> int:
        residual = 0 if self.residual is None else self.residual.flops(self.dim)
        return self.fmb.flops() + self.lcb.flops(self.dim) + residual


@MODELS.register("wukong")
class Wukong(Backbone):
    """Wukong: stacked optimized-FM and linear-compress blocks, then an MLP (scales by depth/width)."""

    Options = WukongOptions

    def __init__(self, num_dense: int, num_sparse: int, dim: int, options: WukongOptions) -> None:
        super().__init__()
        self.options, self.num_dense, self.dim = options, num_dense, dim
        dense_out = options.dense_embeddings if num_dense else 0
        self.dense = (
            mlp([num_dense, *options.dense_mlp, dense_out * dim], final_activation=False)
            if num_dense
            else None
        )
        n = num_sparse + dense_out
        self.num_inputs = n
        layers = []
        for _ in range(options.layers):
            layers.append(WukongLayer(n, dim, options))
            n = options.num_fm + options.num_lcb
        self.layers = nn.Sequential(*layers)
        self.top = mlp([n * dim, *options.top_mlp, 1], final_activation=False)

    def forward(self, dense: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        """``dense [B, Dd]``, ``embedded [B, F, D]`` -> logits ``[B]``."""
        x = embedded
        if self.dense is not None:
            from_dense = self.dense(dense).view(dense.shape[0], -1, self.dim)
            x = torch.cat([from_dense, embedded], dim=1)
        x = self.layers(x)
        return self.top(x.flatten(1)).squeeze(1)

    def flops_per_example(self) -> int:
        dense = linear_flops(self.dense) if self.dense is not None else 0
        stack = sum(layer.flops() for layer in self.layers)
        return dense + stack + linear_flops(self.top)
