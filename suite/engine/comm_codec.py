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
        """Bytes on the wire, ``len(to_bytes(self))``: per table its bound, smallest code and
        code width, then its compressed codes."""
        header = self.bounds.nbytes + self.offsets.nbytes + len(self.blobs) * 2
        return header + sum(len(b) for b in self.blobs)


_CODE_DTYPES = [np.dtype(t).str for t in (np.uint8, np.uint16, np.uint32, np.uint64)]


def to_bytes(encoded: Encoded) -> bytes:
    """The wire form of ``encoded``: bounds ``float64 [F]``, smallest codes ``int64 [F]``,
    code widths ``uint16 [F]``, then each table's zlib stream (self-delimiting, so no
    lengths are sent). The receiver knows the payload's shape."""
    header = [
        np.asarray(encoded.bounds, dtype="<f8").tobytes(),
        np.asarray(encoded.offsets, dtype="<i8").tobytes(),
        np.asarray([_CODE_DTYPES.index(d) for d in encoded.dtypes], dtype="<u2").tobytes(),
    ]
    return b"".join(header + encoded.blobs)


def from_bytes(buffer: bytes | memoryview, shape: tuple[int, int, int]) -> Encoded:
    """Inverse of :func:`to_bytes` for a payload of ``shape`` ``(B, F, D)``."""
    view = memoryview(buffer)
    f = shape[1]
    bounds = np.frombuffer(view[: 8 * f], dtype="<f8").astype(np.float64)
    offsets = np.frombuffer(view[8 * f : 16 * f], dtype="<i8").astype(np.int64)
    widths = np.frombuffer(view[16 * f : 18 * f], dtype="<u2")
    rest = bytes(view[18 * f :])
    blobs = []
    for _ in range(f):
        stream = zlib.decompressobj()
        stream.decompress(rest)
        if not stream.eof:
            raise ValueError(f"lossy payload: table {len(blobs)} of {f} is cut short")
        used = len(rest) - len(stream.unused_data)
        blobs.append(rest[:used])
        rest = stream.unused_data
    if rest:
        raise ValueError(f"lossy payload: {len(rest)} bytes after its {f} tables")
    dtypes = [_CODE_DTYPES[int(w)] for w in widths]
    return Encoded(tuple(shape), bounds, offsets, dtypes, blobs)


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
    def forward(ctx, x: torch.Tensor, decoded: torch.Tensor) -> torch.Tensor:
        return decoded

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
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


@dataclass
class ExchangeStats:
    """One all-to-all of pooled embeddings, as this rank saw it."""

    raw_bytes: int  # float32 bytes this rank sends to the other ranks
    wire_bytes: int  # bytes it actually sends to them (codes and headers included)
    codec_seconds: float  # encode before and decode after
    comm_seconds: float  # the collectives (for ``lossy`` also the size exchange)


def all_to_all_pooled(
    pooled: torch.Tensor,
    codec: str,
    relative_bound: float = 0.01,
    level: int = 1,
    group: object = None,
    sync: bool = False,
) -> tuple[torch.Tensor, ExchangeStats]:
    """Send this rank's pooled embeddings across ranks with ``all_to_all_single``.

    ``pooled`` is ``[W * B, F, D]`` float32: the lookups of this rank's tables for the
    global batch; rows ``j*B:(j+1)*B`` go to rank ``j`` (the model-parallel to
    data-parallel all-to-all). Every rank sends the same shape. ``codec`` is ``none``
    (float32), ``fp16``, ``bf16`` (a cast each way) or ``lossy`` (:func:`encode` with
    ``relative_bound`` of each table's range over the whole local payload, sent as
    :func:`to_bytes` with uneven splits). ``sync`` waits for every rank to finish
    encoding before the clock of the collectives starts (so that their time is the
    transfer's, not a wait for a slower encoder). Returns what this rank received and
    decoded, ``[W, B, F, D]`` float32 (index: source rank), and the exchange's figures.
    """
    import torch.distributed as dist

    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    rows, f, d = pooled.shape
    if rows % world:
        raise ValueError(f"pooled rows {rows} do not split evenly over {world} ranks")
    b = rows // world
    raw = (world - 1) * b * f * d * 4
    if codec in ("none", "fp16", "bf16"):
        dtype = {"none": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[codec]
        tick = time.perf_counter()
        send = pooled.detach().to(torch.float32).to(dtype).contiguous()
        coded = time.perf_counter() - tick
        recv = torch.empty_like(send)
        if sync:
            dist.barrier(group)
        tick = time.perf_counter()
        dist.all_to_all_single(recv, send, group=group)
        comm = time.perf_counter() - tick
        tick = time.perf_counter()
        out = recv.to(torch.float32).reshape(world, b, f, d)
        coded += time.perf_counter() - tick
        wire = (world - 1) * b * f * d * send.element_size()
        return out, ExchangeStats(raw, wire, coded, comm)
    if codec != "lossy":
        raise ValueError(f"codec {codec!r}: expected one of none, fp16, bf16, lossy")
    tick = time.perf_counter()
    values = pooled.detach().float().cpu().numpy()
    bounds = table_bounds(values, relative_bound)
    parts = [to_bytes(encode(values[j * b : (j + 1) * b], bounds, level)) for j in range(world)]
    send = torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8)
    coded = time.perf_counter() - tick
    if sync:
        dist.barrier(group)
    tick = time.perf_counter()
    send_sizes = torch.tensor([len(p) for p in parts], dtype=torch.int64)
    recv_sizes = torch.empty_like(send_sizes)
    dist.all_to_all_single(recv_sizes, send_sizes, group=group)
    recv = torch.empty(int(recv_sizes.sum()), dtype=torch.uint8)
    dist.all_to_all_single(
        recv,
        send,
        output_split_sizes=recv_sizes.tolist(),
        input_split_sizes=send_sizes.tolist(),
        group=group,
    )
    comm = time.perf_counter() - tick
    tick = time.perf_counter()
    buffer = recv.numpy().tobytes()
    out = np.empty((world, b, f, d), dtype=np.float32)
    at = 0
    for j, n in enumerate(recv_sizes.tolist()):
        out[j] = decode(from_bytes(buffer[at : at + n], (b, f, d)))
        at += n
    coded += time.perf_counter() - tick
    wire = sum(len(p) for j, p in enumerate(parts) if j != rank)
    return torch.from_numpy(out), ExchangeStats(raw, wire, coded, comm)
