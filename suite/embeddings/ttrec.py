"""``ttrec``: Tensor-Train embeddings (Yin, Acun, Wu and Liu, "TT-Rec: Tensor Train
Compression for Deep Learning Recommendation Model Embeddings", MLSys 2021, arXiv
2101.11714; the authors' code: github.com/facebookresearch/FBTT-Embedding).

A table of ``n`` rows x ``D`` dims is the matricized tensor train of three cores

    ``G1 [1, n1, d1, R]``, ``G2 [R, n2, d2, R]``, ``G3 [R, n3, d3, 1]``,

``n1 n2 n3 >= n`` (padded) and ``d1 d2 d3 = D``. Row ``i`` has the mixed-radix digits
``i1 = i // (n2 n3)``, ``i2 = (i // n3) mod n2``, ``i3 = i mod n3``, and value
``a d2 d3 + b d3 + c`` of its embedding is

    ``sum_{r, s} G1[0, i1, a, r] G2[r, i2, b, s] G3[s, i3, c, 0]``,

computed, as FBTT's kernel does, as two batched matrix products (``G1[i1] @ G2[i2]``, then
``@ G3[i3]``). Features with ``n <= threshold`` rows keep a full table (the paper compresses
only the large tables).

**Factorization** (FBTT's ``suggested_tt_shapes``, reimplemented): the prime factors of
``m``, padded with 1s to three, are split into three groups in every way; the products of
the groups with the highest entropy (as a distribution, ``-sum p ln p`` with ``p = f /
sum f``: the most nearly equal factors) win, in ascending order (ties: the first ascending
tuple). With ``round_up`` the rows ``n`` are first rounded up to a multiple of ``10^k``,
``k`` in ``0 .. digits(n) - 1``, taking the smallest ``k`` whose factors have the highest
entropy (``n = 997``, a prime, becomes ``1000 = 10 x 10 x 10``). ``D`` is factored exactly
(FBTT's ``enforce_embedding_dim``): the backbone needs ``D`` values.

**Cache**: FBTT's LFU cache of hot rows (``use_cache``) is NOT implemented. It keeps
decompressed copies of the most used rows so that a GPU step skips their two GEMMs; the
paper's headline compression (117x Kaggle, 112x Terabyte) counts the TT cores without it,
and it is a speed device whose CPU version (frequency hash table, set-associative
placement, populate calls) would be neither small nor a faithful copy of a GPU kernel.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import Field
from torch import nn

from suite.embeddings.base import (
    EmbeddingContext,
    EmbeddingMethod,
    EmbeddingOptions,
)
from suite.embeddings.budget import knob_hook
from suite.embeddings.tables import ADAGRAD_EPS, PhysicalTables
from suite.registry import EMBEDDINGS

TT_CORES = 3
"""Cores per table (the paper's and FBTT's default)."""
TRUNCATION = 2.0
"""The sampled Gaussian keeps standard-normal draws with ``|w| <= 2`` (others redrawn)."""


class TTRecOptions(EmbeddingOptions):
    """TT rank, threshold and factorization. ``backend`` applies to the full tables of the
    features at or below ``threshold``. ``init: reference``: the paper's sampled Gaussian
    (see :func:`sampled_gaussian_scale`); ``torch``: every core uniform in
    ``±sqrt(1/n_k)`` (``n_k`` its rows), as the suite's earlier scheme draws a table."""

    rank: int = Field(16, ge=1, description="TT rank R (ranks [1, R, R, 1]; the paper: 8..64)")
    threshold: int = Field(200, ge=0, description="features with n <= threshold keep a full table")
    round_up: bool = Field(
        True,
        description="round rows up to a multiple of 10^k when that gives more nearly equal "
        "factors (FBTT's allow_round_up)",
    )


# ------------------------------------------------------------------ factorization


def prime_factors(m: int) -> list[int]:
    """Prime factors of ``m >= 1`` with multiplicity, ascending (``[]`` for 1)."""
    out, p = [], 2
    while p * p <= m:
        while m % p == 0:
            out.append(p)
            m //= p
        p += 1
    return out + ([m] if m > 1 else [])


def factor_entropy(factors: list[int] | tuple[int, ...]) -> float:
    """``-sum p ln p`` of ``p = f / sum(f)``: highest for equal factors."""
    total = sum(factors)
    return -sum(f / total * math.log(f / total) for f in factors)


