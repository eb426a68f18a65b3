"""``alpt``: Adaptive Low-Precision Training of embeddings (Li, Guo, Hou, Zhang, Tang, Tang,
Zhang and Li, "Adaptive Low-Precision Training for Embeddings in Click-Through Rate
Prediction", AAAI 2023, arXiv 2212.05735).

The tables are integers during training, not only for serving: every row is ``D`` signed
``b``-bit codes ``q`` in ``[-Q_n, Q_p]`` (``Q_n = 2^(b-1)``, ``Q_p = 2^(b-1) - 1``) and one
learned float step size ``Δ`` (per row: the paper's per-embedding step; ``per: table``
shares one per feature). A lookup de-quantizes, ``w = Δ q``. A training step, for the rows
the batch read:

1. **Weights.** The row's de-quantized value takes one step of the run's sparse optimizer
   in full precision: ``w' = w - lr * update(g_w)``.
2. **Step size (LSQ).** ``Q(w; Δ) = Δ * round(clip(w / Δ, -Q_n, Q_p))``; with the straight-
   through estimator ``dQ/dΔ`` is ``round(v) - v`` inside the range (``v = w / Δ``, round
   half up) and ``-Q_n`` / ``Q_p`` at the clip bounds. ``g_Δ = s * sum_j g_j dQ_j/dΔ``
   over the row's values, scaled by LSQ's gradient scale ``s = 1 / sqrt(N Q_p)``.
   ``Δ`` then takes a step of its own optimizer (the run's sparse optimizer family, one
   accumulator per step size) at ``step_lr``, floored at ``min_step``. With
   ``learn_step: false`` the step stays at its init: LPT, the paper's baseline.
3. **Write back.** ``q = SR(clip(w' / Δ', -Q_n, Q_p))`` with stochastic rounding,
   ``SR(x) = floor(x + u)``, ``u ~ U[0, 1)`` (the paper's analysis: stochastic rounding
   converges faster and to a smaller error than deterministic rounding in low-precision
   training), drawn from a ``torch.Generator`` the module owns (seeded by the run's seed,
   its state checkpointed) so a run is bit-for-bit repeatable.

What was followed and what was chosen (the paper's method section was not reachable from
here, only its abstract and reviews; the public ALPT implementation in the Hetu system,
its ``ALPTEmbTrainer`` and the CUDA kernels ``lsq_rounding_gradient`` and
``assign_alpt_embedding``, gave the details):

* Per-row step sizes, symmetric signed codes ``[-2^(b-1), 2^(b-1) - 1]``, zero point 0,
  ``round(v) = floor(v + 0.5)``, the LSQ gradient as above, and stochastic rounding on the
  write-back: as Hetu's kernels.
* Gradient scale ``N = B * D`` (``B`` the batch's examples, ``D`` the dim): Hetu's
  ``1 / sqrt(batch_size * dim * (2^(b-1) - 1))``, not LSQ's per-layer weight count.
* Hetu (and the paper's Algorithm, per its reviews: "optimizes model parameters and step
  sizes alternately") computes ``g_Δ`` in a SECOND forward and backward of the whole model
  on the updated weights. The suite's train step runs one forward per batch
  (:func:`suite.engine.train.train_step`), so here ``g_j`` is the first backward's gradient
  of the loss at the value (the pre-update point, a first-order approximation; ``dQ/dΔ``
  is evaluated at the updated weights ``w'``, as in the second pass). This halves the step's
  cost and is the main deviation.
* Step-size init (Hetu: a constant ``init_scale``): by default the table's init bound
  ``a = sqrt(1/n)`` over ``Q_p``, so the initial uniform values exactly span the codes;
  ``step_init`` sets one constant instead. The initial values are drawn uniform in ``±a``
  (as ``full`` draws them) and written with stochastic rounding.
* 4 and 2 bits are packed into bytes (two or four codes per byte, offset by ``Q_n``);
  8 bits are stored as ``int8``. ``min_step`` keeps ``Δ`` positive (LSQ has no floor).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pydantic import Field

from suite.embeddings.base import (
    EmbeddingContext,
    EmbeddingOptions,
    SelfUpdating,
)
from suite.embeddings.budget import knob_hook
from suite.embeddings.tables import ADAGRAD_EPS
from suite.registry import EMBEDDINGS

Bits = Literal[8, 4, 2]
Granularity = Literal["row", "table"]


class ALPTOptions(EmbeddingOptions):
    """Bit width, step-size init and learning rate, rounding and step granularity.
    ``backend`` is not used: ALPT owns its integer tables. ``init`` (``reference`` and
    ``torch`` alike): values uniform in ``±sqrt(1/n)`` per feature, as ``full`` draws them,
    then quantized."""

    bits: Bits = Field(8, description="bits per stored value (8: int8; 4, 2: packed in bytes)")
    step_init: float | None = Field(
        None,
        gt=0,
        description="initial step size Δ (default: each table's init bound sqrt(1/n) over "
        "Q_p = 2^(bits-1) - 1, so the initial values span the codes)",
    )
    step_lr: float = Field(
        1e-4,
        gt=0,
        allow_inf_nan=False,
        description="learning rate of the step sizes, apart from the embeddings' (their "
        "optimizer: the run's sparse optimizer family); 1e-4 suits 8 bits on criteo-synth "
        "(two seeds of the quick profile), 4 bits did better at 1e-3",
    )
    learn_step: bool = Field(
        True, description="learn the step sizes (false: LPT, the paper's fixed-step baseline)"
    )
    stochastic: bool = Field(
        True, description="stochastic rounding on write-back (false: round to nearest)"
    )
    per: Granularity = Field(
        "row", description="step-size granularity: one per row (the paper) or per table"
    )
    min_step: float = Field(1e-8, gt=0, description="floor of every step size (keeps Δ > 0)")

    fbgemm_dim_rule = False  # integer tables of its own: no fbgemm dim rule


def code_range(bits: int) -> tuple[int, int]:
    """``(-Q_n, Q_p) = (-2^(bits-1), 2^(bits-1) - 1)``: the signed codes."""
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def round_half_up(x: torch.Tensor) -> torch.Tensor:
    """``floor(x + 0.5)`` (Hetu's rounding; ``torch.round`` rounds half to even)."""
    return torch.floor(x + 0.5)


def lsq_quantize(w: torch.Tensor, step: torch.Tensor, bits: int) -> torch.Tensor:
    """``Q(w; Δ) = Δ * round(clip(w / Δ, -Q_n, Q_p))``; ``step`` broadcasts over ``w``."""
    low, high = code_range(bits)
    return round_half_up((w / step).clamp(low, high)) * step


def lsq_step_derivative(w: torch.Tensor, step: torch.Tensor, bits: int) -> torch.Tensor:
    """``dQ(w; Δ)/dΔ`` by the straight-through estimator: ``round(v) - v`` for
    ``-Q_n < v < Q_p`` (``v = w / Δ``), ``-Q_n`` at or below the range, ``Q_p`` at or above."""
    low, high = code_range(bits)
    v = w / step
    inside = round_half_up(v) - v
    return torch.where(v <= low, float(low), torch.where(v >= high, float(high), inside))


def lsq_gradient_scale(values: int, bits: int) -> float:
    """LSQ's gradient scale ``1 / sqrt(N Q_p)``, ``N`` the values the step's gradient sums
    (here the batch's ``B * D``, as the Hetu implementation of ALPT takes it)."""
    return 1.0 / math.sqrt(values * code_range(bits)[1])


def stochastic_round(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``floor(x + u)``, ``u ~ U[0, 1)`` from ``generator``: ``E[SR(x)] = x``."""
    u = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    return torch.floor(x + u)


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Signed codes ``[R, D]`` -> storage: ``int8 [R, D]`` at 8 bits; at 4 and 2 bits
    ``uint8 [R, ceil(D * bits / 8)]``, ``8 / bits`` codes a byte (offset by ``Q_n``, the
    first code in the low bits)."""
    if bits == 8:
        return codes.to(torch.int8)
    per = 8 // bits
    rows, dim = codes.shape
    width = -(-dim // per)
    unsigned = (codes.to(torch.int32) + 2 ** (bits - 1)).to(torch.uint8)
    padded = unsigned.new_zeros(rows, width * per)
    padded[:, :dim] = unsigned
    grouped = padded.view(rows, width, per)
    packed = grouped[..., 0].clone()
    for k in range(1, per):
        packed |= grouped[..., k] << (k * bits)
    return packed


def unpack_codes(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """The inverse of :func:`pack_codes`: storage -> signed codes ``[R, dim]`` float32."""
    if bits == 8:
        return packed.float()
    per, mask = 8 // bits, 2**bits - 1
    parts = [(packed >> (k * bits)) & mask for k in range(per)]
    unsigned = torch.stack(parts, dim=-1).reshape(packed.shape[0], -1)[:, :dim]
    return unsigned.float() - 2 ** (bits - 1)


@EMBEDDINGS.register("alpt")
class ALPTEmbedding(SelfUpdating):
    """ALPT (Li et al., AAAI 2023, https://arxiv.org/abs/2212.05735): integer tables
    trained in low precision, a learned (LSQ) step size per row, stochastic rounding.

    One table of ``sum(n)`` rows holds every feature (``offsets`` place each feature's ids).
    Training, as ROBE's array is trained: the forward's output is a leaf tensor while
    training; :meth:`after_step` updates the rows read (see the module doc): the run's
    sparse optimizer on the de-quantized rows (``rowwise_adagrad``: one accumulator per row;
    ``adagrad``: one per value; ``sgd``: none), the step sizes by their LSQ gradient
    (``sgd``, or Adagrad with one accumulator per step size for either Adagrad), then
    stochastic rounding back to codes.

    Memory: ``parameters`` = the codes (``int8 [R, D]``, or packed ``uint8``) and the float32
    step sizes; ``auxiliary`` = the feature offsets ``[F]``; ``optimizer`` = the rows' and
    step sizes' accumulators. The rounding generator's state is checkpointed, not counted.
    """

    Options = ALPTOptions

    def __init__(self, options: ALPTOptions, context: EmbeddingContext) -> None:
        super().__init__()
        self.options = options
        self.dim, self.bits = options.dim, options.bits
        self.cardinalities = list(context.cardinalities)
        self.optimizer_name = context.sparse_optimizer
        self.learning_rate = context.sparse_lr
        device = context.device
        rows = sum(self.cardinalities)
        offsets = [0]
        for n in self.cardinalities[:-1]:
            offsets.append(offsets[-1] + n)
        # a meta-device build (memory estimates, suite.reproduce.costs) draws on the CPU
        where = "cpu" if device.type == "meta" else device
        self.generator = torch.Generator(device=where).manual_seed(context.seed)
        bounds = torch.cat(
            [torch.full((n,), math.sqrt(1.0 / n)) for n in self.cardinalities]
        ).unsqueeze(1)
        init = torch.Generator().manual_seed(context.seed)
        values = (torch.rand(rows, self.dim, generator=init) * 2 - 1) * bounds
        qp = code_range(self.bits)[1]
        if options.step_init is None:
            row_step = bounds[:, 0] / qp
        else:
            row_step = torch.full((rows,), options.step_init)
        step = row_step[torch.tensor(offsets)] if options.per == "table" else row_step
        self.register_buffer("offsets", torch.tensor(offsets, dtype=torch.int64, device=device))
        self.register_buffer("step", step.to(device))
        self.register_buffer("codes", pack_codes(torch.zeros(rows, self.dim), self.bits).to(device))
        row_state = {"rowwise_adagrad": (rows,), "adagrad": (rows, self.dim), "sgd": (0,)}
        self.register_buffer(
            "row_state", torch.zeros(row_state[self.optimizer_name], device=device)
        )
        learned = options.learn_step and self.optimizer_name != "sgd"
        step_state = len(step) if learned else 0
        self.register_buffer("step_state", torch.zeros(step_state, device=device))
        all_rows = torch.arange(rows, device=device)
        self._write(all_rows, values.to(device), self.step[self._step_slots(all_rows)])

    # ----------------------------------------------------------------- storage
    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        return {
            "parameters": [self.codes, self.step],
            "auxiliary": [self.offsets],
            "optimizer": [t for t in (self.row_state, self.step_state) if t.numel()],
        }

    def layout(self) -> dict[str, Any]:
        """Bits, rows, bytes a row's codes take, and the step-size granularity."""
        return {
            "bits": self.bits,
            "rows": int(self.codes.shape[0]),
            "row_bytes": int(self.codes.shape[1]),
            "step_per": self.options.per,
        }

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """Codes, step sizes, both optimizers' state, offsets and the rounding generator."""
        state = {k: v.detach() for k, v in self.state_dict().items()}
        state["generator"] = self.generator.get_state()
        return state

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        device = self.codes.device
        tensors = dict(tensors)
        self.generator.set_state(tensors.pop("generator").cpu())
        self.load_state_dict({k: v.to(device) for k, v in tensors.items()})
        self.drop_kept()

    # ----------------------------------------------------------------- lookup
    def _step_slots(self, rows: torch.Tensor) -> torch.Tensor:
        """The step size of each global row: itself, or its feature (``per: table``)."""
        if self.options.per == "row":
            return rows
        return torch.searchsorted(self.offsets, rows, right=True) - 1

    def dequantize(self, rows: torch.Tensor) -> torch.Tensor:
        """``rows [U] -> [U, D]``: ``Δ q`` of those global rows."""
        codes = unpack_codes(self.codes[rows], self.bits, self.dim)
        return codes * self.step[self._step_slots(rows)].unsqueeze(1)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        rows = sparse + self.offsets
        out = self.dequantize(rows.reshape(-1)).view(*sparse.shape, self.dim)
        return self.keep_for_update(out, rows)

    # ----------------------------------------------------------------- training
    @torch.no_grad()
    def update_read(self, rows: torch.Tensor, grad: torch.Tensor) -> None:
        """One ALPT step for ``rows [B, F]`` read, ``grad [B, F, D]`` at their values."""
        unique, inverse = torch.unique(rows.reshape(-1), return_inverse=True)
        summed = grad.new_zeros(len(unique), self.dim)
        summed.index_add_(0, inverse, grad.reshape(-1, self.dim))
        updated = self.dequantize(unique) - self.learning_rate * self._row_update(unique, summed)
        slots = self._step_slots(unique)
        old = self.step[slots].unsqueeze(1)
        per_row = (summed * lsq_step_derivative(updated, old, self.bits)).sum(dim=1)
        scale = lsq_gradient_scale(rows.shape[0] * self.dim, self.bits)
        if self.options.per == "row":
            step_ids, step_grad = slots, per_row * scale
        else:
            step_ids, at = torch.unique(slots, return_inverse=True)
            step_grad = per_row.new_zeros(len(step_ids)).index_add_(0, at, per_row) * scale
        if self.options.learn_step:
            self._update_steps(step_ids, step_grad)
        self._write(unique, updated, self.step[slots])

    def _row_update(self, unique: torch.Tensor, summed: torch.Tensor) -> torch.Tensor:
        """The sparse optimizer's direction (before ``-lr``) for rows ``unique``."""
        if self.optimizer_name == "sgd":
            return summed
        if self.optimizer_name == "adagrad":
            self.row_state[unique] += summed.pow(2)
            return summed / self.row_state[unique].sqrt().add_(ADAGRAD_EPS)
        self.row_state[unique] += summed.pow(2).mean(dim=1)
        return summed / self.row_state[unique].sqrt().add_(ADAGRAD_EPS).unsqueeze(1)

    def _update_steps(self, ids: torch.Tensor, grad: torch.Tensor) -> None:
        """``Δ -= step_lr * grad`` (SGD) or its Adagrad form; floored at ``min_step``."""
        if self.optimizer_name != "sgd":
            self.step_state[ids] += grad.pow(2)
            grad = grad / self.step_state[ids].sqrt().add_(ADAGRAD_EPS)
        new = self.step[ids] - self.options.step_lr * grad
        self.step[ids] = new.clamp_(min=self.options.min_step)

    def _write(self, rows: torch.Tensor, values: torch.Tensor, step: torch.Tensor) -> None:
        """Quantize ``values [U, D]`` with ``step [U]`` into the codes of ``rows [U]``."""
        low, high = code_range(self.bits)
        scaled = (values / step.unsqueeze(1)).clamp_(low, high)
        if self.options.stochastic:
            codes = stochastic_round(scaled, self.generator).clamp_(low, high)
        else:
            codes = round_half_up(scaled)
        self.codes[rows] = pack_codes(codes, self.bits)

    # the widest bit width (2, 4, 8) that fits: ALPT's bytes are fixed ratios of full's
    # (at dim 16 with row-wise state: 8 bits 28/68, 4 bits 20/68, 2 bits 16/68 of each
    # row), so it sits on the curve only at the budgets these reach
    options_at_budget = knob_hook(
        "alpt", lambda dim, i: {"dim": dim, "bits": WIDTHS[int(i)]}, 0, 2, integer=True
    )


WIDTHS: tuple[int, ...] = (2, 4, 8)
"""ALPT's bit widths, fewest bytes first (its budget knob)."""
