"""``mixed_dim``: mixed-dimension embeddings (Ginart et al. 2019), alpha-power rule.

Each feature ``f`` is one block with a popularity ``p_f`` (expected accesses per row) and
gets a table of dim ``d_f = lambda * p_f ** alpha``: more popular blocks get more columns.
As in the DLRM reference's ``md_solver``, ``lambda`` gives the most popular block the base
dim ``D`` (``d = D * (p / p_max) ** alpha``), or, with ``param_budget``, the largest
``lambda`` whose tables fit the budget. A learned linear projection (no bias) lifts each
``d_f < D`` block back to ``D`` for the backbone.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn

from suite.embeddings.base import FBGEMM_DIM_MULTIPLE, Combine, EmbeddingContext, EmbeddingOptions
from suite.embeddings.hashing import (
    CountedComposedEmbedding,
    DivModTransform,
)
from suite.errors import ConfigError
from suite.registry import EMBEDDINGS


class MixedDimOptions(EmbeddingOptions):
    """Alpha-power rule settings; ``dim`` is the base (largest, common) dim."""

    alpha: float = Field(0.3, ge=0, description="temperature: 0 = uniform dims, larger = more skew")
    round_dims: bool = Field(False, description="round dims to powers of two")
    min_dim: int = Field(1, ge=1, description="smallest dim a block may get")
    param_budget: int | None = Field(
        None, ge=1, description="if set, scale dims so the tables hold at most this many floats"
    )

    @model_validator(mode="after")
    def _check_dims(self) -> MixedDimOptions:
        if self.min_dim > self.dim:
            raise ValueError(f"min_dim: must be <= dim ({self.dim}), got {self.min_dim}")
        return self


def feature_popularity(
    cardinalities: list[int], counts: list[np.ndarray] | None = None
) -> np.ndarray:
    """Popularity per feature: expected accesses per row of its table (float64 ``[F]``).

    With ``counts`` (id counts per feature on the training split) it is the feature's total
    accesses over the number of its ids the training split touches at least once: the
    reference's ``k / n`` with ``k`` measured and ``n`` restricted to rows that are ever
    trained. Without counts (or with none at all) it falls back to the reference's
    default ``1 / cardinality`` (``k = 1``).
    """
    cards = np.asarray(cardinalities, dtype=np.float64)
    if counts is None:
        return 1.0 / cards
    pop = np.array(
        [float(c.sum()) / max(1, int(np.count_nonzero(c))) for c in counts], dtype=np.float64
    )
    return pop if pop.max() > 0 else 1.0 / cards


def _finish(
    raw: np.ndarray, base_dim: int, min_dim: int, round_dims: bool, multiple: int
) -> np.ndarray:
    d = np.maximum(raw, 1.0)
    if round_dims:
        d = 2.0 ** np.round(np.log2(d))
    if multiple > 1:
        d = np.maximum(np.floor(d / multiple + 0.5) * multiple, multiple)
    else:
        d = np.round(d)
    low = max(min_dim, 1)
    if multiple > 1:
        low = -(-low // multiple) * multiple
    return np.clip(d, low, base_dim).astype(np.int64)


def alpha_power_dims(
    popularity: np.ndarray,
    alpha: float,
    base_dim: int,
    *,
    min_dim: int = 1,
    round_dims: bool = False,
    multiple: int = 1,
    rows: list[int] | None = None,
    param_budget: int | None = None,
) -> list[int]:
    """Dims by the alpha-power rule ``d = lambda * p ** alpha``.

    Without a budget ``lambda = base_dim / p_max ** alpha`` (the most popular block gets
    ``base_dim``). With ``param_budget`` (needs ``rows``) ``lambda`` is the largest value
    whose finished dims satisfy ``sum(rows * d) <= param_budget``. Finished dims are
    rounded (to powers of two with ``round_dims``), snapped to ``multiple`` and clipped to
    ``[min_dim, base_dim]``.
    """
    pop = np.asarray(popularity, dtype=np.float64)
    rel = (pop / pop.max()) ** alpha if pop.max() > 0 else np.ones_like(pop)
    if param_budget is None:
        return _finish(base_dim * rel, base_dim, min_dim, round_dims, multiple).tolist()
    if rows is None:
        raise ValueError("param_budget needs rows")
    n = np.asarray(rows, dtype=np.float64)

    def params(lamb: float) -> float:
        return float((n * _finish(lamb * rel, base_dim, min_dim, round_dims, multiple)).sum())

    if params(0.0) > param_budget:
        raise ConfigError(
            f"embedding.options.param_budget: {param_budget} floats cannot hold the tables even at "
            f"their smallest dims ({int(params(0.0))} floats needed)"
        )
    lo, hi = 0.0, 2.0 * base_dim / max(float(rel[rel > 0].min(initial=1.0)), 1e-12)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if params(mid) <= param_budget else (lo, mid)
    return _finish(lo * rel, base_dim, min_dim, round_dims, multiple).tolist()


class ProjectionCombine(Combine):
    """Per-feature tables of dims ``d_f`` -> ``[B, F, D]`` through a learned ``d_f x D``
    projection for every ``d_f < D`` (none when equal).

    The physical tables come in ``order`` (features sorted by dim, largest first), so each
    group of equal dims is one contiguous slice of the looked-up rows and one batched
    matmul; ``forward`` puts the features back in their own order.
    """

    def __init__(self, dims: list[int], order: list[int], dim: int, seed: int = 0) -> None:
        super().__init__()
        self.dims, self.order, self.dim = list(dims), list(order), dim
        sorted_dims = [dims[f] for f in order]
        self.groups: list[tuple[int, int, int]] = []  # (first column, features, dim)
        col, i = 0, 0
        while i < len(sorted_dims):
            j = i
            while j < len(sorted_dims) and sorted_dims[j] == sorted_dims[i]:
                j += 1
            self.groups.append((col, j - i, sorted_dims[i]))
            col += (j - i) * sorted_dims[i]
            i = j
        generator = torch.Generator().manual_seed(seed + 7919)
        self.projections = nn.ParameterList()
        for _, count, d in self.groups:
            if d != dim:
                bound = (6.0 / (d + dim)) ** 0.5  # Xavier-uniform, as the reference
                weight = (torch.rand(count, d, dim, generator=generator) * 2 - 1) * bound
                self.projections.append(nn.Parameter(weight))
        inverse = [0] * len(order)
        for position, f in enumerate(order):
            inverse[f] = position
        self.register_buffer("inverse", torch.tensor(inverse), persistent=False)

    def table_dims(self) -> list[int]:
        return [self.dims[f] for f in self.order]

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        batch = rows.shape[0]
        pieces, p = [], 0
        for col, count, d in self.groups:
            x = rows[:, col : col + count * d].reshape(batch, count, d)
            if d != self.dim:
                x = torch.bmm(x.transpose(0, 1), self.projections[p]).transpose(0, 1)
                p += 1
            pieces.append(x)
        out = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)
        return out.index_select(1, self.inverse)

    def flops_per_example(self) -> int:
        return sum(2 * d * self.dim for d in self.dims if d != self.dim)


@EMBEDDINGS.register("mixed_dim")
class MixedDimEmbedding(CountedComposedEmbedding):
    """Mixed-dimension embeddings: alpha-power dims by popularity, projected to the base dim.

    Popularity comes from ``context.feature_counts()`` (id counts on the training split:
    accesses per touched row, see :func:`feature_popularity`); when the context has no
    counts it is ``1 / cardinality``, the reference's default. Dims are rounded to whole
    numbers (powers of two with ``round_dims``), and with the fbgemm backend snapped to
    multiples of 4 (the kernel's requirement), then clipped to ``[min_dim, dim]``.
    ``param_budget`` counts table floats only, like the reference's ``B``. The projections
    are dense parameters (the dense optimizer updates them); :meth:`memory` counts them
    under parameters, their optimizer state belongs to the dense optimizer.
    """

    Options = MixedDimOptions

    def __init__(self, options: MixedDimOptions, context: EmbeddingContext) -> None:
        cards = context.cardinalities
        counts = context.feature_counts() if context.feature_counts is not None else None
        popularity = feature_popularity(cards, counts)
        dims = alpha_power_dims(
            popularity,
            options.alpha,
            options.dim,
            min_dim=options.min_dim,
            round_dims=options.round_dims,
            multiple=FBGEMM_DIM_MULTIPLE if options.backend == "fbgemm" else 1,
            rows=cards,
            param_budget=options.param_budget,
        )
        order = sorted(range(len(cards)), key=lambda f: -dims[f])
        transform = DivModTransform(order, [1] * len(order), [cards[f] for f in order])
        combine = ProjectionCombine(dims, order, options.dim, seed=context.seed)
        super().__init__(
            transform.to(context.device),
            combine.to(context.device),
            options.dim,
            context,
            backend=options.backend,
        )
        self.options = options
        self.popularity = popularity
        self.dims = dims
