"""``adaembed``: in-training embedding pruning by access-and-gradient importance (AdaEmbed,
Lai et al., OSDI 2023, https://www.usenix.org/conference/osdi23/presentation/lai).

What the paper gives, and what is followed here (read through its abstract and public notes
on it; the full text and any authors' code were not reachable from this suite's sources,
and AdaEmbed's code is Meta-internal):

- a fixed total embedding size: the physical table holds ``R = ceil(budget * N)`` rows of
  ``D`` values for the ``N`` ids of all features together, so per-feature sizes are not
  fixed but follow where the important ids are;
- embedding importance ``EI`` from runtime access frequency and training gradient,
  ``EI_t(i) = freq_t(i) * ||grad_t(i)||``, smoothed as a moving average over steps;
- importance compared across features relative to each feature's 95th percentile,
  ``EI(i) / EI_95th(feature(i))``, since raw values of different features are not
  comparable;
- periodically the ids whose relative importance falls below the boundary of the ``R``
  most important lose their rows, and the more important ids without one get them.

Choices where the paper was not reachable (all ours, named so they can be checked):

- Importance per step: ``freq_t(i) * ||mean gradient||`` is the L2 norm of the summed
  gradient reaching id ``i``'s output in the step (the row's gradient), and
  ``EI <- decay * EI + that`` every step (``decay`` the moving average's factor). It is kept
  for every id, with a row or not: an id without a row reads a zero vector but still
  receives the output's gradient, which is what lets it earn a row. Decay is lazy (stored
  scaled by ``decay ** -age``, renormalised at each reallocation), so a step costs O(batch).
- 95th percentile: nearest rank over the feature's ids whose importance is positive
  (``k = ceil(0.95 * n)``-th smallest); ids of importance 0 score 0.
- Reallocation, every ``realloc_every`` steps from ``warmup_steps`` on: the ids that hold a
  row or have positive importance are ranked by relative importance (ties: an id holding a
  row first, then the lower id); the first ``R`` hold rows. Evicted ids lose their row
  (their importance stays, so they can come back); admitted ids take the freed rows in
  ascending order. Before any table is full, rows are handed first come (lowest id first
  within a step) to ids read in training; after that only reallocation hands rows out.
- A row handed to an id starts at that id's own initial vector, uniform in
  ``+-sqrt(1/n_f)`` (``n_f`` its feature's cardinality, as ``full`` draws its tables)
  from a counter-based hash of (seed, id, column): the same vector each time the id gets a
  row, with no random state to checkpoint. ``init`` ``reference`` and ``torch`` coincide.
  Its optimizer state starts fresh.
- Optimizer: ours, applied in :meth:`after_step` to the rows read (as FIITED's store):
  ``rowwise_adagrad`` one accumulator per physical row, fed the mean squared gradient over
  the row (fbgemm's rule); ``adagrad`` one per value; ``sgd`` none.
- Memory (from the real tensors): ``parameters`` = the table ``[R, D]``; ``auxiliary`` =
  index (feature offsets ``[F]``, id -> row ``[N]``, row -> id ``[R]``, rows in use) and
  utilities (importance ``[N]``, decay clock); ``optimizer`` = the accumulators. The
  table is allocated at its budget from the start, so ``compression_steps`` is 0.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import Field

from suite.embeddings.base import (
    EmbeddingContext,
    EmbeddingOptions,
    SelfUpdating,
    events_of,
    events_table,
    load_with_history,
    state_with_history,
)
from suite.embeddings.budget import knob_hook
from suite.embeddings.tables import ADAGRAD_EPS
from suite.registry import EMBEDDINGS

_PRIME = 2_147_483_647
_MIX = ((1_103_515_245, 12_345), (2_654_435_761 % _PRIME, 97_531))
QUANTILE = 0.95
"""Each feature's importance is compared relative to this quantile of its own."""


