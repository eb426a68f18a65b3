"""``hash``: the hashing trick, ids modulo a smaller table per feature.

Also home of the pieces the compressed composed methods (hash, qr, mixed_dim) share:
:class:`DivModTransform`, whose physical table ``t`` reads
``(sparse[:, source[t]] // divisor[t]) % modulus[t]`` (identity, hashing-by-modulo,
quotient and remainder alike), and :class:`CountedComposedEmbedding`, which also counts
the combine's own tensors in ``memory()``.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from suite.embeddings.base import (
    ComposedEmbedding,
    EmbeddingBytes,
    EmbeddingContext,
    EmbeddingOptions,
    IndexTransform,
    StackCombine,
)
from suite.embeddings.budget import knob_hook
from suite.registry import EMBEDDINGS


class DivModTransform(IndexTransform):
    """``sparse [B, F] -> ids [B, T]`` with ``ids[:, t] = (sparse[:, src[t]] // div[t]) % mod[t]``.

    Args:
        sources: feature feeding each physical table, ``[T]``.
        divisors: integer divisor per table (1 for none), ``[T]``.
        moduli: modulus per table, ``[T]``; also the table's row count.
    """

    def __init__(self, sources: list[int], divisors: list[int], moduli: list[int]) -> None:
        super().__init__()
        if not (len(sources) == len(divisors) == len(moduli)) or not sources:
            raise ValueError("sources, divisors and moduli must be equal-length, non-empty lists")
        if min(divisors) < 1 or min(moduli) < 1:
            raise ValueError("divisors and moduli must be positive")
        self.moduli = list(moduli)
        self.register_buffer("source", torch.tensor(sources, dtype=torch.int64), persistent=False)
        self.register_buffer("divisor", torch.tensor(divisors, dtype=torch.int64), persistent=False)
        self.register_buffer("modulus", torch.tensor(moduli, dtype=torch.int64), persistent=False)
        self._plain = all(d == 1 for d in divisors)

    def table_rows(self) -> list[int]:
        return self.moduli

    def auxiliary_tensors(self) -> list[torch.Tensor]:
        return [self.source, self.divisor, self.modulus]

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        ids = sparse.index_select(1, self.source)
        if not self._plain:
            ids = torch.div(ids, self.divisor, rounding_mode="floor")
        return torch.remainder(ids, self.modulus)


class CountedComposedEmbedding(ComposedEmbedding):
    """A :class:`ComposedEmbedding` whose :meth:`storage_tensors` also lists the combine's
    tensors (learned parameters under ``parameters``, index buffers under ``auxiliary``)
    and whose :meth:`memory` is their summed ``nbytes`` (the tables' optimizer state, fused
    or torch, is among them: the tables own their optimizer).
    """

    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        tensors = super().storage_tensors()
        return {
            "parameters": [*tensors["parameters"], *self.combine.parameters()],
            "auxiliary": [*tensors["auxiliary"], *self.combine.buffers()],
            "optimizer": list(tensors["optimizer"]),
        }

    def memory(self) -> EmbeddingBytes:
        tensors = self.storage_tensors()
        total = {key: sum(t.nbytes for t in values) for key, values in tensors.items()}
        return EmbeddingBytes(total["parameters"], total["auxiliary"], total["optimizer"])


class HashOptions(EmbeddingOptions):
    """Hashing-trick table sizes."""

    ratio: float = Field(4.0, ge=1.0, description="compression ratio: rows = ceil(n / ratio)")
    rows: int | None = Field(
        None, ge=1, description="fixed table size per feature; overrides ratio when set"
    )
    threshold: int = Field(200, ge=0, description="features with n <= threshold stay full")


def hashed_rows(cardinalities: list[int], options: HashOptions) -> list[int]:
    """Rows of each feature's table: ``n`` when ``n <= threshold``, else ``min(n, rows)``
    with a fixed ``rows``, else ``ceil(n / ratio)``."""
    out = []
    for n in cardinalities:
        if n <= options.threshold:
            out.append(n)
        elif options.rows is not None:
            out.append(min(n, options.rows))
        else:
            out.append(max(1, min(n, math.ceil(n / options.ratio))))
    return out


@EMBEDDINGS.register("hash")
class HashEmbedding(CountedComposedEmbedding):
    """Hashing trick: id modulo a table of ceil(n / ratio) rows per large feature."""

    Options = HashOptions

    def __init__(self, options: HashOptions, context: EmbeddingContext) -> None:
        cards = context.cardinalities
        rows = hashed_rows(cards, options)
        transform = DivModTransform(list(range(len(cards))), [1] * len(cards), rows)
        transform = transform.to(context.device)
        super().__init__(
            transform,
            StackCombine(len(cards), options.dim),
            options.dim,
            context,
            backend=options.backend,
        )
        self.options = options

    # the hash ratio; features at or below the default threshold stay full (the floor)
    options_at_budget = knob_hook(
        "hash",
        lambda dim, r: {"dim": dim, "ratio": r},
        1.0,
        lambda c: float(max(c)),
        increasing=False,
    )
