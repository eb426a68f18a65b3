"""``robe``: Random Offset Block Embedding (ROBE-Z; Desai, Chou and Shrivastava, MLSys 2022,
arXiv 2108.02191; the authors' code: github.com/apd10/dlrm with the kernels of
github.com/apd10/universal_memory_allocation).

Every table shares ONE learnable array ``M`` of ``|M|`` floats; nothing else is stored per
id. Value ``i`` of the ``D``-dim embedding of id ``x`` of feature ``t`` is read as

    ``M[(h(key, i // Z) + i mod Z) mod |M|]``,  ``key = offset_t + x``,

so an embedding is ``ceil(D / Z)`` blocks of ``Z`` consecutive array values, each block at a
hashed offset, the array read as a circle (a block that runs past the end wraps to its
start). ``h`` is the universal hash the authors' kernel uses,
``h(key, j) = ((A * key + B * j + C) mod P) mod |M|`` with the prime ``P = 2038074743`` and
``A, B, C`` drawn from ``seed``; like their ``val_offset``, ``offset_t`` (the sum of the
earlier features' cardinalities) makes the key of every (feature, id) pair distinct.

Where the authors' code and the paper differ, the paper is followed: their kernel reads a
block at ``h mod (|M| - Z + 1)`` so that it never wraps; here the array is circular, as in
the paper's definition.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import Field, model_validator

from suite.embeddings.base import (
    EmbeddingContext,
    EmbeddingOptions,
    SelfUpdating,
)
from suite.embeddings.budget import knob_hook
from suite.embeddings.tables import ADAGRAD_EPS
from suite.registry import EMBEDDINGS

ROBE_PRIME = 2_038_074_743
"""``P``: the prime of the authors' hash (``random_numbers[0]`` in their code)."""


class RobeOptions(EmbeddingOptions):
    """Array size, block size and hash seed. ``backend`` is not used: ROBE owns its array.
    ``init`` (``reference`` and ``torch`` alike): the array starts uniform in
    ``±sqrt(1/n_max)``, ``n_max`` the largest feature's cardinality, as the authors'
    ``create_emb`` draws it."""

    size: float = Field(
        0.25,
        gt=0,
        le=1,
        description="array size |M| as a fraction of the full tables' parameters "
        "(sum of cardinalities x dim), rounded up; the same budget unit as fiited's",
    )
    block: int = Field(
        4,
        ge=1,
        description="Z: consecutive array values per hashed block (1: ROBE-1, every value "
        "hashed; the paper's Criteo-TB runs use Z=32 at dim 128, i.e. 4 blocks a vector, "
        "which Z=4 keeps at the default dim 16)",
    )
    seed: int | None = Field(
        None, ge=0, description="seed of the hash coefficients A, B, C (default: the run's seed)"
    )

    fbgemm_dim_rule = False  # ROBE's array has no fbgemm dim constraint

    @model_validator(mode="after")
    def _check_block(self) -> RobeOptions:
        if self.block > self.dim:
            raise ValueError(f"block: must be <= dim ({self.dim}), got {self.block}")
        return self


def robe_array_size(cardinalities: list[int], dim: int, options: RobeOptions) -> int:
    """``|M| = ceil(size * sum(n) * dim)``, at least one block."""
    return max(options.block, math.ceil(options.size * sum(cardinalities) * dim))


def robe_coefficients(seed: int) -> torch.Tensor:
    """``[A, B, C, P]`` int64: ``A`` in ``[1, P)``, ``B`` and ``C`` in ``[0, P)``."""
    generator = torch.Generator().manual_seed(seed)
    a = torch.randint(1, ROBE_PRIME, (1,), generator=generator)
    bc = torch.randint(0, ROBE_PRIME, (2,), generator=generator)
    return torch.cat([a, bc, torch.tensor([ROBE_PRIME])]).to(torch.int64)


def robe_slots(
    keys: torch.Tensor, dim: int, block: int, size: int, coefficients: torch.Tensor
) -> torch.Tensor:
    """Array slots read by the embeddings of ``keys [...]``: ``[..., dim]`` int64 with
    ``slot[..., i] = (h(key, i // Z) + i mod Z) mod size``."""
    a, b, c, p = coefficients.tolist()
    i = torch.arange(dim, device=keys.device)
    j, r = i // block, i % block
    hashed = (a * (keys.long() % p)).unsqueeze(-1) + b * j + c
    return (hashed % p % size + r) % size