class AdaEmbedOptions(EmbeddingOptions):
    """Budget, importance decay and reallocation schedule. ``backend`` is not used: AdaEmbed
    owns its table. ``init`` (``reference`` and ``torch`` alike; no reference code is
    public): a row handed to an id starts uniform in ``+-sqrt(1/n_f)``, as ``full``."""

    budget: float = Field(
        0.25,
        gt=0,
        le=1,
        description="physical rows as a fraction of all features' ids (full rows), rounded "
        "up; the same unit as fiited's budget at equal dim",
    )
    decay: float = Field(
        0.9, gt=0, le=1, description="per-step decay of the importance moving average"
    )
    realloc_every: int = Field(100, ge=1, description="steps between reallocations")
    warmup_steps: int = Field(
        500, ge=0, description="no reallocation before this step (rows go first come until then)"
    )

    fbgemm_dim_rule = False  # AdaEmbed's table has no fbgemm dim constraint


def physical_rows(cardinalities: list[int], budget: float) -> int:
    """``R = ceil(budget * N)``, at least 1 (``N`` the ids of all features)."""
    return max(1, math.ceil(round(budget * sum(cardinalities), 6)))


def nearest_rank_quantile(values: torch.Tensor, q: float = QUANTILE) -> torch.Tensor:
    """The ``ceil(q * n)``-th smallest of ``values [n]`` (``n >= 1``), a 0-dim tensor."""
    k = max(1, math.ceil(q * values.numel()))
    return torch.kthvalue(values.cpu(), k).values.to(values.device)


