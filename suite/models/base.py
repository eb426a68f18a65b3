"""Backbone interface, MLP helper, layer-spec parsing, and the composed model."""

from __future__ import annotations

import math
from typing import Annotated, Any

import torch
from pydantic import BeforeValidator
from torch import nn

from suite.embeddings.base import EmbeddingMethod


def parse_layers(value: Any) -> list[int]:
    """Accept ``"512-256-64"`` (the DLRM reference's form), ``[512, 256, 64]`` or ``[]``."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        try:
            value = [int(part) for part in text.split("-")]
        except ValueError:
            raise ValueError(f"layer sizes must look like '512-256-64', got {text!r}") from None
    if isinstance(value, int):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, int) and v > 0 for v in value):
        raise ValueError(f"layer sizes must be positive integers, got {value!r}")
    return list(value)


LayerSizes = Annotated[list[int], BeforeValidator(parse_layers)]


def mlp(sizes: list[int], final_activation: bool) -> nn.Sequential:
    """Linear layers ``sizes[0] -> sizes[1] -> ...`` with ReLU between (and after the last
    one when ``final_activation``)."""
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(fan_in, fan_out))
        if final_activation or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


@torch.no_grad()
def dlrm_reference_init_(module: nn.Module) -> None:
    """Every ``nn.Linear`` of ``module`` as the DLRM reference's ``create_mlp`` draws it:
    weight ``[m, n]`` from ``N(0, sqrt(2 / (m + n)))``, bias ``[m]`` from
    ``N(0, sqrt(1 / m))`` (``n`` inputs, ``m`` outputs), from torch's global generator."""
    for layer in _linears(module):
        m, n = layer.out_features, layer.in_features
        layer.weight.normal_(0.0, math.sqrt(2.0 / (m + n)))
        if layer.bias is not None:
            layer.bias.normal_(0.0, math.sqrt(1.0 / m))


@torch.no_grad()
def keras_dense_init_(module: nn.Module) -> None:
    """Every ``nn.Linear`` of ``module`` as a Keras ``Dense`` layer starts (the default of
    the TensorFlow reference code): Glorot-uniform weight, zero bias."""
    for layer in _linears(module):
        nn.init.xavier_uniform_(layer.weight)
        if layer.bias is not None:
            layer.bias.zero_()


def linear_flops(module: nn.Module) -> int:
    """Forward FLOPs per example of every ``nn.Linear`` in ``module`` (2 per MAC)."""
    return sum(
        2 * m.in_features * m.out_features for m in module.modules() if isinstance(m, nn.Linear)
    )


class Backbone(nn.Module):
    """An interaction architecture. Subclasses take ``(num_dense, num_sparse, dim, options)``.

    ``forward(dense [B, Dd], embedded [B, F, D]) -> logits [B]``.
    """

    def flops_per_example(self) -> int:
        """Forward FLOPs per example (multiply and add counted as 2)."""
        raise NotImplementedError


class RecModel(nn.Module):
    """An embedding method feeding a backbone.

    ``forward(dense [B, Dd], sparse [B, F]) -> logits [B]``. ``payload``, when given, is
    what the pooled embeddings ``[B, F, D]`` pass through on their way to the backbone
    (the codec of an embedding all-to-all).
    """

    def __init__(
        self, embedding: EmbeddingMethod, backbone: Backbone, payload: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.embedding = embedding
        self.backbone = backbone
        self.payload = payload

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        pooled = self.embedding(sparse)
        if self.payload is not None:
            pooled = self.payload(pooled)
        return self.backbone(dense, pooled)

    def dense_parameters(self) -> list[nn.Parameter]:
        """Parameters a dense torch optimizer updates: all but fused and sparse ones."""
        skip = {id(p) for m in self.embedding.fused_modules() for p in m.parameters()}
        skip |= {id(p) for p in self.embedding.sparse_parameters()}
        return [p for p in self.parameters() if p.requires_grad and id(p) not in skip]

    def flops_per_example(self) -> int:
        return self.backbone.flops_per_example() + self.embedding.flops_per_example()


def training_flops(model: RecModel, examples: int) -> int:
    """Training FLOPs for ``examples`` examples: forward + backward = 3 x forward (the
    backward pass costs about two forwards: gradients of activations and of weights)."""
    return 3 * model.flops_per_example() * examples