@EMBEDDINGS.register("robe")
class RobeEmbedding(SelfUpdating):
    """ROBE-Z (Desai et al., MLSys 2022, https://arxiv.org/abs/2108.02191): one shared
    array, every embedding read as blocks of Z values at hashed offsets.

    Training, as FIITED's store is trained: the forward's output is a leaf tensor while
    training; :meth:`after_step` sums its gradient into the array slots read and applies the
    run's sparse optimizer there. ``sgd`` and ``adagrad`` (one accumulator per array value)
    update exactly as the authors' dense SGD/Adagrad on the array would (a value no lookup
    read has a zero gradient and keeps its value and state). The array has no rows, so
    ``rowwise_adagrad`` (ours) keeps one accumulator per aligned run of ``Z`` array values
    (``ceil(|M|/Z)`` of them), fed the mean squared gradient over that run.

    Memory: ``parameters`` = the array ``[|M|]``; ``auxiliary`` = the feature offsets
    ``[F]`` and the hash coefficients ``[4]``; ``optimizer`` = the accumulators. No row
    groups: a checkpoint writes the array whole.
    """

    Options = RobeOptions

    def __init__(self, options: RobeOptions, context: EmbeddingContext) -> None:
        super().__init__()
        self.options = options
        self.dim, self.block = options.dim, options.block
        self.cardinalities = list(context.cardinalities)
        self.size = robe_array_size(self.cardinalities, options.dim, options)
        self.optimizer_name = context.sparse_optimizer
        self.learning_rate = context.sparse_lr
        device = context.device
        seed = context.seed if options.seed is None else options.seed
        offsets = [0]
        for n in self.cardinalities[:-1]:
            offsets.append(offsets[-1] + n)
        bound = math.sqrt(1.0 / max(self.cardinalities))
        generator = torch.Generator().manual_seed(context.seed)
        array = (torch.rand(self.size, generator=generator) * 2 - 1) * bound
        self.register_buffer("offsets", torch.tensor(offsets, dtype=torch.int64, device=device))
        self.register_buffer("coefficients", robe_coefficients(seed).to(device))
        self.register_buffer("array", array.to(device))
        self.register_buffer("opt_state", torch.zeros(self._state_size(), device=device))

    def _state_size(self) -> int:
        return {
            "rowwise_adagrad": math.ceil(self.size / self.block),
            "adagrad": self.size,
            "sgd": 0,
        }[self.optimizer_name]

    # ----------------------------------------------------------------- storage
    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        return {
            "parameters": [self.array],
            "auxiliary": [self.offsets, self.coefficients],
            "optimizer": [self.opt_state],
        }

    def layout(self) -> dict[str, Any]:
        """Array size, block size and the hash coefficients."""
        return {"array_size": self.size, "block": self.block, "hash": self.coefficients.tolist()}

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """The array, its optimizer state, the offsets and hash coefficients."""
        return {k: v.detach() for k, v in self.state_dict().items()}

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        device = self.array.device
        self.load_state_dict({k: v.to(device) for k, v in tensors.items()})
        self.drop_kept()

    # ----------------------------------------------------------------- lookup
    def slots(self, sparse: torch.Tensor) -> torch.Tensor:
        """``sparse [B, F] -> [B, F, D]``: the array slot of every embedding value."""
        keys = sparse + self.offsets
        return robe_slots(keys, self.dim, self.block, self.size, self.coefficients)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        slots = self.slots(sparse)
        out = self.array[slots]  # [B, F, D]
        return self.keep_for_update(out, slots)

    # ----------------------------------------------------------------- training
    @torch.no_grad()
    def update_read(self, slots: torch.Tensor, grad: torch.Tensor) -> None:
        """The sparse optimizer on the slots read: ``slots``, ``grad`` ``[B, F, D]``."""
        unique, inverse = torch.unique(slots.reshape(-1), return_inverse=True)
        summed = grad.new_zeros(len(unique)).index_add_(0, inverse, grad.reshape(-1))
        lr = self.learning_rate
        if self.optimizer_name == "sgd":
            self.array.index_add_(0, unique, summed * -lr)
            return
        if self.optimizer_name == "adagrad":
            self.opt_state.index_add_(0, unique, summed.pow(2))
            scale = self.opt_state[unique].sqrt().add_(ADAGRAD_EPS)
            self.array.index_add_(0, unique, summed * -lr / scale)
            return
        runs, run_of = torch.unique(unique // self.block, return_inverse=True)
        lengths = (self.size - runs * self.block).clamp(max=self.block)
        squares = summed.new_zeros(len(runs)).index_add_(0, run_of, summed.pow(2))
        self.opt_state.index_add_(0, runs, squares / lengths)
        scale = self.opt_state[runs].sqrt().add_(ADAGRAD_EPS)
        self.array.index_add_(0, unique, summed * -lr / scale[run_of])

    # the array size |M| (array, its row-wise state and the hash coefficients)
    options_at_budget = knob_hook("robe", lambda dim, m: {"dim": dim, "size": m}, 1e-6, 1.0)