@EMBEDDINGS.register("adaembed")
class AdaEmbedEmbedding(SelfUpdating):
    """AdaEmbed (Lai et al., OSDI 2023, https://www.usenix.org/conference/osdi23/presentation/lai):
    a fixed-size table whose rows go to the ids most important by access frequency times
    gradient, reallocated during training; ids without a row read zeros.

    Training contract (as FIITED's and ROBE's): one forward, then ``backward``, then
    :meth:`after_step`; the gradient is read from the forward's output, a leaf tensor while
    training. See the module docstring for the choices made where the paper was not
    reachable. ``events`` records each reallocation (step, evicted, admitted, rows used).
    """

    Options = AdaEmbedOptions

    def __init__(self, options: AdaEmbedOptions, context: EmbeddingContext) -> None:
        super().__init__()
        self.options = options
        self.dim = options.dim
        self.cardinalities = list(context.cardinalities)
        self.ids = sum(self.cardinalities)
        self.capacity = physical_rows(self.cardinalities, options.budget)
        self.optimizer_name = context.sparse_optimizer
        self.learning_rate = context.sparse_lr
        self.seed = context.seed
        device = context.device
        index = torch.int64 if self.ids >= 2**31 else torch.int32
        offsets = [0]
        for n in self.cardinalities[:-1]:
            offsets.append(offsets[-1] + n)
        self.register_buffer("offsets", torch.tensor(offsets, dtype=torch.int64, device=device))
        self.register_buffer("slot", torch.full((self.ids,), -1, dtype=index, device=device))
        self.register_buffer("owner", torch.full((self.capacity,), -1, dtype=index, device=device))
        self.register_buffer("used", torch.zeros(1, dtype=torch.int64, device=device))
        self.register_buffer("weight", torch.zeros(self.capacity, self.dim, device=device))
        self.register_buffer("importance_scaled", torch.zeros(self.ids, device=device))
        self.register_buffer("clock", torch.zeros(1, dtype=torch.int64, device=device))
        state = {"rowwise_adagrad": (self.capacity,), "adagrad": (self.capacity, self.dim)}
        shape = state.get(self.optimizer_name, (0,))
        self.register_buffer("opt_state", torch.zeros(shape, device=device))
        self.events: list[dict[str, int]] = []

    # ----------------------------------------------------------------- storage
    def auxiliary_parts(self) -> dict[str, list[torch.Tensor]]:
        return {
            "index": [self.offsets, self.slot, self.owner, self.used],
            "utilities": [self.importance_scaled, self.clock],
        }

    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        parts = self.auxiliary_parts()
        return {
            "parameters": [self.weight],
            "auxiliary": [*parts["index"], *parts["utilities"]],
            "optimizer": [self.opt_state],
        }

    def layout(self) -> dict[str, Any]:
        """Physical rows, dim and the rows each feature holds now."""
        return {"rows": self.capacity, "dim": self.dim, "feature_rows": self.feature_rows()}

    def feature_rows(self) -> list[int]:
        """Rows each feature's ids hold now (their sum is at most the capacity)."""
        held = (self.slot >= 0).long()
        bounds = [*self.offsets.tolist(), self.ids]
        return [int(held[a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def importance(self, step: int) -> torch.Tensor:
        """Every id's importance ``[N]`` as of the end of ``step``."""
        return self.importance_scaled * self.options.decay ** (step - int(self.clock))

    # ----------------------------------------------------------------- checkpoints
    _EVENT_FIELDS = ("step", "evicted", "admitted", "rows_used")

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """Every buffer (fixed shapes: table, index, importance, optimizer state) and the
        reallocation events (``history.events [E, 4]`` int64). No row groups: rows change
        owners at every reallocation, so an incremental checkpoint writes it whole."""
        return state_with_history(self, {"events": events_table(self.events, self._EVENT_FIELDS)})

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        history = load_with_history(self, tensors, self.offsets.device)
        self.events = events_of(history["events"], self._EVENT_FIELDS)
        self.drop_kept()

    # ----------------------------------------------------------------- lookup
    def _features(self, ids: torch.Tensor) -> torch.Tensor:
        """Feature of each global id (any shape)."""
        return torch.bucketize(ids, self.offsets[1:], right=True)

    def initial_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids [M]`` global -> ``[M, D]``: each id's initial vector, uniform in
        ``+-sqrt(1/n_f)`` from a hash of (seed, id, column)."""
        column = torch.arange(self.dim, device=ids.device)
        h = (ids.long().unsqueeze(1) * self.dim + column) % _PRIME
        h = (h + self.seed * 7_919) % _PRIME
        for a, b in _MIX:
            h = (h * a + b) % _PRIME
        uniform = h.double() / _PRIME
        cards = torch.tensor(self.cardinalities, dtype=torch.float64, device=ids.device)
        bound = cards[self._features(ids.long())].rsqrt().unsqueeze(1)
        return ((uniform * 2 - 1) * bound).to(self.weight.dtype)

    def _assign(self, ids: torch.Tensor, rows: torch.Tensor) -> None:
        """Give global ``ids [M]`` the physical ``rows [M]``, fresh."""
        self.slot[ids] = rows.to(self.slot.dtype)
        self.owner[rows] = ids.to(self.owner.dtype)
        self.weight[rows] = self.initial_rows(ids)
        if self.opt_state.numel():
            self.opt_state[rows] = 0

    @torch.no_grad()
    def _admit_first_come(self, ids: torch.Tensor) -> None:
        """While free rows remain, hand them to the ids read without one (lowest first)."""
        free = self.capacity - int(self.used)
        if free == 0:
            return
        new = torch.unique(ids[self.slot[ids] < 0])[:free]
        if new.numel():
            start = int(self.used)
            self._assign(new, torch.arange(start, start + len(new), device=new.device))
            self.used.add_(len(new))

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        ids = sparse + self.offsets  # [B, F] global ids
        training = self.training and torch.is_grad_enabled()
        if training:
            self._admit_first_come(ids.reshape(-1))
        slot = self.slot[ids].long()  # [B, F]
        held = slot >= 0
        out = self.weight[slot.clamp(min=0)] * held.unsqueeze(-1)  # [B, F, D]
        return self.keep_for_update(out, ids, slot)

    # ----------------------------------------------------------------- training
    def after_step(self, step: int) -> None:
        kept = self.take_for_update()
        if kept is not None:
            self._apply_gradient(step, *kept)
        every, warmup = self.options.realloc_every, self.options.warmup_steps
        if step >= warmup and step % every == 0:
            self.reallocate(step)

    @torch.no_grad()
    def _apply_gradient(
        self, step: int, ids: torch.Tensor, slot: torch.Tensor, out: torch.Tensor
    ) -> None:
        grad = out.grad.reshape(-1, self.dim)  # [B*F, D]
        unique, inverse = torch.unique(ids.reshape(-1), return_inverse=True)
        summed = grad.new_zeros(len(unique), self.dim).index_add_(0, inverse, grad)
        age = step - int(self.clock)
        decay = self.options.decay
        if decay < 1 and age * -math.log(decay) > 40:
            self._renormalise(step)
            age = 0
        self.importance_scaled.index_add_(0, unique, summed.norm(dim=1) * decay**-age)
        rows = self.slot[unique].long()
        held = rows >= 0
        self._update_rows(rows[held], summed[held])

    def _update_rows(self, rows: torch.Tensor, grad: torch.Tensor) -> None:
        """The sparse optimizer on distinct ``rows [M]`` with summed ``grad [M, D]``."""
        if rows.numel() == 0:
            return
        lr = self.learning_rate
        if self.optimizer_name == "rowwise_adagrad":
            self.opt_state.index_add_(0, rows, grad.pow(2).mean(1))
            scale = self.opt_state[rows].sqrt().add_(ADAGRAD_EPS).unsqueeze(1)
        elif self.optimizer_name == "adagrad":
            self.opt_state.index_add_(0, rows, grad.pow(2))
            scale = self.opt_state[rows].sqrt().add_(ADAGRAD_EPS)
        else:
            scale = torch.ones_like(grad[:, :1])
        self.weight.index_add_(0, rows, grad * -lr / scale)

    def _renormalise(self, step: int) -> None:
        self.importance_scaled.mul_(self.options.decay ** (step - int(self.clock)))
        self.clock.fill_(step)

    # ----------------------------------------------------------------- reallocation
    def relative_importance(self) -> torch.Tensor:
        """``[N]``: importance over its feature's 95th percentile (nearest rank, over the
        feature's ids of positive importance); 0 where importance is 0. Call after
        renormalising (the stored values are then the true ones)."""
        values = self.importance_scaled
        score = torch.zeros_like(values)
        bounds = [*self.offsets.tolist(), self.ids]
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            part = values[a:b]
            positive = part > 0
            if bool(positive.any()):
                score[a:b] = part / nearest_rank_quantile(part[positive]) * positive
        return score

    @torch.no_grad()
    def reallocate(self, step: int) -> None:
        """Rank ids by relative importance and give rows to the first ``R`` (ties: an id
        holding a row, then the lower id); evicted ids' rows go to admitted ones."""
        self._renormalise(step)
        score = self.relative_importance()
        held = self.slot >= 0
        candidates = torch.nonzero((score > 0) | held).squeeze(1)  # ascending ids
        if len(candidates) > self.capacity:
            order = torch.argsort(~held[candidates], stable=True)
            order = order[torch.argsort(-score[candidates[order]], stable=True)]
            candidates = candidates[order[: self.capacity]]
        winner = torch.zeros_like(held)
        winner[candidates] = True
        evicted = torch.nonzero(held & ~winner).squeeze(1)
        admitted = torch.nonzero(winner & ~held).squeeze(1)
        used = int(self.used)
        freed = torch.sort(self.slot[evicted].long()).values
        rows = torch.cat([freed, torch.arange(used, self.capacity, device=freed.device)])
        self.slot[evicted] = -1
        self.owner[freed] = -1
        self._assign(admitted, rows[: len(admitted)])
        self.used.add_(max(0, len(admitted) - len(evicted)))
        self.events.append(
            {
                "step": step,
                "evicted": len(evicted),
                "admitted": len(admitted),
                "rows_used": int(self.used),
            }
        )

    # the row budget; the per-id index and importance it keeps for every id are its floor
    options_at_budget = knob_hook("adaembed", lambda dim, b: {"dim": dim, "budget": b}, 1e-6, 1.0)
