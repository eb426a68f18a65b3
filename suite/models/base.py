"""Backbone interface, MLP helper, layer-spec parsing, and the composed model."""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import torch
from pydantic import BeforeValidator
from torch import nn

from suite.embeddings.base import EmbeddingMethod

if TYPE_CHECKING:
    import numpy as np


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


def mlp(sizes: list[int], final_activation: bool, dropout: float = 0.0) -> nn.Sequential:
    """Linear layers ``sizes[0] -> sizes[1] -> ...`` with ReLU between (and after the last
    one when ``final_activation``); with ``dropout`` > 0, dropout after each hidden layer's
    ReLU (not after the last layer: FuxiCTR's ``MLP_Block``). Without dropout the layers
    and their state-dict keys are those of an MLP before the option."""
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(fan_in, fan_out))
        hidden = i < len(sizes) - 2
        if final_activation or hidden:
            layers.append(nn.ReLU())
        if hidden and dropout > 0:
            layers.append(nn.Dropout(dropout))
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


class Ranks(Protocol):
    """The processes a model's state is spread over, and their collectives: the training
    loop and the tasks go through these, never asking whether a run is distributed.
    :class:`OneProcess` for a model in one process; a sharded model's are
    :class:`suite.engine.parallel.Parallel`."""

    rank: int
    world: int

    @property
    def leader(self) -> bool:
        """Rank 0: the one that shows progress and writes the run's record."""
        ...

    @property
    def distributed(self) -> bool:
        """Whether the ranks are processes of a ``torch.distributed`` job."""
        ...

    @property
    def part(self) -> tuple[int, int] | None:
        """``(rank, world)`` for :class:`~suite.data.loader.BatchLoader` to read this
        rank's part of each global batch; ``None``: the whole batch."""
        ...

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over the ranks."""
        ...

    def min(self, value: int) -> int:
        """The smallest of the ranks' ``value``."""
        ...

    def gather_parts(self, local: np.ndarray, n: int, batch: int) -> np.ndarray:
        """The ``[n]`` values of a split read in global batches of ``batch`` rows, from
        each rank's ``local`` values of its parts, on every rank."""
        ...

    def barrier(self) -> None:
        """Wait for every rank."""
        ...

    def environment(self) -> dict[str, int]:
        """What a run records of its ranks (``world_size``; nothing for one process)."""
        ...


class OneProcess:
    """The ranks of a model in one process: rank 0 of 1, its collectives the identity."""

    rank = 0
    world = 1
    leader = True
    distributed = False
    part = None

    def sum(self, values: list[float]) -> list[float]:
        return list(values)

    def min(self, value: int) -> int:
        return value

    def gather_parts(self, local: np.ndarray, n: int, batch: int) -> np.ndarray:
        return local

    def barrier(self) -> None:
        return None

    def environment(self) -> dict[str, int]:
        return {}


ONE_PROCESS = OneProcess()


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

    def forward_embedded(
        self, dense: torch.Tensor, sparse: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward`'s logits ``[B]`` and the embeddings ``[B, F, D]`` it looked up
        (before the payload codec), for a regulariser on them (``train.embedding_l2``)."""
        embedded = self.embedding(sparse)
        pooled = embedded if self.payload is None else self.payload(embedded)
        return self.backbone(dense, pooled), embedded

    def net_parameters(self) -> list[nn.Parameter]:
        """The backbone's dense parameters: those ``train.weight_decay`` applies to (the
        embedding method's own are regularised through its lookups: ``embedding_l2``)."""
        backbone = {id(p) for p in self.backbone.parameters()}
        return [p for p in self.dense_parameters() if id(p) in backbone]

    def dense_parameters(self) -> list[nn.Parameter]:
        """Parameters a dense torch optimizer updates: all but fused and sparse ones."""
        skip = {id(p) for m in self.embedding.fused_modules() for p in m.parameters()}
        skip |= {id(p) for p in self.embedding.sparse_parameters()}
        return [p for p in self.parameters() if p.requires_grad and id(p) not in skip]

    def flops_per_example(self) -> int:
        return self.backbone.flops_per_example() + self.embedding.flops_per_example()

    # -- where the model's state lives: one process here; a sharded model overrides these

    @property
    def ranks(self) -> Ranks:
        """The processes the model's state is spread over (:data:`ONE_PROCESS` here)."""
        return ONE_PROCESS

    def local_state(self) -> dict[str, torch.Tensor]:
        """This rank's state: the whole ``state_dict`` in one process."""
        return self.state_dict()

    def snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of :meth:`local_state` (``checkpoint: best``), for :meth:`restore`."""
        return copy.deepcopy(self.state_dict())

    def restore(self, saved: dict[str, torch.Tensor]) -> None:
        """Put back what :meth:`snapshot` took."""
        self.load_state_dict(saved)

    def dense_checkpoint_state(self) -> dict[str, torch.Tensor]:
        """The state but the embedding's (whose is the embedding's ``checkpoint_state``),
        by name."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("embedding.")}

    def load_dense_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Load :meth:`dense_checkpoint_state`'s tensors back; ``ValueError`` naming what
        does not fit this model."""
        missing, unexpected = self.load_state_dict(tensors, strict=False)
        dense_missing = [k for k in missing if not k.startswith("embedding.")]
        if unexpected or dense_missing:
            raise ValueError(
                f"does not fit this model (missing {dense_missing[:3]}, "
                f"unexpected {unexpected[:3]})"
            )

    def wire_figures(self) -> dict[str, float]:
        """Figures of the embeddings' all-to-all on the wire (none in one process)."""
        return {}

    def plan(self) -> dict[str, Any] | None:
        """Where the tables live over the ranks (``None``: all here, in one process)."""
        return None

    def placement(self) -> dict[str, Any]:
        """A run's details of where the model lives: ``world_size`` and
        ``sharding_plan`` of a sharded model, nothing in one process."""
        return {}

    def whole_module(self) -> nn.Module | None:
        """The model as one module to save and serve (``None`` where no process holds
        all of it: a sharded model)."""
        return self


def training_flops(model: RecModel, examples: int) -> int:
    """Training FLOPs for ``examples`` examples: forward + backward = 3 x forward (the
    backward pass costs about two forwards: gradients of activations and of weights)."""
    return 3 * model.flops_per_example() * examples
