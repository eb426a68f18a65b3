"""``fiited``: fine-grained in-training embedding dimension pruning (FIITED, Luo et al. 2024).

Every embedding vector is split into ``K`` chunks of ``D / K`` values. Each chunk has a
utility that decays by ``gamma`` every step and grows by how often its row is read and
how large the chunk's gradient is. Every ``prune_every`` steps the least useful chunks are
pruned so that each vector keeps a prefix of its chunks (its own length, 0..K chunks); a
pruned chunk reads as zeros and can grow back when its utility rises again.

The storage is the point, so this method owns it: a pool of chunk slots with a free
list, and an index ``(feature, row, chunk) -> slot``. Pruned slots go to the free list,
regrown chunks take slots from it, and the pool is compacted (reallocated smaller) when
enough of it is free, so :meth:`memory` reports bytes that are really held.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field, model_validator

from suite.embeddings.base import (
    EmbeddingBytes,
    EmbeddingContext,
    EmbeddingMethod,
    EmbeddingOptions,
)
from suite.embeddings.tables import ADAGRAD_EPS
from suite.registry import EMBEDDINGS


class FiitedOptions(EmbeddingOptions):
    """Chunking, utility and pruning schedule. ``backend`` is not used: FIITED owns its
    storage."""

    chunks: int = Field(4, ge=1, description="K: chunks per embedding vector (dim % K == 0)")

    def _fbgemm_dim(self) -> FiitedOptions:  # FIITED's pool has no fbgemm dim constraint
        return self

    decay: float = Field(0.9, gt=0, le=1, description="gamma: per-step decay of the utility")
    prune_every: int = Field(100, ge=1, description="steps between pruning events")
    budget: float = Field(
        0.1, gt=0, le=1, description="target size: fraction of the full tables' parameter bytes"
    )
    warmup_steps: int = Field(
        500, ge=0, description="steps over which the kept fraction falls from 1 to budget"
    )
    utility_threshold: float | None = Field(
        None, ge=0, description="if set, keep chunks whose utility reaches it (replaces budget)"
    )
    regrow: bool = Field(True, description="pruned chunks may grow back when their utility rises")

    @model_validator(mode="after")
    def _check_chunks(self) -> FiitedOptions:
        if self.dim % self.chunks:
            raise ValueError(f"chunks: must divide dim ({self.dim}), got {self.chunks}")
        return self


@EMBEDDINGS.register("fiited")
class FiitedEmbedding(EmbeddingMethod):
    """FIITED: per-vector chunk pruning during training, to a budget, with regrowth.

    Choices where the paper leaves room (all ours):

    - Utility: ``u <- gamma * u + a * g`` per chunk every step, with ``a * g`` the sum over
      the row's ``a`` accesses in the step of the L2 norm of the gradient reaching that
      chunk of the output (``g`` is the mean per-access gradient norm). Pruned chunks read
      as zeros but still receive that output gradient, so their utility keeps moving and
      tells when to grow them back. The decay is applied lazily (utilities are stored
      scaled by ``gamma ** -age`` and renormalised at each pruning event), so a step costs
      O(batch), not O(table).
    - Prefix rule: a chunk's score is the minimum utility of itself and the chunks before
      it in its vector (a running minimum), which is non-increasing along the vector, so
      keeping every chunk above a score threshold keeps a prefix of each vector.
    - Schedule: the kept fraction of chunks falls from 1 to ``budget`` along the cubic
      curve of gradual pruning (Zhu & Gupta 2017), ``budget + (1 - budget) * (1 -
      step / warmup_steps) ** 3``, reached at ``warmup_steps`` (at the first event when it
      is 0) and held after. Each event keeps exactly that many chunks (ties broken by
      feature, row, chunk order). With ``utility_threshold`` it keeps every chunk whose
      score reaches the threshold instead.
    - Regrowth: at each event every chunk competes, live or pruned (``regrow=False``: only
      live ones). A regrown chunk takes a slot from the free list (the pool grows if the
      list is empty) and starts at zero, the value it read while pruned, with fresh
      optimizer state.
    - Compaction: when more than ``COMPACT_SLACK`` of the pool's slots are free after an
      event, the live slots are copied into a new, exactly sized pool and the index is
      renumbered; the old pool is released.
    - Optimizer: our own, applied in :meth:`after_step` to the slots read in the step:
      ``rowwise_adagrad`` keeps one accumulator per chunk slot (fbgemm's row-wise rule with
      a chunk as the row), ``adagrad`` one per value, ``sgd`` none; state is freed with the
      slot. Learning rate and rule come from the run's sparse optimizer settings.
    - Memory: ``parameters`` = the pool, ``auxiliary`` = index (int32 ``[rows, K]``),
      utilities (float32 ``[rows, K]``), free list, feature offsets and the decay clock,
      ``optimizer`` = the accumulators. ``memory_history`` lists ``(step, parameters +
      auxiliary bytes)`` at construction and after each event (the accuracy task's
      ``embedding_bytes`` definition); ``events`` records each event's figures.
    - Training contract: one forward, then ``backward``, then :meth:`after_step`; the
      gradient is read from the forward's output, which is a leaf tensor while training.
    """

    Options = FiitedOptions
    COMPACT_SLACK = 0.05

    def __init__(self, options: FiitedOptions, context: EmbeddingContext) -> None:
        super().__init__()
        self.options = options
        self.dim, self.chunks = options.dim, options.chunks
        self.chunk_dim = options.dim // options.chunks
        self.cardinalities = list(context.cardinalities)
        self.rows = sum(self.cardinalities)
        self.total_chunks = self.rows * self.chunks
        self.optimizer_name = context.sparse_optimizer
        self.learning_rate = context.sparse_lr
        device = context.device

        offsets = [0]
        for n in self.cardinalities[:-1]:
            offsets.append(offsets[-1] + n)
        generator = torch.Generator().manual_seed(context.seed)
        init = torch.cat(
            [
                (torch.rand(n, self.dim, generator=generator) * 2 - 1) * math.sqrt(1.0 / n)
                for n in self.cardinalities
            ]
        )
        self.register_buffer("offsets", torch.tensor(offsets, dtype=torch.int64, device=device))
        self.register_buffer("pool", init.view(self.total_chunks, self.chunk_dim).to(device))
        index = torch.arange(self.total_chunks, dtype=torch.int32, device=device)
        self.register_buffer("index", index.view(self.rows, self.chunks))
        self.register_buffer("utility", torch.zeros(self.rows, self.chunks, device=device))
        self.register_buffer("free_slots", torch.zeros(0, dtype=torch.int32, device=device))
        self.register_buffer("clock", torch.zeros(1, dtype=torch.int64, device=device))
        self.register_buffer("opt_state", self._new_state(self.total_chunks))
        self._pending: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self.memory_history: list[tuple[int, int]] = [(0, self._held_bytes())]
        self.events: list[dict[str, float]] = []

    # ----------------------------------------------------------------- storage
    def _new_state(self, slots: int) -> torch.Tensor:
        shape = {"rowwise_adagrad": (slots,), "adagrad": (slots, self.chunk_dim), "sgd": (0,)}
        return torch.zeros(shape[self.optimizer_name], device=self.pool.device)

    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        return {
            "parameters": [self.pool],
            "auxiliary": [self.index, self.utility, self.free_slots, self.offsets, self.clock],
            "optimizer": [self.opt_state],
        }

    def memory(self) -> EmbeddingBytes:
        total = {k: sum(t.nbytes for t in v) for k, v in self.storage_tensors().items()}
        return EmbeddingBytes(total["parameters"], total["auxiliary"], total["optimizer"])

    def _held_bytes(self) -> int:
        memory = self.memory()
        return memory.parameters + memory.auxiliary

    def live_chunks(self) -> int:
        return int((self.index >= 0).sum())

    def vector_lengths(self) -> torch.Tensor:
        """Live chunks of every vector, ``[rows]`` (always a prefix)."""
        return (self.index >= 0).sum(dim=1)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[override]
        # the pool, free list and optimizer state change size during training
        for name in ("pool", "free_slots", "opt_state"):
            saved = state_dict.get(prefix + name)
            current = getattr(self, name)
            if saved is not None and saved.shape != current.shape:
                setattr(
                    self, name, torch.empty(saved.shape, dtype=current.dtype, device=current.device)
                )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # ----------------------------------------------------------------- forward
    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        rows = sparse + self.offsets  # [B, F] global rows
        slots = self.index[rows].long()  # [B, F, K]
        live = slots >= 0
        values = torch.nn.functional.embedding(slots.clamp(min=0), self.pool)  # [B, F, K, c]
        out = (values * live.unsqueeze(-1)).reshape(*sparse.shape, self.dim)
        if self.training and torch.is_grad_enabled():
            out.requires_grad_()
            self._pending = (rows, slots, out)
        return out

    # ----------------------------------------------------------------- training
    def after_step(self, step: int) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and pending[2].grad is not None:
            self._apply_gradient(step, *pending)
        if step % self.options.prune_every == 0:
            self._prune(step)

    @torch.no_grad()
    def _apply_gradient(
        self, step: int, rows: torch.Tensor, slots: torch.Tensor, out: torch.Tensor
    ) -> None:
        grad = out.grad.view(*slots.shape, self.chunk_dim)  # [B, F, K, c]
        # utility: u <- gamma * u + sum over accesses of the chunk gradient norm (lazy decay)
        age = step - int(self.clock)
        if self.options.decay < 1 and age * -math.log(self.options.decay) > 40:
            self._renormalise(step)
            age = 0
        scale = self.options.decay**-age
        chunk = torch.arange(self.chunks, device=rows.device)
        flat = (rows.unsqueeze(-1) * self.chunks + chunk).reshape(-1)
        self.utility.view(-1).index_add_(0, flat, grad.norm(dim=-1).reshape(-1) * scale)
        # optimizer on the live slots read in this step
        live = slots >= 0
        if not bool(live.any()):
            return
        unique, inverse = torch.unique(slots[live], return_inverse=True)
        summed = torch.zeros(len(unique), self.chunk_dim, device=grad.device)
        summed.index_add_(0, inverse, grad[live])
        lr = self.learning_rate
        if self.optimizer_name == "rowwise_adagrad":
            self.opt_state.index_add_(0, unique, summed.pow(2).mean(dim=1))
            update = summed * (lr / (self.opt_state[unique].sqrt() + ADAGRAD_EPS)).unsqueeze(1)
        elif self.optimizer_name == "adagrad":
            self.opt_state.index_add_(0, unique, summed.pow(2))
            update = summed * lr / (self.opt_state[unique].sqrt() + ADAGRAD_EPS)
        else:
            update = summed * lr
        self.pool.index_add_(0, unique, -update)

    def _renormalise(self, step: int) -> None:
        self.utility.mul_(self.options.decay ** (step - int(self.clock)))
        self.clock.fill_(step)

    def kept_fraction(self, step: int) -> float:
        """Fraction of all chunks the schedule keeps at ``step`` (budget mode)."""
        budget, warmup = self.options.budget, self.options.warmup_steps
        if warmup == 0:
            return budget
        progress = min(1.0, step / warmup)
        return budget + (1 - budget) * (1 - progress) ** 3

    @torch.no_grad()
    def _select(self, step: int) -> torch.Tensor:
        """Chunks to keep, ``[rows, K]`` bool; every row keeps a prefix."""
        live = self.index >= 0
        score = self.utility.clone()
        if not self.options.regrow:
            score[~live] = -math.inf
        score = torch.cummin(score, dim=1).values
        if self.options.utility_threshold is not None:
            return score >= self.options.utility_threshold
        eligible = int(torch.isfinite(score).sum())
        target = min(eligible, round(self.kept_fraction(step) * self.total_chunks))
        if target >= eligible:
            return torch.isfinite(score)
        if target == 0:
            return torch.zeros_like(live)
        flat = score.view(-1)
        tau = torch.kthvalue(flat.cpu(), flat.numel() - target + 1).values.item()
        keep = flat > tau
        missing = target - int(keep.sum())
        if missing > 0:  # ties at tau: lower (feature, row, chunk) first, prefixes hold
            ties = torch.nonzero(flat == tau).squeeze(1)[:missing]
            keep[ties] = True
        return keep.view_as(live)

    @torch.no_grad()
    def _prune(self, step: int) -> None:
        self._renormalise(step)
        keep = self._select(step)
        live = self.index >= 0
        to_free, to_grow = live & ~keep, keep & ~live
        freed = self.index[to_free]
        self.index[to_free] = -1
        self.free_slots = torch.cat([self.free_slots, freed])
        grow = int(to_grow.sum())
        if grow > len(self.free_slots):
            extra = grow - len(self.free_slots)
            capacity = self.pool.shape[0]
            new = torch.arange(
                capacity, capacity + extra, dtype=torch.int32, device=self.pool.device
            )
            self.pool = torch.cat([self.pool, self.pool.new_zeros(extra, self.chunk_dim)])
            self.opt_state = torch.cat([self.opt_state, self._new_state(extra)])
            self.free_slots = torch.cat([self.free_slots, new])
        if grow:
            taken = self.free_slots[len(self.free_slots) - grow :]
            self.free_slots = self.free_slots[: len(self.free_slots) - grow].clone()
            self.index[to_grow] = taken
            self.pool[taken.long()] = 0
            if self.opt_state.numel():
                self.opt_state[taken.long()] = 0
        if len(self.free_slots) > self.COMPACT_SLACK * self.pool.shape[0]:
            self._compact()
        held = self._held_bytes()
        self.memory_history.append((step, held))
        self.events.append(
            {
                "step": step,
                "live_chunks": self.live_chunks(),
                "pool_slots": self.pool.shape[0],
                "freed": int(to_free.sum()),
                "regrown": grow,
                "bytes": held,
            }
        )

    def _compact(self) -> None:
        """Copy live slots into an exactly sized pool, renumber the index, drop the free list."""
        live = self.index >= 0
        old = self.index[live].long()
        self.pool = self.pool[old]
        if self.opt_state.numel():
            self.opt_state = self.opt_state[old]
        self.index[live] = torch.arange(len(old), dtype=torch.int32, device=self.index.device)
        self.free_slots = self.free_slots.new_zeros(0)
