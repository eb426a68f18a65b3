"""``mixed_dim``: mixed-dimension embeddings (Ginart et al. 2019), alpha-power rule.

The embedding is split into blocks, one per feature table as in the DLRM reference, and
block ``f`` gets dim ``d_f = lambda * p_f ** alpha`` for its popularity ``p_f = k_f / n_f``
(``k_f`` queries per example of its ``n_f`` rows): the more often a row is read, the more
columns it gets. Dims follow the reference's ``md_solver`` (``tricks/md_embedding_bag.py``)
step by step:

1. blocks sorted by ``n / k`` (most popular first); ``lambda = d0 * (n/k)_min ** alpha``,
   so the most popular block gets the base dim ``d0`` exactly;
2. every other block gets ``max(1, lambda * (n/k) ** -alpha)``, rounded to the nearest
   integer (half to even, as ``torch.round``);
3. with ``round_dims`` each dim is rounded to the nearest power of two
   (``2 ** round(log2 d)``);
4. blocks with ``n <= threshold`` rows keep the base dim (``create_emb`` in
   ``dlrm_s_pytorch.py`` builds them as plain tables of the base dim).

The reference's default popularity is by table size (``k = 1`` for every table, so
``p = 1/n``; ``popularity: rows``); ``popularity: counts`` measures ``n`` (ids seen) and
``k`` (reads per example) on the training split. A learned linear projection (no bias,
Xavier-uniform as the reference's ``PrEmbeddingBag``) lifts each ``d_f < d0`` block back
to ``d0`` for the backbone.

With the fbgemm backend, tables whose dim the kernel cannot take (not a multiple of 4,
e.g. the dims 1-2 the rule gives large tables) are plain ``torch.nn.EmbeddingBag``
tables updated by the matching row-wise Adagrad; they are never widened.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn

from suite.embeddings.base import FBGEMM_DIM_MULTIPLE, Combine, EmbeddingContext, EmbeddingOptions
from suite.embeddings.budget import knob_hook
from suite.embeddings.hashing import CountedComposedEmbedding, DivModTransform
from suite.errors import ConfigError
from suite.registry import EMBEDDINGS

Popularity = Literal["rows", "counts"]


class MixedDimOptions(EmbeddingOptions):
    """Alpha-power rule settings (defaults as the DLRM reference's ``--md-*`` flags);
    ``dim`` is the base dim ``d0`` (the largest, and the one the backbone sees)."""

    alpha: float = Field(0.3, ge=0, description="temperature: 0 = uniform dims, larger = more skew")
    round_dims: bool = Field(False, description="round dims to the nearest power of two")
    threshold: int = Field(200, ge=0, description="features with n <= threshold keep dim d0")
    popularity: Popularity = Field(
        "rows", description="rows: p = 1/n (the reference); counts: measured on the train split"
    )
    min_dim: int = Field(1, ge=1, description="smallest dim a block may get")
    param_budget: int | None = Field(
        None, ge=1, description="if set, scale dims so the tables hold at most this many floats"
    )

    @model_validator(mode="after")
    def _check_dims(self) -> MixedDimOptions:
        if self.min_dim > self.dim:
            raise ValueError(f"min_dim: must be <= dim ({self.dim}), got {self.min_dim}")
        return self


def rows_per_query(cardinalities: list[int], counts: list[np.ndarray] | None = None) -> np.ndarray:
    """``n / k`` per feature (float64 ``[F]``): the inverse popularity of its block.

    Without ``counts`` it is the reference's default ``n`` (``k = 1``). With ``counts``
    (reads of every id per feature on the training split) ``n`` is the number of ids read
    at least once and ``k`` the feature's reads per example (reads over the largest
    feature's reads, which is the example count for one-hot features).
    """
    cards = np.asarray(cardinalities, dtype=np.float64)
    if counts is None:
        return cards
    reads = np.array([float(c.sum()) for c in counts], dtype=np.float64)
    if reads.max() <= 0:
        return cards
    seen = np.array([max(1, int(np.count_nonzero(c))) for c in counts], dtype=np.float64)
    k = np.maximum(reads, 1.0) / reads.max()
    return seen / k


def _finish(
    raw: np.ndarray,
    rows: np.ndarray,
    base_dim: int,
    *,
    threshold: int,
    round_dims: bool,
    min_dim: int,
) -> np.ndarray:
    """Steps 2-4 of the rule on raw dims, then clipped to ``[min_dim, base_dim]``."""
    d = np.round(np.maximum(raw, 1.0))  # half to even, as torch.round
    if round_dims:
        d = 2.0 ** np.round(np.log2(d))
    d = np.where(rows <= threshold, float(base_dim), d)
    return np.clip(d, min_dim, base_dim).astype(np.int64)


def md_dims(
    rows: list[int],
    alpha: float,
    base_dim: int,
    *,
    threshold: int = 200,
    round_dims: bool = False,
    min_dim: int = 1,
    rows_per_query: np.ndarray | None = None,
    param_budget: int | None = None,
) -> list[int]:
    """Per-feature dims by the reference's ``md_solver`` (module docstring, steps 1-4).

    Args:
        rows: table rows ``n`` per feature, ``[F]``.
        alpha: temperature; 0 gives every block ``base_dim``.
        base_dim: ``d0``, the most popular block's dim and the cap of every dim.
        threshold: blocks with ``n <= threshold`` keep ``base_dim``.
        round_dims: round to powers of two.
        min_dim: floor of every dim (the reference's is 1).
        rows_per_query: ``n / k`` per feature (default ``rows``: ``k = 1``).
        param_budget: instead of anchoring ``lambda`` on ``d0``, the largest ``lambda``
            whose finished tables hold at most this many floats (the reference's ``B``
            solves ``sum(n * d) = B`` before rounding; this keeps the finished dims in it).

    Dims above ``base_dim`` (only possible with ``round_dims`` and a ``d0`` that is not a
    power of two, which the reference's ``PrEmbeddingBag`` refuses) are capped at it.
    """
    n = np.asarray(rows, dtype=np.float64)
    ratio = n if rows_per_query is None else np.asarray(rows_per_query, dtype=np.float64)
    finish = partial(_finish, threshold=threshold, round_dims=round_dims, min_dim=min_dim)
    scale = ratio ** (-alpha)
    if param_budget is None:
        top = int(np.argmin(ratio))
        raw = base_dim * ratio[top] ** alpha * scale
        raw[top] = base_dim
        return finish(raw, n, base_dim).tolist()

    def floats(lamb: float) -> float:
        return float((n * finish(lamb * scale, n, base_dim)).sum())

    if floats(0.0) > param_budget:
        raise ConfigError(
            f"embedding.options.param_budget: {param_budget} floats cannot hold the tables even at "
            f"their smallest dims ({int(floats(0.0))} floats needed)"
        )
    lo, hi = 0.0, 2.0 * base_dim / float(scale.min())
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if floats(mid) <= param_budget else (lo, mid)
    return finish(lo * scale, n, base_dim).tolist()


class ProjectionCombine(Combine):
    """Per-feature tables of dims ``d_f`` -> ``[B, F, D]`` through a learned ``d_f x D``
    projection for every ``d_f < D`` (none when equal).

    The physical tables come in ``order`` (features grouped by dim), so each group of
    equal dims is one contiguous slice of the looked-up rows and one batched matmul;
    ``forward`` puts the features back in their own order.
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

    Tables are ordered by dim (the fbgemm kernel's tables first), and a dim the kernel
    cannot take puts its table on the torch path (see the module docstring). Tables start
    uniform in ``±sqrt(1/n)`` and projections Xavier-uniform, as the reference's
    ``create_emb``/``PrEmbeddingBag`` (``init: torch`` is the same scheme).
    ``param_budget`` counts table floats only, like the reference's ``B``. The projections
    are dense parameters (the dense optimizer updates them); :meth:`memory` counts them
    under parameters, their optimizer state belongs to the dense optimizer.
    """

    Options = MixedDimOptions

    def __init__(self, options: MixedDimOptions, context: EmbeddingContext) -> None:
        cards = context.cardinalities
        counts = None
        if options.popularity == "counts" and context.feature_counts is not None:
            counts = context.feature_counts()
        ratio = rows_per_query(cards, counts)
        dims = md_dims(
            cards,
            options.alpha,
            options.dim,
            threshold=options.threshold,
            round_dims=options.round_dims,
            min_dim=options.min_dim,
            rows_per_query=ratio,
            param_budget=options.param_budget,
        )
        on_kernel = options.backend == "fbgemm"
        order = sorted(
            range(len(cards)),
            key=lambda f: (on_kernel and dims[f] % FBGEMM_DIM_MULTIPLE != 0, -dims[f]),
        )
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
        self.cardinalities = list(cards)
        self.rows_per_query = ratio
        self.dims = dims

    def layout(self) -> dict[str, Any]:
        """The physical tables, plus every feature's rows, dim and backend."""
        backend_of = self.tables.table_backends()
        position = {f: t for t, f in enumerate(self.combine.order)}
        return {
            **super().layout(),
            "feature_rows": list(self.cardinalities),
            "feature_dims": list(self.dims),
            "feature_backends": [backend_of[position[f]] for f in range(len(self.dims))],
        }

    # the temperature alpha (popularity rows, as the reference); row-wise state keeps one
    # float a row whatever its dim, and features at or below the threshold keep d0
    options_at_budget = knob_hook(
        "mixed_dim",
        lambda dim, a: {"dim": dim, "alpha": a},
        0.0,
        4.0,
        increasing=False,
    )
