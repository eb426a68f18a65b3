"""DLRM (Naumov et al. 2019): bottom MLP, pairwise dot interaction, top MLP."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field

from suite.config import Frozen
from suite.embeddings.base import Init
from suite.models.base import Backbone, LayerSizes, dlrm_reference_init_, linear_flops, mlp
from suite.registry import MODELS


class DLRMOptions(Frozen):
    """DLRM layer sizes and interaction.

    ``bottom_mlp`` lists the hidden widths; a last layer to the embedding dim is added (the
    reference's ``13-512-256-64-16`` is ``bottom_mlp: 512-256-64`` with dim 16). ``top_mlp``
    lists hidden widths; a last layer to one logit is added. ``init: reference`` draws the
    MLPs as the reference's ``create_mlp`` (:func:`dlrm_reference_init_`); ``torch``
    keeps torch's ``nn.Linear`` defaults.
    """

    bottom_mlp: LayerSizes = [64, 32]
    top_mlp: LayerSizes = [128, 64]
    interaction: Literal["dot", "cat"] = "dot"
    interaction_self: bool = False
    init: Init = Field("reference", description="reference: dlrm_s_pytorch.py create_mlp")
    dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="dropout after each hidden layer of both MLPs (FuxiCTR's DLRM "
        "bottom_mlp_dropout / top_mlp_dropout; the reference has none)",
    )

    identity_defaults: ClassVar[dict[str, Any]] = {"dropout": 0.0}


@MODELS.register("dlrm")
class DLRM(Backbone):
    """DLRM: bottom MLP on dense features, pairwise dot interaction, top MLP."""

    Options = DLRMOptions

    def __init__(self, num_dense: int, num_sparse: int, dim: int, options: DLRMOptions) -> None:
        super().__init__()
        self.options = options
        self.num_dense = num_dense
        self.bottom = (
            mlp([num_dense, *options.bottom_mlp, dim], True, options.dropout) if num_dense else None
        )
        vectors = num_sparse + (1 if num_dense else 0)
        if options.interaction == "dot":
            rows, cols = torch.tril_indices(
                vectors, vectors, offset=0 if options.interaction_self else -1
            )
            # flat positions of the lower-triangle pairs in the [n, n] Gram matrix
            self.register_buffer("pair_index", rows * vectors + cols, persistent=False)
            top_in = len(rows) + (dim if num_dense else 0)
        else:
            top_in = vectors * dim
        self.vectors, self.dim = vectors, dim
        self.top = mlp([top_in, *options.top_mlp, 1], False, options.dropout)
        if options.init == "reference":
            dlrm_reference_init_(self)

    def forward(self, dense: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        if self.bottom is not None:
            x = self.bottom(dense)
            stacked = torch.cat([x.unsqueeze(1), embedded], dim=1)
        else:
            x, stacked = None, embedded
        if self.options.interaction == "dot":
            gram = torch.bmm(stacked, stacked.transpose(1, 2))
            features = gram.flatten(1).index_select(1, self.pair_index)
            if x is not None:
                features = torch.cat([x, features], dim=1)
        else:
            features = stacked.flatten(1)
        return self.top(features).squeeze(1)

    def flops_per_example(self) -> int:
        mlps = linear_flops(self)
        if self.options.interaction == "dot":
            # the batched Gram matrix: n*n dot products of length D
            return mlps + 2 * self.vectors * self.vectors * self.dim
        return mlps
