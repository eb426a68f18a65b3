"""``fiited``: fine-grained in-training embedding dimension pruning (FIITED, Luo et al. 2024,
arXiv 2401.04408).

Every embedding vector is split into ``K`` chunks of ``D / K`` values. Each chunk has a
utility that decays by ``gamma`` every step and grows with how often its row is read and
how large the chunk's gradient is. Every ``prune_every`` steps the least useful chunks are
pruned so that each vector keeps a prefix of its chunks (its own length, 0..K); a pruned
chunk reads as zeros and can grow back when its utility rises again.

The storage is the point, so this method owns it, and every part of it follows the live
chunks (the paper's virtually-hashed, physically-indexed table; here the virtual key is
looked up in a sorted key array, and its position there is the physical index):

- ``keys [R]``: one key per live row (a row with at least one live chunk), sorted. The key
  ``(K - L) * N + row`` holds the row and its length ``L``, so rows of equal length are
  contiguous and longer rows come first.
- ``pool [C, D/K]``: the live chunks. Chunk ``k`` of the row at position ``p`` sits at
  ``chunk_start[k] + p``: the rows that have a chunk ``k`` are exactly the first
  ``chunk_start[k+1] - chunk_start[k]`` positions, so the layout needs no per-row pointer.
- ``utility [C]``: the utility of each live chunk, aligned with the pool.
- optimizer state: row-wise Adagrad keeps one accumulator per live row (as fbgemm's
  ``EXACT_ROWWISE_ADAGRAD`` keeps one per row of ``full``), Adagrad one per live value.
- pruned chunks keep no exact state: their utility is estimated by a count-mean-min
  sketch (2 hashes, ``tracked * N * K`` buckets in all) and the last pruned chunks read
  before a pruning event (only a vector's next chunk can grow back) are listed in a ring
  of the same size. These are the regrowth candidates.

At a pruning event every structure is rebuilt at its new exact size; nothing is padded.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field, model_validator

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
from suite.embeddings.tables import ADAGRAD_EPS, SparseOptimizer
from suite.registry import EMBEDDINGS

_PRIME = 2_147_483_647
_HASH_A = (1_103_515_245, 2_654_435_761 % _PRIME)
_HASH_B = (12_345, 97_531)


class FiitedOptions(EmbeddingOptions):
    """Chunking, utility and pruning schedule. ``backend`` is not used: FIITED owns its
    storage."""

    chunks: int = Field(4, ge=1, description="K: chunks per embedding vector (dim % K == 0)")

    fbgemm_dim_rule = False  # FIITED's pool has no fbgemm dim constraint

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
    tracked: float = Field(
        0.01,
        gt=0,
        le=1,
        description="size of the pruned-chunk utility sketch and of the regrowth candidate "
        "ring, each as a fraction of all chunks",
    )

    @model_validator(mode="after")
    def _check_chunks(self) -> FiitedOptions:
        if self.dim % self.chunks:
            raise ValueError(f"chunks: must divide dim ({self.dim}), got {self.chunks}")
        return self


@EMBEDDINGS.register("fiited")
class FiitedEmbedding(SelfUpdating):
    """FIITED: per-vector chunk pruning during training, to a budget, with regrowth, in a
    store whose every part shrinks and grows with the live chunks.

    Choices where the paper leaves room (all ours):

    - Utility: ``u <- gamma * u + a * g`` per chunk every step, with ``a * g`` the sum over
      the row's ``a`` accesses in the step of the L2 norm of the gradient reaching that
      chunk of the output. Pruned chunks read as zeros but still receive that output
      gradient; a vector's next pruned chunk adds it to the sketch and enters the candidate
      ring. The decay is lazy (utilities are stored scaled by ``gamma ** -age`` and
      renormalised at each event), so a step costs O(batch), not O(table).
    - Prefix rule: a chunk's score is the minimum utility of itself and the chunks before
      it in its vector, which is non-increasing along the vector, so keeping the best
      scores (ties: lower chunk first, then lower row) keeps a prefix of each vector.
    - Schedule: the kept fraction of chunks falls from 1 to ``budget`` along the cubic
      curve of gradual pruning (Zhu & Gupta 2017), reached at ``warmup_steps`` and held
      after; each event keeps the best-scored chunks up to that count. With
      ``utility_threshold`` it keeps every chunk whose score reaches the threshold.
    - Regrowth: at each event the candidates (the ring's next chunks, read since the last
      event and still a vector's next chunk) compete with the live chunks, scored by their
      sketch estimate (capped by the score of the chunk before them), so a vector grows by
      at most one chunk per event. A regrown chunk starts at zero, the value it read while
      pruned, with utility 0 and, for Adagrad, fresh state; a row that comes back starts
      a fresh row-wise accumulator.
    - Optimizer: ours, applied in :meth:`after_step` to the rows read in the step.
      ``rowwise_adagrad``: one accumulator per live row, fed the mean squared gradient over
      the row's live values (fbgemm's rule on the row as it now is); a row keeps its
      accumulator while it lives. ``adagrad``: one per live value; ``sgd``: none.
    - Memory: ``parameters`` = the pool; ``auxiliary`` = index (keys, chunk starts, feature
      offsets, candidate ring) and utilities (live-chunk utilities, sketch, decay clock);
      ``optimizer`` = the accumulators. ``memory_history`` lists ``(step, parameters +
      auxiliary bytes)`` at construction and after each event; ``events`` records each
      event's figures.
    - Training contract: one forward, then ``backward``, then :meth:`after_step`; the
      gradient is read from the forward's output, which is a leaf tensor while training.
    """

    Options = FiitedOptions
    # buffers that :meth:`_rebuild` replaces (their sizes follow the live chunks)
    keys: torch.Tensor
    chunk_start: torch.Tensor
    pool: torch.Tensor
    utility: torch.Tensor
    opt_state: torch.Tensor

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
        wide = self.total_chunks >= 2**31
        self.key_dtype = torch.int64 if wide else torch.int32

        offsets = [0]
        for n in self.cardinalities[:-1]:
            offsets.append(offsets[-1] + n)
        generator = torch.Generator().manual_seed(context.seed)
        init = torch.cat(
            [
                (torch.rand(n, self.dim, generator=generator) * 2 - 1) * math.sqrt(1.0 / n)
                for n in self.cardinalities
            ]
        )  # [N, D]; chunk k of row p goes to k * N + p
        pool = init.view(self.rows, self.chunks, self.chunk_dim).transpose(0, 1)
        width = max(1, math.ceil(options.tracked * self.total_chunks / 2))
        ring = max(1, math.ceil(options.tracked * self.total_chunks))
        kd = self.key_dtype
        self.register_buffer("offsets", torch.tensor(offsets, dtype=torch.int64, device=device))
        self.register_buffer("keys", torch.arange(self.rows, dtype=kd, device=device))
        starts = [k * self.rows for k in range(self.chunks + 1)]
        self.register_buffer("chunk_start", torch.tensor(starts, dtype=torch.int64, device=device))
        self.register_buffer("pool", pool.reshape(-1, self.chunk_dim).contiguous().to(device))
        self.register_buffer("utility", torch.zeros(self.total_chunks, device=device))
        self.register_buffer("sketch", torch.zeros(2, width, device=device))
        self.register_buffer("ring", torch.full((ring,), -1, dtype=kd, device=device))
        self.register_buffer("ring_pos", torch.zeros(1, dtype=torch.int64, device=device))
        self.register_buffer("clock", torch.zeros(1, dtype=torch.int64, device=device))
        self.register_buffer("opt_state", self._new_state(self.rows, self.total_chunks))
        self.memory_history: list[tuple[int, int]] = [(0, self._held_bytes())]
        self.events: list[dict[str, float]] = []

    # ----------------------------------------------------------------- storage
    def _new_state(self, live_rows: int, live_chunks: int) -> torch.Tensor:
        shape = {
            "rowwise_adagrad": (live_rows,),
            "adagrad": (live_chunks, self.chunk_dim),
            "sgd": (0,),
        }[self.optimizer_name]
        return torch.zeros(shape, device=self.offsets.device)

    def auxiliary_parts(self) -> dict[str, list[torch.Tensor]]:
        return {
            "index": [self.keys, self.chunk_start, self.offsets, self.ring, self.ring_pos],
            "utilities": [self.utility, self.sketch, self.clock],
        }

    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        parts = self.auxiliary_parts()
        return {
            "parameters": [self.pool],
            "auxiliary": [*parts["index"], *parts["utilities"]],
            "optimizer": [self.opt_state],
        }

    def compression_steps(self) -> int:
        """The first pruning event at or after the end of the schedule."""
        every = self.options.prune_every
        if self.options.utility_threshold is not None:
            return every
        return every * max(1, math.ceil(self.options.warmup_steps / every))

    def _held_bytes(self) -> int:
        memory = self.memory()
        return memory.parameters + memory.auxiliary

    def live_chunks(self) -> int:
        return self.pool.shape[0]

    def live_rows(self) -> int:
        return self.keys.shape[0]

    def _row_lengths(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Global row and length of every live row, ``[R]`` each, by position."""
        keys = self.keys.long()
        return keys % self.rows, self.chunks - keys // self.rows

    def vector_lengths(self) -> torch.Tensor:
        """Live chunks of every vector, ``[N]`` (always a prefix)."""
        rows, lengths = self._row_lengths()
        out = torch.zeros(self.rows, dtype=torch.int64, device=self.keys.device)
        out[rows] = lengths
        return out

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # the store changes size during training
        for name in ("keys", "pool", "utility", "opt_state"):
            saved = state_dict.get(prefix + name)
            current = getattr(self, name)
            if saved is not None and saved.shape != current.shape:
                setattr(
                    self, name, torch.empty(saved.shape, dtype=current.dtype, device=current.device)
                )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # ----------------------------------------------------------------- checkpoints
    _EVENT_FIELDS = ("step", "live_chunks", "live_rows", "freed", "regrown", "bytes")

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """Every buffer of the store at its current live size (keys ``[R]``, pool ``[C,
        D/K]``, utilities ``[C]``, optimizer state, sketch, ring, clock) and the memory
        history and events (``history.memory [E, 2]``, ``history.events [E, 6]``, int64).
        No row groups: positions in the store move at every pruning event, so an
        incremental checkpoint writes it whole, and nothing is quantized."""
        memory = torch.tensor(self.memory_history, dtype=torch.int64).view(-1, 2)
        events = events_table(self.events, self._EVENT_FIELDS)
        return state_with_history(self, {"memory": memory, "events": events})

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        history = load_with_history(self, tensors, self.offsets.device)
        self.memory_history = [(int(s), int(b)) for s, b in history["memory"].tolist()]
        self.events = events_of(history["events"], self._EVENT_FIELDS)
        self.drop_kept()

    # ----------------------------------------------------------------- lookup
    def _locate(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Position and length of global ``rows`` (any shape); length 0 where pruned.

        Searches the longest rows' keys first and only the still unresolved rows after
        that: most reads hit long (hot) rows, so a read costs about one binary search."""
        flat = rows.reshape(-1)
        pos = torch.zeros_like(flat)
        length = torch.zeros_like(flat)
        if self.keys.numel() == 0:
            return pos.view_as(rows), length.view_as(rows)
        todo = None  # all
        last = self.keys.numel() - 1
        for level in range(self.chunks):  # level j holds the rows of length K - j
            query = flat if todo is None else flat[todo]
            query = (query + level * self.rows).to(self.key_dtype)
            at = torch.searchsorted(self.keys, query).clamp_(max=last)
            hit = self.keys[at] == query
            if todo is None:
                pos = torch.where(hit, at, pos)
                length = hit * (self.chunks - level)
                todo = torch.nonzero(~hit).squeeze(1)
            else:
                found = todo[hit]
                pos[found] = at[hit]
                length[found] = self.chunks - level
                todo = todo[~hit]
            if todo.numel() == 0:
                break
        return pos.view_as(rows), length.view_as(rows)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        rows = sparse + self.offsets  # [B, F] global rows
        pos, length = self._locate(rows)
        if self.pool.shape[0] == 0:  # everything pruned
            length = torch.zeros_like(length)
        chunk = torch.arange(self.chunks, device=rows.device)
        live = chunk < length.unsqueeze(-1)  # [B, F, K]
        slots = torch.where(live, self.chunk_start[:-1] + pos.unsqueeze(-1), 0)
        pool = self.pool if self.pool.shape[0] else self.pool.new_zeros(1, self.chunk_dim)
        values = torch.nn.functional.embedding(slots, pool)  # [B, F, K, c]
        out = (values * live.unsqueeze(-1)).reshape(*sparse.shape, self.dim)
        return self.keep_for_update(out, rows, pos, length, slots, live)

    # ----------------------------------------------------------------- training
    def after_step(self, step: int) -> None:
        kept = self.take_for_update()
        if kept is not None:
            self._apply_gradient(step, *kept)
        if step % self.options.prune_every == 0:
            self._prune(step)

    def _hashes(self, ids: torch.Tensor) -> list[torch.Tensor]:
        base = ids.long() % _PRIME
        width = self.sketch.shape[1]
        return [(base * a + b) % _PRIME % width for a, b in zip(_HASH_A, _HASH_B, strict=True)]

    def _estimate(self, ids: torch.Tensor) -> torch.Tensor:
        """Count-mean-min estimate of the (scaled) utility of pruned chunks ``ids``: each
        hash's bucket less the mean of the other buckets (the collision noise it carries
        on average), the smaller of the two, at least 0."""
        width = self.sketch.shape[1]
        estimates = []
        for h, hashed in enumerate(self._hashes(ids)):
            bucket = self.sketch[h, hashed]
            noise = (self.sketch[h].sum() - bucket) / max(1, width - 1)
            estimates.append(bucket - noise)
        return torch.minimum(*estimates).clamp_(min=0)

    @torch.no_grad()
    def _apply_gradient(
        self,
        step: int,
        rows: torch.Tensor,
        pos: torch.Tensor,
        length: torch.Tensor,
        slots: torch.Tensor,
        live: torch.Tensor,
        out: torch.Tensor,
    ) -> None:
        grad = out.grad.view(*slots.shape, self.chunk_dim)  # [B, F, K, c]
        age = step - int(self.clock)
        if self.options.decay < 1 and age * -math.log(self.options.decay) > 40:
            self._renormalise(step)
            age = 0
        norms = (grad * grad).sum(-1).sqrt_() * self.options.decay**-age  # [B, F, K]
        if self.pool.shape[0]:  # slot 0 stands for pruned chunks and gets 0
            self.utility.index_add_(0, slots.reshape(-1), (norms * live).reshape(-1))
        if self.options.regrow:
            self._track_pruned(rows, length, norms)
        if self.optimizer_name == "rowwise_adagrad":
            self._rowwise_update(pos, grad * live.unsqueeze(-1))
        else:
            self._valuewise_update(slots[live], grad[live])

    def _track_pruned(self, rows: torch.Tensor, length: torch.Tensor, norms: torch.Tensor) -> None:
        """Add each read vector's next pruned chunk to the sketch and the candidate ring."""
        at = torch.nonzero(length.reshape(-1) < self.chunks).squeeze(1)
        if at.numel() == 0:
            return
        nxt = length.reshape(-1)[at]
        ids = rows.reshape(-1)[at] * self.chunks + nxt
        value = norms.reshape(-1)[at * self.chunks + nxt]
        for h, hashed in enumerate(self._hashes(ids)):
            self.sketch[h].index_add_(0, hashed, value)
        size = self.ring.numel()
        ids = ids[-size:].to(self.key_dtype)
        where = (int(self.ring_pos) + torch.arange(len(ids), device=ids.device)) % size
        self.ring[where] = ids
        self.ring_pos.add_(len(ids)).remainder_(size)

    def _rowwise_update(self, pos: torch.Tensor, grad: torch.Tensor) -> None:
        """Row-wise Adagrad on the live rows read; ``grad [B, F, K, c]`` is zero on pruned
        chunks, so pruned rows (position 0 stands in for them) add nothing."""
        if self.keys.numel() == 0:
            return
        unique, inverse = torch.unique(pos.reshape(-1), return_inverse=True)
        summed = grad.new_zeros(len(unique), self.dim)
        summed.index_add_(0, inverse, grad.reshape(-1, self.dim))
        lengths = self.chunks - self.keys[unique] // self.rows
        self.opt_state.index_add_(0, unique, summed.pow(2).sum(1) / (lengths * self.chunk_dim))
        scale = self.opt_state[unique].sqrt_().add_(ADAGRAD_EPS).reciprocal_()
        scale.mul_(-self.learning_rate)
        # chunks past a row's length get a zero update; clamped slots keep them in bounds
        slots = self.chunk_start[:-1] + unique.unsqueeze(1)
        slots.clamp_(max=self.pool.shape[0] - 1)
        update = (summed * scale.unsqueeze(1)).view(-1, self.chunk_dim)
        self.pool.index_add_(0, slots.reshape(-1), update)

    def _valuewise_update(self, slots: torch.Tensor, grad: torch.Tensor) -> None:
        if slots.numel() == 0:
            return
        unique, inverse = torch.unique(slots, return_inverse=True)
        summed = grad.new_zeros(len(unique), self.chunk_dim).index_add_(0, inverse, grad)
        lr = self.learning_rate
        if self.optimizer_name == "adagrad":
            self.opt_state.index_add_(0, unique, summed.pow(2))
            update = summed * lr / (self.opt_state[unique].sqrt() + ADAGRAD_EPS)
        else:
            update = summed * lr
        self.pool.index_add_(0, unique, -update)

    def _renormalise(self, step: int) -> None:
        factor = self.options.decay ** (step - int(self.clock))
        self.utility.mul_(factor)
        self.sketch.mul_(factor)
        self.clock.fill_(step)

    def kept_fraction(self, step: int) -> float:
        """Fraction of all chunks the schedule keeps at ``step`` (budget mode)."""
        budget, warmup = self.options.budget, self.options.warmup_steps
        if warmup == 0:
            return budget
        progress = min(1.0, step / warmup)
        return budget + (1 - budget) * (1 - progress) ** 3

    # ----------------------------------------------------------------- pruning
    def _candidates(self, prefix: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Regrowth candidates: ``(row, chunk, position or -1, score)``, one per chunk."""
        ids = torch.unique(self.ring[self.ring >= 0].long())
        rows, chunk = ids // self.chunks, ids % self.chunks
        pos, length = self._locate(rows)
        still = length == chunk  # still the vector's next chunk
        rows, chunk, pos, ids = rows[still], chunk[still], pos[still], ids[still]
        score = self._estimate(ids)
        grown = chunk > 0
        if bool(grown.any()):
            before = prefix[pos[grown], chunk[grown] - 1]
            score[grown] = torch.minimum(score[grown], before)
        return rows, chunk, torch.where(grown, pos, -1), score

    def _select(self, step: int, score: torch.Tensor, chunk: torch.Tensor, row: torch.Tensor):
        """Which entries to keep, ``[M]`` bool, by score (ties: lower chunk, then row)."""
        if self.options.utility_threshold is not None:
            return score >= self.options.utility_threshold
        target = min(len(score), round(self.kept_fraction(step) * self.total_chunks))
        if target >= len(score):
            return torch.ones_like(score, dtype=torch.bool)
        if target == 0:
            return torch.zeros_like(score, dtype=torch.bool)
        tau = torch.kthvalue(score.cpu(), len(score) - target + 1).values.item()
        keep = score > tau
        missing = target - int(keep.sum())
        if missing > 0:  # ties at tau: lower chunk, then lower row first (prefixes hold)
            ties = torch.nonzero(score == tau).squeeze(1)
            order = torch.argsort(chunk[ties] * self.rows + row[ties])
            keep[ties[order[:missing]]] = True
        return keep

    @torch.no_grad()
    def _prune(self, step: int) -> None:
        self._renormalise(step)
        device, n_chunks = self.pool.device, self.chunks
        rows, lengths = self._row_lengths()  # [R]
        positions = torch.arange(len(rows), device=device)
        chunk = torch.arange(n_chunks, device=device)
        live = chunk < lengths.unsqueeze(1)  # [R, K]
        old_slot = self.chunk_start[:-1] + positions.unsqueeze(1)  # [R, K]
        utility = torch.full(live.shape, -math.inf, device=device)
        utility[live] = self.utility[old_slot[live]]
        prefix = torch.cummin(utility, dim=1).values
        live_pos, live_chunk = live.nonzero(as_tuple=True)
        if self.options.regrow:
            c_row, c_chunk, c_pos, c_score = self._candidates(prefix)
        else:
            c_row = c_chunk = c_pos = torch.zeros(0, dtype=torch.int64, device=device)
            c_score = torch.zeros(0, device=device)
        keep = self._select(
            step,
            torch.cat([prefix[live], c_score]),
            torch.cat([live_chunk, c_chunk]),
            torch.cat([rows[live_pos], c_row]),
        )
        kept_live, kept_cand = keep[: len(live_pos)], keep[len(live_pos) :]
        # new lengths: kept prefix of each live row, +1 where its next chunk regrew
        new_len = torch.zeros_like(lengths).index_add_(0, live_pos, kept_live.long())
        regrown_live = kept_cand & (c_pos >= 0)
        new_len.index_add_(0, c_pos[regrown_live], torch.ones_like(c_pos[regrown_live]))
        born = kept_cand & (c_pos < 0)
        freed = int(live.sum()) - int(kept_live.sum())
        self._rebuild(
            torch.cat([rows, c_row[born]]),
            torch.cat([new_len, torch.ones_like(c_row[born])]),
            torch.cat([positions, torch.full_like(c_row[born], -1)]),
            lengths,
        )
        held = self._held_bytes()
        self.memory_history.append((step, held))
        self.events.append(
            {
                "step": step,
                "live_chunks": self.live_chunks(),
                "live_rows": self.live_rows(),
                "freed": freed,
                "regrown": int(kept_cand.sum()),
                "bytes": held,
            }
        )
        self.ring.fill_(-1)
        self.ring_pos.zero_()

    def _rebuild(
        self,
        rows: torch.Tensor,
        lengths: torch.Tensor,
        old_pos: torch.Tensor,
        old_len: torch.Tensor,
    ) -> None:
        """Lay the store out again for rows ``[M]`` with new ``lengths`` (0 drops a row);
        ``old_pos`` is each row's position in the old store (-1: new row)."""
        device, n_chunks = self.pool.device, self.chunks
        alive = lengths > 0
        rows, lengths, old_pos = rows[alive], lengths[alive], old_pos[alive]
        keys = (n_chunks - lengths) * self.rows + rows
        keys, order = torch.sort(keys)
        lengths, old_pos = lengths[order], old_pos[order]
        chunk = torch.arange(n_chunks, device=device)
        counts = (chunk < lengths.unsqueeze(1)).sum(0)  # rows having chunk k
        start = torch.zeros(n_chunks + 1, dtype=torch.int64, device=device)
        start[1:] = torch.cumsum(counts, 0)
        new_live = chunk < lengths.unsqueeze(1)  # [R', K]
        had = torch.zeros_like(lengths)
        had[old_pos >= 0] = old_len[old_pos[old_pos >= 0]]
        carried = new_live & (chunk < had.unsqueeze(1))
        positions = torch.arange(len(keys), device=device).unsqueeze(1)
        dst = (start[:-1] + positions)[carried]
        src = (self.chunk_start[:-1] + old_pos.unsqueeze(1))[carried]
        total = int(start[-1])
        pool = self.pool.new_zeros(total, self.chunk_dim)
        pool[dst] = self.pool[src]
        utility = self.utility.new_zeros(total)
        utility[dst] = self.utility[src]
        state = self._new_state(len(keys), total)
        if self.optimizer_name == "rowwise_adagrad":
            kept = old_pos >= 0
            state[kept] = self.opt_state[old_pos[kept]]
        elif self.optimizer_name == "adagrad":
            state[dst] = self.opt_state[src]
        self.keys, self.chunk_start = keys.to(self.key_dtype), start
        self.pool, self.utility, self.opt_state = pool, utility, state

    # the chunk budget, on the bytes once pruned (fiited_bytes_bound): FIITED's own budget
    # counts the pool alone; here the live rows' keys and optimizer state, the chunks'
    # utilities and the sketch and ring count too
    options_at_budget = knob_hook(
        "fiited",
        lambda dim, b: {"dim": dim, "budget": b},
        1e-6,
        1.0,
        bytes_of=lambda options, cards, optimizer: fiited_bytes_bound(
            list(cards), FiitedOptions(**options), optimizer
        ),
    )


def fiited_bytes_bound(
    cardinalities: list[int],
    options: FiitedOptions,
    optimizer: SparseOptimizer = "rowwise_adagrad",
) -> int:
    """Most total bytes FIITED holds once its schedule keeps ``C = round(budget x N x K)``
    chunks: the pool and utilities of ``C`` chunks, keys of at most ``min(N, C)`` live
    rows, the ``optimizer``'s state (row-wise Adagrad: one float a live row; Adagrad: one a
    live value; SGD: none), and the fixed index, sketch and ring
    (``N`` ids, ``K`` chunks a row). At ``budget`` 1 it is the bytes FIITED is built with."""
    rows, k = sum(cardinalities), options.chunks
    total_chunks = rows * k
    key = 8 if total_chunks >= 2**31 else 4
    kept = min(total_chunks, round(options.budget * total_chunks))
    live_rows = min(rows, kept)
    chunk_dim = options.dim // k
    width = max(1, math.ceil(options.tracked * total_chunks / 2))
    ring = max(1, math.ceil(options.tracked * total_chunks))
    fixed = (k + 1) * 8 + len(cardinalities) * 8 + ring * key + 8 + 2 * width * 4 + 8
    state = {"rowwise_adagrad": live_rows * 4, "adagrad": kept * chunk_dim * 4, "sgd": 0}
    return kept * (chunk_dim + 1) * 4 + live_rows * key + state[optimizer] + fixed
