"""``qr``: compositional embeddings via complementary partitions (Shi et al. 2019).

A feature with ``n > threshold`` ids gets a quotient table of ``ceil(n / c)`` rows (read at
``id // c``) and a remainder table of ``c`` rows (read at ``id % c``), ``c`` = collisions.
The two partitions are complementary: no two ids share both their quotient and their
remainder, so every id keeps a distinct pair of rows. The pair is combined by an
element-wise product (``mult``, the reference default), a sum (``add``) or by
concatenating a ``ceil(D/2)``-dim quotient half with a ``floor(D/2)``-dim remainder half
(``concat``). Features with ``n <= threshold`` keep one full table.

With ``init: reference`` the tables start as the reference's ``QREmbeddingBag`` draws
them (:func:`qr_reference_bounds`); ``init: torch`` draws every table uniform in
``±sqrt(1/rows)`` of its own rows.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field, model_validator

from suite.embeddings.base import Combine, EmbeddingContext, EmbeddingOptions
from suite.embeddings.budget import knob_hook
from suite.embeddings.hashing import CountedComposedEmbedding, DivModTransform
from suite.registry import EMBEDDINGS

Operation = Literal["mult", "add", "concat"]


class QROptions(EmbeddingOptions):
    """Quotient-remainder settings (defaults as the DLRM reference's ``--qr-*`` flags)."""

    collisions: int = Field(4, ge=1, description="c: ids sharing one quotient row")
    operation: Operation = Field("mult", description="how the two rows are combined")
    threshold: int = Field(200, ge=0, description="features with n <= threshold stay full")

    @model_validator(mode="after")
    def _check_dims(self) -> QROptions:
        if self.operation == "concat":
            if self.dim < 2:
                raise ValueError("dim: concat needs dim >= 2 (it splits dim in two halves)")
            for half in qr_dims(self.dim, "concat"):
                if self.backend == "fbgemm" and half % 4:
                    raise ValueError(
                        f"dim: concat on the fbgemm backend needs both halves of dim to be "
                        f"multiples of 4 (dim divisible by 8), got {self.dim} (or use backend: torch)"
                    )
        return self


def qr_dims(dim: int, operation: Operation) -> tuple[int, int]:
    """Dims of the quotient and remainder tables."""
    if operation == "concat":
        return math.ceil(dim / 2), dim // 2
    return dim, dim


def qr_reference_bounds(cardinalities: list[int], pairs: list[bool]) -> list[tuple[float, float]]:
    """Uniform init bounds of each physical table as the DLRM reference draws them.

    ``QREmbeddingBag.reset_parameters`` calls ``nn.init.uniform_(w, sqrt(1/n))``, whose
    second argument is the *lower* bound: both the quotient and the remainder table of a
    feature with ``n`` ids start uniform in ``[sqrt(1/n), 1)`` (all positive). Features at
    or below the threshold are plain tables, uniform in ``±sqrt(1/n)`` (``create_emb``).
    """
    bounds: list[tuple[float, float]] = []
    for n, pair in zip(cardinalities, pairs, strict=True):
        low = math.sqrt(1.0 / n)
        bounds.extend([(low, 1.0), (low, 1.0)] if pair else [(-low, low)])
    return bounds


class QRCombine(Combine):
    """Rows of per-feature tables (one table, or a quotient then a remainder table) ->
    ``[B, F, D]``.

    For ``concat`` the quotient and remainder halves of a feature are adjacent columns, so
    the combine is a view. For ``mult``/``add`` the looked-up rows are ``[B, T, D]``; each
    feature reads its first table and (for QR features) its second.
    """

    def __init__(self, pairs: list[bool], dim: int, operation: Operation) -> None:
        super().__init__()
        self.pairs, self.dim, self.operation = list(pairs), dim, operation
        first, second, t = [], [], 0
        for pair in pairs:
            first.append(t)
            second.append(t + 1 if pair else t)
            t += 2 if pair else 1
        self.num_tables = t
        self.register_buffer("first", torch.tensor(first), persistent=False)
        self.register_buffer("second", torch.tensor(second), persistent=False)
        self.register_buffer("is_pair", torch.tensor(pairs).view(1, -1, 1), persistent=False)

    def table_dims(self) -> list[int]:
        q, r = qr_dims(self.dim, self.operation)
        dims: list[int] = []
        for pair in self.pairs:
            dims.extend([q, r] if pair else [self.dim])
        return dims

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        batch = rows.shape[0]
        if self.operation == "concat":
            return rows.view(batch, len(self.pairs), self.dim)
        tables = rows.view(batch, self.num_tables, self.dim)
        a = tables.index_select(1, self.first)
        b = tables.index_select(1, self.second)
        both = a * b if self.operation == "mult" else a + b
        return torch.where(self.is_pair, both, a)

    def flops_per_example(self) -> int:
        if self.operation == "concat":
            return 0
        return self.dim * sum(self.pairs)


@EMBEDDINGS.register("qr")
class QREmbedding(CountedComposedEmbedding):
    """Quotient-remainder compositional embeddings: two small tables per large feature."""

    Options = QROptions

    def __init__(self, options: QROptions, context: EmbeddingContext) -> None:
        c = options.collisions
        sources, divisors, moduli, pairs = [], [], [], []
        for f, n in enumerate(context.cardinalities):
            if n > options.threshold:
                sources += [f, f]
                divisors += [c, 1]
                moduli += [max(1, math.ceil(n / c)), c]
                pairs.append(True)
            else:
                sources.append(f)
                divisors.append(1)
                moduli.append(n)
                pairs.append(False)
        transform = DivModTransform(sources, divisors, moduli).to(context.device)
        combine = QRCombine(pairs, options.dim, options.operation).to(context.device)
        bounds = None
        if options.init == "reference":
            bounds = qr_reference_bounds(context.cardinalities, pairs)
        super().__init__(
            transform,
            combine,
            options.dim,
            context,
            backend=options.backend,
            init_bounds=bounds,
        )
        self.options = options

    # the collisions c (ids sharing a quotient row): bytes fall until c ~ sqrt(n), where
    # the remainder tables (c rows) take over; small features stay full (the floor)
    options_at_budget = knob_hook(
        "qr",
        lambda dim, c: {"dim": dim, "collisions": int(c)},
        1,
        lambda cards: math.isqrt(max(cards)) + 1,
        increasing=False,
        integer=True,
    )
