"""Check-N-Run's incremental and quantized checkpoints (Eisenman et al., arXiv 2010.08679):
row tracking, row-wise quantization, and applying a chain of increments.

- **Incremental**: a :class:`RowTracker` marks, per row group (physical table), the rows
  each step reads (with a sparse optimizer exactly the rows it modifies); an incremental
  checkpoint writes only those rows of every row-indexed tensor (weights and optimizer
  state) and the small dense state whole. Restore reads the last full checkpoint and
  applies its increments in order. A new full checkpoint is taken when the increments
  since the last full one would make a restore read more than ``restore_budget`` times
  a full checkpoint's bytes (the next increment predicted by the last one: our simple
  stand-in for the paper's history-based choice of when to take a new baseline), which
  bounds restore cost; ``max_increments`` caps the chain too.
- **Quantized**: embedding weights are written row-wise uniform asymmetric at 8, 4 or 2
  bits (per row a float16 scale and minimum, as fbgemm's n-bit rows; codes packed into
  bytes); at 4 bits and below each row's range is first searched greedily (Check-N-Run's
  adaptive asymmetric quantization, the search of Guan et al. 2019 with fbgemm's 200 bins
  and 16% cut), which clips outliers where that lowers the row's error. As in the paper,
  only embedding vectors are quantized: their row-wise optimizer state and the dense
  layers stay exact, so at dim ``D`` a row's ``4 D + 4`` bytes become ``D bits / 8 + 8``
  (see :func:`quantization_bound`). :func:`adaptive_bits` picks the bit width from the
  expected number of restores, since each restore from a quantized checkpoint adds its
  quantization error again.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from suite.embeddings.base import EmbeddingMethod
from suite.engine.checkpoint.store import Chain, tensor_bytes
from suite.models.base import RecModel

BITS = (32, 8, 4, 2)


def adaptive_bits(
    expected_restores: float, auc_cost_per_restore: dict[int, float], tolerance: float = 0.001
) -> int:
    """Check-N-Run's adaptive bit width: the fewest bits whose accuracy cost, paid again at
    each of the expected restores, stays within ``tolerance`` (AUC); 32 (no quantization)
    when none does. ``auc_cost_per_restore`` maps bits to the measured AUC cost of one
    restore from a checkpoint quantized at that width."""
    for bits in sorted(auc_cost_per_restore):
        if max(auc_cost_per_restore[bits], 0.0) * max(expected_restores, 1.0) <= tolerance:
            return bits
    return 32


GREEDY_BINS = 200
GREEDY_RATIO = 0.16
GREEDY_BLOCK_VALUES = 1 << 18
ADAPTIVE_MAX_BITS = 4
"""Bit widths at and below which quantization searches each row's range (Check-N-Run's
adaptive asymmetric quantization); wider ones use the row's min and max."""


def _range_loss(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, levels: int) -> torch.Tensor:
    """Squared error per row of ``x [R, D]`` quantized to ``levels`` steps on ``[lo, hi]``
    (clipped outside it), with the float16 scale and minimum the checkpoint stores."""
    lo16 = lo.half().float()
    span = hi - lo16
    scale = torch.where(span > 0, span / levels, torch.ones_like(span)).half().float()
    shifted = x - lo16[:, None]
    err = (shifted / scale[:, None]).round_().clamp_(0, levels).mul_(scale[:, None]).sub_(shifted)
    return torch.einsum("rd,rd->r", err, err)


