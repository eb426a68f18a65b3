"""Codecs for the pooled embeddings that an embedding all-to-all carries.

Beside the distributed wrapper: whatever process layout the run has, the codec sees the
pooled embeddings ``[B, F, D]`` that model-parallel tables would send to the data-parallel
part, encodes them into bytes, and decodes what the receiver would use. The payload's
bytes, the codec's time and the training's accuracy are what it is measured by.

* ``fp16`` / ``bf16``: TorchRec's quantized communication (a cast each way).
* ``lossy``: error-bounded lossy compression after Feng et al., "Accelerating
  Communication in DLRM Training with Dual-Level Adaptive Lossy Compression" (arXiv
  2407.04272): each value is quantized to an integer code ``q = round(x / 2e)`` so that
  ``|x - 2eq| <= e`` (SZ-style linear quantization), and the codes are coded losslessly
  (zlib over the narrowest integer type that holds them). Our reading of its dual-level
  adaptivity: the bound of each table is relative to that table's value range in the
  batch (table-wise), and it shrinks as training proceeds (iteration-wise, from
  ``start_scale`` to ``end_scale`` of the bound over the run), so early, noisy iterations
  compress most.

The backward pass is straight-through (the gradient of the decoded values is passed to
the encoder's input unchanged).
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from suite.config import CommConfig


@dataclass
class Encoded:
    """A lossy-coded ``[B, F, D]`` payload: per table, its bound and compressed codes."""

    shape: tuple[int, ...]
    bounds: np.ndarray  # [F] absolute bound per table
    offsets: np.ndarray  # [F] smallest code per table
    dtypes: list[str]
    blobs: list[bytes]

    @property
    def nbytes(self) -> int:
        header = self.bounds.nbytes + self.offsets.nbytes + len(self.blobs) * 2
        return header + sum(len(b) for b in self.blobs)


def _narrow(span: int) -> np.dtype:
    for dtype in (np.uint8, np.uint16, np.uint32):
        if span <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


def table_bounds(values: np.ndarray, relative: float) -> np.ndarray:
    """Absolute bound per table: ``relative`` of the table's value range. ``[F]``."""
    span = values.max(axis=(0, 2)) - values.min(axis=(0, 2))
    return np.where(span > 0, relative * span, relative).astype(np.float64)


def encode(values: np.ndarray, bounds: np.ndarray, level: int = 1) -> Encoded:
    """Quantize ``values [B, F, D]`` table by table within ``bounds [F]`` and code losslessly."""
    x = values.astype(np.float64)
    codes = np.rint(x / (2.0 * bounds[None, :, None])).astype(np.int64)
    offsets = codes.min(axis=(0, 2))
    blobs, dtypes = [], []
    for f in range(x.shape[1]):
        shifted = codes[:, f, :] - offsets[f]
        dtype = _narrow(int(shifted.max()) if shifted.size else 0)
        blobs.append(zlib.compress(shifted.astype(dtype).tobytes(), level))
        dtypes.append(dtype.str)
    return Encoded(values.shape, bounds, offsets, dtypes, blobs)


def decode(encoded: Encoded) -> np.ndarray:
    """The values the receiver uses: ``2 e q`` per table, float32 ``[B, F, D]``."""
    b, f, d = encoded.shape
    out = np.empty((b, f, d), dtype=np.float64)
    for t in range(f):
        codes = np.frombuffer(zlib.decompress(encoded.blobs[t]), dtype=encoded.dtypes[t])
        codes = codes.astype(np.int64).reshape(b, d) + encoded.offsets[t]
        out[:, t, :] = codes * (2.0 * encoded.bounds[t])
    return out.astype(np.float32)


class _StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, decoded: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        return decoded

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ANN001
        return grad, None


@dataclass
class CodecStats:
    """Bytes and time of the payloads coded so far."""

    raw_bytes: int = 0
    wire_bytes: int = 0
    seconds: float = 0.0
    calls: int = 0
    max_bound_excess: float = 0.0
    history: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.wire_bytes if self.wire_bytes else float("nan")


class CommCodec(nn.Module):
    """Apply a codec to pooled embeddings ``[B, F, D]``; counts bytes and time."""

    def __init__(self, config: CommConfig, total_steps: int | None = None) -> None:
        super().__init__()
        self.config = config
        self.total_steps = total_steps
        self.step = 0
        self.stats = CodecStats()

    def scale(self) -> float:
        """The iteration-wise multiplier of the bound at the current step."""
        c = self.config
        if not self.total_steps or self.total_steps <= 1:
            return c.end_scale
        progress = min(self.step / (self.total_steps - 1), 1.0)
        return c.start_scale + (c.end_scale - c.start_scale) * progress

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        c = self.config
        if c.codec == "none":
            return pooled
        tick = time.perf_counter()
        raw = pooled.numel() * pooled.element_size()
        if c.codec in ("fp16", "bf16"):
            dtype = torch.float16 if c.codec == "fp16" else torch.bfloat16
            decoded = pooled.detach().to(dtype).to(pooled.dtype)
            wire = pooled.numel() * 2
        else:
            values = pooled.detach().float().cpu().numpy()
            bounds = table_bounds(values, c.error_bound * self.scale())
            encoded = encode(values, bounds, c.zlib_level)
            decoded_np = decode(encoded)
            error = np.abs(decoded_np.astype(np.float64) - values) - bounds[None, :, None]
            self.stats.max_bound_excess = max(self.stats.max_bound_excess, float(error.max()))
            decoded = torch.from_numpy(decoded_np).to(pooled.device, pooled.dtype)
            wire = encoded.nbytes
        if self.training:  # the figures are the training run's payloads
            self.step += 1
            self.stats.raw_bytes += raw
            self.stats.wire_bytes += wire
            self.stats.seconds += time.perf_counter() - tick
            self.stats.calls += 1
        return _StraightThrough.apply(pooled, decoded)

    def figures(self) -> dict[str, float]:
        """Payload bytes with and without the codec, their ratio and the codec's time."""
        s = self.stats
        return {
            "comm_raw_bytes": float(s.raw_bytes),
            "comm_wire_bytes": float(s.wire_bytes),
            "comm_compression_ratio": s.ratio,
            "comm_codec_seconds": s.seconds,
            "comm_max_bound_excess": s.max_bound_excess,
        }