def _divisors(m: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(m) + 1) if m % d == 0]
    return sorted(set(small + [m // d for d in small]))


def near_equal_factors(m: int) -> list[int]:
    """Three ascending factors of ``m`` with product ``m`` (a grouping of its prime factors
    padded with 1s) of the highest :func:`factor_entropy`."""
    ones = max(0, TT_CORES - len(prime_factors(m)))
    divisors = _divisors(m)
    best: tuple[float, tuple[int, int, int]] | None = None
    for a in divisors:
        if a**3 > m:
            break
        for b in divisors:
            if b < a or m % (a * b):
                continue
            c = m // (a * b)
            if c < b:
                break
            triple = (a, b, c)
            if triple.count(1) != ones:
                continue
            entropy = factor_entropy(triple)
            if best is None or entropy > best[0] + 1e-12:
                best = (entropy, triple)
    assert best is not None
    return list(best[1])


def tt_row_factors(n: int, round_up: bool = True) -> list[int]:
    """``[n1, n2, n3]`` with ``n1 n2 n3 >= n`` (see the module doc)."""
    if not round_up:
        return near_equal_factors(n)
    candidates = [math.ceil(n / 10**k) * 10**k for k in range(len(str(n)))]
    entropies = [factor_entropy(near_equal_factors(c)) for c in candidates]
    return near_equal_factors(candidates[entropies.index(max(entropies))])


def tt_core_shapes(rows: list[int], dims: list[int], rank: int) -> list[tuple[int, ...]]:
    """``[R_{k-1}, n_k, d_k, R_k]`` of each core, ranks ``[1, R, R, 1]``."""
    ranks = [1] + [rank] * (TT_CORES - 1) + [1]
    return [(ranks[k], rows[k], dims[k], ranks[k + 1]) for k in range(TT_CORES)]


def tt_digits(ids: torch.Tensor, rows: list[int]) -> list[torch.Tensor]:
    """``ids [B] -> [i1, i2, i3]``: mixed-radix digits, ``i1`` most significant."""
    n1, n2, n3 = rows
    return [ids // (n2 * n3), (ids // n3) % n2, ids % n3]


def tt_lookup(cores: list[torch.Tensor], ids: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """``ids [B] -> [B, d1 d2 d3]``: the product of the cores' slices at each id's digits."""
    i1, i2, i3 = tt_digits(ids, rows)
    g1 = cores[0][0, i1]  # [B, d1, R]
    g2 = cores[1].permute(1, 0, 2, 3)[i2]  # [B, R, d2, R']
    g3 = cores[2][..., 0].permute(1, 0, 2)[i3]  # [B, R', d3]
    batch, r1, d2, r2 = g2.shape
    left = torch.bmm(g1, g2.reshape(batch, r1, d2 * r2)).reshape(batch, -1, r2)  # [B, d1 d2, R']
    return torch.bmm(left, g3).reshape(batch, -1)


def tt_full_matrix(cores: list[torch.Tensor]) -> torch.Tensor:
    """The whole ``[n1 n2 n3, d1 d2 d3]`` matrix the cores represent (padding rows included)."""
    full = torch.einsum("iar,rjbs,skc->ijkabc", cores[0][0], cores[1], cores[2][..., 0])
    n1, n2, n3, d1, d2, d3 = full.shape
    return full.reshape(n1 * n2 * n3, d1 * d2 * d3)


def truncated_normal_variance(bound: float = TRUNCATION) -> float:
    """Variance of a standard normal truncated to ``[-bound, bound]``."""
    mass = math.erf(bound / math.sqrt(2))
    density = math.exp(-(bound**2) / 2) / math.sqrt(2 * math.pi)
    return 1.0 - 2 * bound * density / mass


def sampled_gaussian_scale(n: int, rank: int) -> float:
    """Scale ``s`` of every core's truncated-normal draws so that an entry of the product
    has the variance ``1/(3n)`` of DLRM's uniform ``±sqrt(1/n)`` table: an entry sums
    ``R^2`` products of three independent draws, so ``R^2 (s^2 v)^3 = 1/(3n)``, ``v`` the
    truncated normal's variance. FBTT's ``approx-normal`` uses ``s = (3n)^(-1/6)``, which
    is this rule at ``R = 1``, ``v = 1``; here the rank and truncation are counted."""
    v = truncated_normal_variance()
    return (3.0 * n * rank * rank * v**3) ** (-1.0 / 6.0)


def sampled_gaussian(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Standard-normal draws ``[shape]`` with every ``|w| > 2`` redrawn (from ``generator``)."""
    out = torch.randn(shape, generator=generator)
    bad = out.abs() > TRUNCATION
    while bad.any():
        out[bad] = torch.randn(int(bad.sum()), generator=generator)
        bad = out.abs() > TRUNCATION
    return out


# ------------------------------------------------------------------ the method


class TTCores(nn.Module):
    """The cores of every compressed feature: ``core_<f>_<k>`` ``[R_{k-1}, n_k, d_k, R_k]``."""

    def __init__(self, shapes: dict[int, list[tuple[int, ...]]]) -> None:
        super().__init__()
        for f, feature_shapes in shapes.items():
            for k, shape in enumerate(feature_shapes):
                self.register_parameter(f"core_{f}_{k}", nn.Parameter(torch.zeros(shape)))

    def of(self, feature: int) -> list[nn.Parameter]:
        """The three cores of ``feature``."""
        return [getattr(self, f"core_{feature}_{k}") for k in range(TT_CORES)]


@EMBEDDINGS.register("ttrec")
class TTRecEmbedding(EmbeddingMethod):
    """TT-Rec (Yin et al., MLSys 2021, https://arxiv.org/abs/2101.11714): each large table
    stored as three tensor-train cores; a row is the product of the cores' slices at its
    mixed-radix digits. No cache of hot rows (see the module doc).

    Training, as FBTT's fused kernel (``sparse=True``: SGD or exact Adagrad on the cores):
    the cores are not the dense optimizer's (:meth:`fused_modules`); autograd gives their
    gradient, summed over every lookup, and :meth:`after_step` applies the run's sparse
    optimizer with the sparse learning rate: ``sgd``; ``adagrad`` (one accumulator per core
    value, FBTT's ``tt_adagrad_backward``); ``rowwise_adagrad`` (ours: one accumulator per
    core slice ``G_k[:, j]``, fed its mean squared gradient). A slice no lookup read has a
    zero gradient and keeps its value and state. Full tables keep the suite's kernel.

    Memory: ``parameters`` = the cores and the full tables; ``auxiliary`` = the index
    tensors (feature lists of both kinds); ``optimizer`` = the cores' accumulators and the
    full tables' state. FLOPs per example: per compressed feature, 2 per multiply-add of the
    two products (``d1 R d2 R`` and ``d1 d2 R d3``).
    """

    Options = TTRecOptions

    def __init__(self, options: TTRecOptions, context: EmbeddingContext) -> None:
        super().__init__()
        self.options, self.dim = options, options.dim
        self.cardinalities = list(context.cardinalities)
        self.optimizer_name, self.learning_rate = context.sparse_optimizer, context.sparse_lr
        self.dims = near_equal_factors(options.dim)
        cards = self.cardinalities
        self.tt_features = [f for f, n in enumerate(cards) if n > options.threshold]
        self.full_features = [f for f, n in enumerate(cards) if n <= options.threshold]
        self.rows = {f: tt_row_factors(cards[f], options.round_up) for f in self.tt_features}
        shapes = {f: tt_core_shapes(self.rows[f], self.dims, options.rank) for f in self.rows}
        self.cores = TTCores(shapes)
        self._init_cores(context.seed)
        self.register_buffer("tt_index", torch.tensor(self.tt_features, dtype=torch.int64))
        self.register_buffer("full_index", torch.tensor(self.full_features, dtype=torch.int64))
        self._states = [torch.zeros(self._state_shape(p)) for p in self.cores.parameters()]
        self.tables: PhysicalTables | None = None
        if self.full_features:
            self.tables = PhysicalTables(
                [cards[f] for f in self.full_features],
                [options.dim] * len(self.full_features),
                backend=options.backend,
                optimizer=context.sparse_optimizer,
                learning_rate=context.sparse_lr,
                device=context.device,
                seed=context.seed,
                materialize=context.materialize_tables,
            )
        self.to(context.device)
        self._states = [s.to(context.device) for s in self._states]

    @torch.no_grad()
    def _init_cores(self, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        for f in self.tt_features:
            for core in self.cores.of(f):
                if self.options.init == "reference":
                    scale = sampled_gaussian_scale(self.cardinalities[f], self.options.rank)
                    core.copy_(sampled_gaussian(tuple(core.shape), generator) * scale)
                else:
                    bound = math.sqrt(1.0 / core.shape[1])
                    core.copy_((torch.rand(core.shape, generator=generator) * 2 - 1) * bound)

    def _state_shape(self, core: torch.Tensor) -> tuple[int, ...]:
        return {
            "sgd": (0,),
            "adagrad": tuple(core.shape),
            "rowwise_adagrad": (core.shape[1],),
        }[self.optimizer_name]

    # ----------------------------------------------------------------- lookup
    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        pieces: dict[int, torch.Tensor] = {}
        for f in self.tt_features:
            pieces[f] = tt_lookup(list(self.cores.of(f)), sparse[:, f], self.rows[f])
        if self.tables is not None:
            rows = self.tables(sparse.index_select(1, self.full_index))
            rows = rows.view(sparse.shape[0], len(self.full_features), self.dim)
            pieces.update({f: rows[:, j] for j, f in enumerate(self.full_features)})
        return torch.stack([pieces[f] for f in range(len(self.cardinalities))], dim=1)

    def full_matrix(self, feature: int) -> torch.Tensor:
        """``[n1 n2 n3, D]``: every row the cores of ``feature`` represent."""
        return tt_full_matrix([c.detach() for c in self.cores.of(feature)])

    # ----------------------------------------------------------------- training
    def fused_modules(self) -> list[nn.Module]:
        fused: list[nn.Module] = [self.cores]
        return fused + ([self.tables] if self.tables is not None and self.tables.fused else [])

    def sparse_parameters(self) -> list[nn.Parameter]:
        return self.tables.sparse_parameters() if self.tables is not None else []

    def after_step(self, step: int) -> None:
        for core, state in zip(self.cores.parameters(), self._states, strict=True):
            if core.grad is not None:
                self._update(core, state, core.grad)
                core.grad = None
        if self.tables is not None:
            self.tables.step()

    @torch.no_grad()
    def _update(self, core: torch.Tensor, state: torch.Tensor, grad: torch.Tensor) -> None:
        """The sparse optimizer on one core: ``core``, ``grad`` ``[R, n_k, d_k, R']``."""
        lr = self.learning_rate
        if self.optimizer_name == "sgd":
            core.add_(grad, alpha=-lr)
        elif self.optimizer_name == "adagrad":
            state.add_(grad.pow(2))
            core.addcdiv_(grad, state.sqrt().add_(ADAGRAD_EPS), value=-lr)
        else:  # one accumulator per slice j of the rows axis
            state.add_(grad.pow(2).transpose(0, 1).reshape(core.shape[1], -1).mean(dim=1))
            scale = state.sqrt().add_(ADAGRAD_EPS).view(1, -1, 1, 1)
            core.addcdiv_(grad, scale.expand_as(grad), value=-lr)

    # ----------------------------------------------------------------- storage
    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        tables = self.tables.storage_tensors() if self.tables is not None else {}
        return {
            "parameters": [*self.cores.parameters(), *tables.get("parameters", [])],
            "auxiliary": [self.tt_index, self.full_index],
            "optimizer": [*self._states, *tables.get("optimizer", [])],
        }

    def flops_per_example(self) -> int:
        d1, d2, d3 = self.dims
        r = self.options.rank
        return len(self.tt_features) * 2 * (d1 * r * d2 * r + d1 * d2 * r * d3)

    def layout(self) -> dict[str, Any]:
        """Row and dim factors, ranks, and which features stay full."""
        return {
            "tt_rows": {str(f): r for f, r in self.rows.items()},
            "tt_dims": self.dims,
            "tt_ranks": [1] + [self.options.rank] * (TT_CORES - 1) + [1],
            "full_features": self.full_features,
        }

    # ----------------------------------------------------------------- checkpoints
    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """Cores and their accumulators whole (``tt.*``), full tables by row group."""
        state = {f"tt.{k}": v.detach() for k, v in self.cores.state_dict().items()}
        names = [name for name, _ in self.cores.named_parameters()]
        state.update({f"tt_state.{n}": s for n, s in zip(names, self._states, strict=True)})
        if self.tables is not None:
            state.update({f"tables.{k}": v for k, v in self.tables.checkpoint_state().items()})
        return state

    @torch.no_grad()
    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        for name, core in self.cores.named_parameters():
            core.copy_(tensors[f"tt.{name}"])
        names = [name for name, _ in self.cores.named_parameters()]
        for name, state in zip(names, self._states, strict=True):
            state.copy_(tensors[f"tt_state.{name}"])
        if self.tables is not None:
            self.tables.load_checkpoint_state(
                {
                    k.removeprefix("tables."): v
                    for k, v in tensors.items()
                    if k.startswith("tables.")
                }
            )

    def checkpoint_row_groups(self) -> dict[str, int]:
        return {f"tables.{t}": n for t, n in enumerate(self.tables.rows)} if self.tables else {}

    def checkpoint_row_ids(self, sparse: torch.Tensor) -> torch.Tensor:
        return sparse.index_select(1, self.full_index)

    # the TT rank (cores and their states; features at or below the threshold keep a
    # full table: the floor)
    options_at_budget = knob_hook(
        "ttrec", lambda dim, r: {"dim": dim, "rank": int(r)}, 1, 128, integer=True
    )