def greedy_range(
    x: torch.Tensor, bits: int, bins: int = GREEDY_BINS, ratio: float = GREEDY_RATIO
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``x [R, D]`` the clipping range ``(lo [R], hi [R])`` of Check-N-Run's
    adaptive asymmetric quantization, the greedy search of Guan et al. (arXiv 1911.02079):
    from ``[min, max]``, move the end whose ``1 / bins`` step inward lowers the error more,
    until at most ``ratio`` of the range is cut; keep the lowest-error local optimum met
    on the way (``[min, max]`` when there is none). ``bins`` and ``ratio`` are fbgemm's."""
    block = max(1, GREEDY_BLOCK_VALUES // max(1, x.shape[1]))
    if x.shape[0] > block:  # blocks that stay in cache: the search is memory-bound
        parts = [greedy_range(b, bits, bins, ratio) for b in x.split(block)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    levels = (1 << bits) - 1
    lo, hi = x.min(dim=1).values, x.max(dim=1).values
    step = (hi - lo) / bins
    floor = step * (bins * (1 - ratio))
    cur_lo, cur_hi = lo.clone(), hi.clone()
    cur = _range_loss(x, lo, hi, levels)
    best = torch.full_like(cur, math.inf)
    best_lo, best_hi = lo.clone(), hi.clone()
    active = cur_lo + floor < cur_hi  # every row with a range takes the same ~bins*ratio steps
    while bool(active.any()):
        left = _range_loss(x, cur_lo + step, cur_hi, levels)
        right = _range_loss(x, cur_lo, cur_hi - step, levels)
        optimum = active & (cur < left) & (cur < right) & (cur < best)
        best = torch.where(optimum, cur, best)
        best_lo = torch.where(optimum, cur_lo, best_lo)
        best_hi = torch.where(optimum, cur_hi, best_hi)
        go_left = active & (left < right)
        go_right = active & ~(left < right)
        cur_lo = torch.where(go_left, cur_lo + step, cur_lo)
        cur_hi = torch.where(go_right, cur_hi - step, cur_hi)
        cur = torch.where(go_left, left, torch.where(go_right, right, cur))
        active &= cur_lo + floor < cur_hi
    return best_lo, best_hi


def quantize_rows(
    x: torch.Tensor, bits: int, adaptive: bool | None = None
) -> dict[str, torch.Tensor]:
    """Row-wise uniform asymmetric quantization of ``x [R, D]``: ``codes [R, ceil(D*bits/8)]``
    uint8 (``8 // bits`` codes per byte), ``scale [R]`` and ``minimum [R]`` float16.
    ``adaptive`` (default: at ``ADAPTIVE_MAX_BITS`` bits and below) quantizes each row on
    its :func:`greedy_range` instead of its min and max, clipping what falls outside."""
    x = x.detach().float().cpu()
    levels = (1 << bits) - 1
    if adaptive if adaptive is not None else bits <= ADAPTIVE_MAX_BITS:
        lo, hi = greedy_range(x, bits)
    else:
        lo, hi = x.min(dim=1).values, x.max(dim=1).values
    lo16 = lo.half()  # the scale spans from the stored minimum, as fbgemm's n-bit rows
    scale = ((hi - lo16.float()).clamp_(min=0) / levels).half()
    safe = torch.where(scale.float() > 0, scale.float(), torch.ones_like(lo))
    codes = ((x - lo16.float()[:, None]) / safe[:, None]).round_().clamp_(0, levels).to(torch.uint8)
    per_byte = 8 // bits
    pad = (-codes.shape[1]) % per_byte
    if pad:
        codes = torch.nn.functional.pad(codes, (0, pad))
    codes = codes.view(codes.shape[0], -1, per_byte)
    packed = torch.zeros(codes.shape[:2], dtype=torch.uint8)
    for k in range(per_byte):
        packed |= codes[:, :, k] << (k * bits)
    return {"codes": packed, "scale": scale, "minimum": lo16}


def dequantize_rows(q: dict[str, torch.Tensor], bits: int, dim: int) -> torch.Tensor:
    """Inverse of :func:`quantize_rows`: ``[R, dim]`` float32."""
    packed, per_byte = q["codes"], 8 // bits
    mask = (1 << bits) - 1
    codes = torch.stack([(packed >> (k * bits)) & mask for k in range(per_byte)], dim=2)
    codes = codes.reshape(packed.shape[0], -1)[:, :dim].float()
    return codes * q["scale"].float()[:, None] + q["minimum"].float()[:, None]


class RowTracker:
    """Marks, per row group of the embedding, the rows read since the last checkpoint.

    ``observe(sparse [B, F])`` costs one index transform and one scatter per step.
    """

    def __init__(self, model: RecModel) -> None:
        groups = model.embedding.checkpoint_row_groups()
        self.names = list(groups)
        self.rows = list(groups.values())
        device = next(iter(model.embedding.checkpoint_state().values())).device
        self.offsets = torch.tensor([0, *np.cumsum(self.rows)[:-1]], dtype=torch.int64).to(device)
        self.mask = torch.zeros(int(sum(self.rows)), dtype=torch.bool, device=device)

    @torch.no_grad()
    def observe(self, model: RecModel, sparse: torch.Tensor) -> None:
        ids = model.embedding.checkpoint_row_ids(sparse)
        if ids.numel():
            self.mask[(ids + self.offsets).reshape(-1)] = True

    def modified(self) -> dict[str, torch.Tensor]:
        """Group name -> sorted row ids read since the last :meth:`reset`."""
        out, start = {}, 0
        for name, rows in zip(self.names, self.rows, strict=True):
            out[name] = self.mask[start : start + rows].nonzero().flatten().cpu()
            start += rows
        return out

    def fraction(self) -> float:
        return float(self.mask.float().mean()) if self.mask.numel() else 0.0

    def reset(self) -> None:
        self.mask.zero_()


def _row_group(name: str, groups: dict[str, int]) -> str | None:
    """The row group a ``embedding.<group>.<what>`` tensor belongs to."""
    key = name.removeprefix("embedding.")
    group = key.rsplit(".", 1)[0]
    return group if group in groups else None


def is_weight(name: str, groups: dict[str, int]) -> bool:
    """Whether ``name`` is (a quantized part of) an embedding weight of a row group."""
    base = name.split(".q.", 1)[0]
    return (
        base.startswith("embedding.")
        and base.endswith(".weight")
        and _row_group(base, groups) is not None
    )


def quantized_row_bytes(dim: int, bits: int) -> int:
    """Bytes of one ``dim``-wide row quantized by :func:`quantize_rows`: packed codes plus
    a float16 scale and minimum."""
    return math.ceil(dim * bits / 8) + 4


def quantization_bound(embedding: EmbeddingMethod, bits: int) -> dict[str, float]:
    """What a ``bits``-bit checkpoint can at most save on ``embedding``, by arithmetic:
    per row, ``4 * dim`` bytes of float32 weights become :func:`quantized_row_bytes`, while
    the row-wise optimizer state (fbgemm's row-wise Adagrad: one float32 per row) and
    other tensors stay exact. ``weight_bound``: full / quantized bytes of the weights
    alone; ``embedding_bound``: of everything the embedding writes (a full, not
    incremental, checkpoint); ``dim``: rows-weighted mean width of the weights; and
    ``other_bytes_per_row``: the exact bytes beside each row's weights."""
    groups = embedding.checkpoint_row_groups()
    full_w = quant_w = other = rows = width = 0
    for name, tensor in embedding.checkpoint_state().items():
        key = f"embedding.{name}"
        if is_weight(key, groups) and tensor.ndim == 2 and tensor.is_floating_point():
            full_w += tensor_bytes(tensor)
            quant_w += tensor.shape[0] * quantized_row_bytes(int(tensor.shape[1]), bits)
            rows += tensor.shape[0]
            width += tensor.shape[0] * tensor.shape[1]
        else:
            other += tensor_bytes(tensor)
    if not rows:
        nan = float("nan")
        return {"weight_bound": nan, "embedding_bound": nan, "dim": nan, "other_bytes_per_row": nan}
    return {
        "weight_bound": full_w / quant_w,
        "embedding_bound": (full_w + other) / (quant_w + other),
        "dim": width / rows,
        "other_bytes_per_row": other / rows,
    }


def rows_only(
    embedding: dict[str, torch.Tensor], groups: dict[str, int], modified: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Keep only the modified rows of row-indexed tensors (and their row ids)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in embedding.items():
        group = _row_group(name, groups)
        if group is not None and tensor.ndim >= 1 and tensor.shape[0] == groups[group]:
            rows = modified[group]
            out[name] = tensor.detach()[rows.to(tensor.device)].cpu()
            out[f"rows.{group}"] = rows.to(torch.int32 if groups[group] < 2**31 else torch.int64)
        else:
            out[name] = tensor
    return out


def quantize_embedding(
    embedding: dict[str, torch.Tensor], groups: dict[str, int], bits: int
) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    """``embedding`` with each row group's weights ``[R, D]`` replaced by their
    :func:`quantize_rows` parts (``<name>.q.codes``, ``.q.scale``, ``.q.minimum``), and
    the quantized names with their widths ``D``."""
    out: dict[str, torch.Tensor] = {}
    quantized: dict[str, int] = {}
    by_dim: dict[int, list[str]] = {}
    for name, tensor in embedding.items():
        if is_weight(name, groups) and tensor.ndim == 2 and tensor.is_floating_point():
            by_dim.setdefault(int(tensor.shape[1]), []).append(name)
            quantized[name] = int(tensor.shape[1])
        out[name] = tensor  # keeps the order; quantized entries are replaced below
    for names in by_dim.values():  # one call per width: the range search is per call costly
        rows = [embedding[n].shape[0] for n in names]
        parts = quantize_rows(torch.cat([embedding[n].detach().cpu() for n in names]), bits)
        for part, value in parts.items():
            for name, piece in zip(names, value.split(rows), strict=True):
                out[f"{name}.q.{part}"] = piece.clone()
    for name in quantized:
        del out[name]
    return out, quantized


def merge_chain(model: RecModel, chain: Chain) -> dict[str, torch.Tensor]:
    """The embedding state after applying each checkpoint of the chain in order."""
    groups = model.embedding.checkpoint_row_groups()
    merged: dict[str, torch.Tensor] = {}
    for manifest, tensors in chain:
        bits, quantized = int(manifest["bits"]), manifest.get("quantized", {})
        values = {k: v for k, v in tensors.items() if k.startswith("embedding.") and ".q." not in k}
        for name, dim in quantized.items():
            q = {part: tensors[f"{name}.q.{part}"] for part in ("codes", "scale", "minimum")}
            values[name] = dequantize_rows(q, bits, dim)
        for name, value in values.items():
            group = _row_group(name, groups)
            rows = tensors.get(f"rows.{group}") if group is not None else None
            if manifest["kind"] == "incremental" and rows is not None and name in merged:
                merged[name][rows.long()] = value.to(merged[name].dtype)
            else:
                merged[name] = value.clone()
    return merged
