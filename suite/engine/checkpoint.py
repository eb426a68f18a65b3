"""Checkpoints of a training run: exact resume, and Check-N-Run's incremental and
quantized checkpoints (Eisenman et al., arXiv 2010.08679).

A checkpoint root holds one run's checkpoints::

    LOCK              flock'ed by the one run writing here (two runs never share a root)
    ckpt-000007/      one checkpoint: torch.distributed.checkpoint (DCP) files and
                      manifest.json (written last: kind, step, chain, loop state, checksums,
                      and its own checksum)
    best-000000420/   the best-so-far model for ``checkpoint: best``, written when it changes
    .tmp-*            a write in progress: never read, removed when the root is opened

Every write goes to a ``.tmp-*`` directory, is fsync'ed, then renamed into place, so a
killed or failed write (disk full) leaves the previous checkpoint intact and is never
loaded. Every file's size and SHA-256 are in the manifest and checked on load, and the
manifest carries the SHA-256 of its own content (``manifest_sha256``), so an edited
manifest (``loop.step`` changed, say) is refused like a corrupt tensor file; a torn,
corrupt or foreign directory is refused with one line naming the file. Checkpoints of
format version 1 (before the manifest's checksum) are refused, as every other version.

A checkpoint holds named tensors only (no pickled objects): the backbone's state, the
embedding method's :meth:`~suite.embeddings.base.EmbeddingMethod.checkpoint_state`
(fbgemm TBE weights and fused optimizer state), the dense optimizer's state, every RNG;
the loop's position (step, epoch, batch within the epoch: the loader's shuffle is a
function of seed and epoch), its running sums and validation history, the best-so-far
pointer, the config hash and data fingerprint are JSON in the manifest.

Check-N-Run, as here:

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

import contextlib
import errno
import fcntl
import hashlib
import json
import math
import os
import random
import re
import shutil
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suite.config import RunConfig
from suite.embeddings.base import EmbeddingMethod, supports_checkpoints
from suite.engine.parallel import Parallel
from suite.errors import DiskFullError, SuiteError
from suite.fileio import check_space, disk_full_error, is_disk_full
from suite.models.base import RecModel

FORMAT = "recsuite-checkpoint"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
MANIFEST_DIGEST = "manifest_sha256"
CHECKPOINT_RE = re.compile(r"^ckpt-(\d{6})$")
RANK_DIR_RE = re.compile(r"^rank-\d+-of-(\d+)$")
BITS = (32, 8, 4, 2)
DEFAULT_EVERY = "1m"
"""The interval we recommend (``--set train.checkpoint_every=1m``); the benchmark measures
the checkpoint path's share of training time at it."""


CHECKPOINT_OPTION = "train.checkpoint_dir"
"""The setting that moves checkpoints, named when their disk is full."""


class CheckpointError(SuiteError):
    """A checkpoint cannot be written or read; the message names the file."""


class CheckpointDiskFull(CheckpointError, DiskFullError):
    """A checkpoint's disk is full; the message names the file and the space."""


# ---------------------------------------------------------------- interval and policy


@dataclass(frozen=True)
class Interval:
    """Every ``steps`` steps, or every ``seconds`` of wall time."""

    steps: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, value: int | str | None) -> Interval | None:
        """``500`` or ``"500"``: steps; ``"30s"``, ``"5m"``, ``"1h"``: wall time."""
        if value is None:
            return None
        text = str(value).strip()
        if text.isdigit() and int(text) > 0:
            return cls(steps=int(text))
        match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smh])", text)
        if not match or float(match[1]) <= 0:
            raise CheckpointError(
                f"train.checkpoint_every: expected steps (e.g. 500) or a time (30s, 5m, 1h), got {value!r}"
            )
        return cls(seconds=float(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2]])

    def due(self, step: int, last_step: int, now: float, last_time: float) -> bool:
        if self.steps is not None:
            return step - last_step >= self.steps
        assert self.seconds is not None
        return now - last_time >= self.seconds


@dataclass(frozen=True)
class CheckpointPolicy:
    """What each checkpoint holds: full or incremental, and the embedding weights' bits."""

    incremental: bool = False
    bits: int = 32
    restore_budget: float = 3.0
    """Increments since the last full checkpoint read on restore, at most this times a full
    checkpoint's bytes (so a restore reads at most ``1 + restore_budget`` full checkpoints)."""
    max_increments: int | None = None
    keep_all: bool = False
    """Keep every checkpoint (the ``checkpoint`` task restores from each); otherwise only
    the latest chain."""

    def __post_init__(self) -> None:
        if self.bits not in BITS:
            raise CheckpointError(f"checkpoint bits: expected one of {BITS}, got {self.bits}")


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


# ---------------------------------------------------------------- quantization


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


# ---------------------------------------------------------------- loop state and tracking


@dataclass
class LoopState:
    """Where the training loop is; everything it needs to continue exactly."""

    step: int = 0
    epoch: int = 0
    batch: int = 0
    """Batches of ``epoch`` already trained."""
    examples: int = 0
    seconds: float = 0.0
    loss_sum: float = 0.0
    loss_count: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    best_auc: float = -math.inf
    best_step: int = 0
    best: dict[str, torch.Tensor] | None = None
    """The best-so-far model's ``state_dict`` (``checkpoint: best``)."""

    def meta(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("best")
        return data


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


# ---------------------------------------------------------------- what a checkpoint holds


def _rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    np_state = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    tensors = {
        "rng.torch": torch.get_rng_state(),
        "rng.numpy": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)),
        "rng.python": torch.tensor(py_state, dtype=torch.int64),
    }
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = state
    meta = {
        "numpy": [str(np_state[0]), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "python": [py_version, py_gauss],
    }
    return tensors, meta


def _set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    name, pos, has_gauss, cached = meta["numpy"]
    keys = tensors["rng.numpy"].numpy().astype(np.uint32)
    np.random.set_state((name, keys, pos, has_gauss, cached))
    version, gauss = meta["python"]
    random.setstate((version, tuple(int(v) for v in tensors["rng.python"].tolist()), gauss))
    cuda = [tensors[f"rng.cuda.{i}"] for i in range(torch.cuda.device_count())]
    if cuda and all(f"rng.cuda.{i}" in tensors for i in range(len(cuda))):
        torch.cuda.set_rng_state_all(cuda)


def _dense_state(model: RecModel) -> dict[str, torch.Tensor]:
    if hasattr(model, "dense_checkpoint_state"):  # sharded: the replicated part
        return {f"model.{k}": v for k, v in model.dense_checkpoint_state().items()}
    return {
        f"model.{k}": v for k, v in model.state_dict().items() if not k.startswith("embedding.")
    }


def _optimizer_state(
    optimizer: torch.optim.Optimizer | None,
) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    if optimizer is None:
        return {}, []
    state = optimizer.state_dict()
    tensors = {}
    for index, values in state["state"].items():
        for key, value in values.items():
            if not torch.is_tensor(value):
                value = torch.tensor(value)
            tensors[f"optim.{index}.{key}"] = value
    return tensors, state["param_groups"]


def _load_optimizer(
    optimizer: torch.optim.Optimizer | None,
    tensors: dict[str, torch.Tensor],
    groups: list[dict[str, Any]],
) -> None:
    if optimizer is None:
        return
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        if name.startswith("optim."):
            _, index, key = name.split(".", 2)
            state.setdefault(int(index), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_digest(manifest: dict[str, Any]) -> str:
    """SHA-256 of a checkpoint manifest's content without its ``manifest_sha256`` field:
    its canonical JSON (sorted keys, as read back from disk), so the same however it is
    indented."""
    content = {k: v for k, v in manifest.items() if k != MANIFEST_DIGEST}
    as_read = json.loads(json.dumps(content))  # tuples, int keys: as a reader sees them
    canonical = json.dumps(as_read, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _dcp():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch.distributed.checkpoint as dcp
    return dcp


def _unwrap_dcp(exc: BaseException) -> BaseException:
    """The first rank's exception inside DCP's ``CheckpointException``, else ``exc``."""
    failures = getattr(exc, "failures", None)
    if type(exc).__name__ == "CheckpointException" and isinstance(failures, dict) and failures:
        first = next(iter(failures.values()))
        return first[0] if isinstance(first, tuple) else first
    return exc


def write_tensors(tensors: dict[str, torch.Tensor], directory: Path) -> None:
    """Write named CPU tensors with torch.distributed.checkpoint (fsync'ed files), all in
    ``directory``: not collective, even in a rank of a distributed run."""
    dcp = _dcp()
    writer = dcp.FileSystemWriter(str(directory), sync_files=True, thread_count=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(tensors, storage_writer=writer, no_dist=True)  # a rank writes its own part


def read_tensors(directory: Path) -> dict[str, torch.Tensor]:
    """Read every tensor of a DCP directory, allocated from its metadata."""
    dcp = _dcp()
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = dcp.FileSystemReader(str(directory))
    metadata = reader.read_metadata()
    tensors = {}
    for name, item in metadata.state_dict_metadata.items():
        if not isinstance(item, TensorStorageMetadata):
            raise CheckpointError(f"{directory}: entry {name!r} is not a tensor")
        tensors[name] = torch.empty(item.size, dtype=item.properties.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(tensors, storage_reader=reader, no_dist=True)
    return tensors


# ---------------------------------------------------------------- the checkpointer


def run_checkpoints(
    config: RunConfig, data_fingerprint: str, resume: bool, parallel: Parallel | None = None
) -> Checkpointer | None:
    """The checkpoints of a run of ``config`` (under ``train.checkpoint_dir/<config
    hash>``; a rank of a distributed run its own ``rank-<r>-of-<world>`` in it), or
    ``None`` when it writes none and does not resume. Refuses (one line) a resume without a
    matching checkpoint, and a fresh run over an earlier run's checkpoints. The ranks of a
    resumed run agree on the newest checkpoint they all hold (collective)."""
    if config.train.checkpoint_every is None and not resume:
        return None
    if not supports_checkpoints(config.embedding.registry.get(config.embedding.name)):
        raise CheckpointError(
            f"embedding method {config.embedding.name} cannot be checkpointed yet (its storage "
            "does not implement checkpoint_state()): drop train.checkpoint_every / --resume"
        )
    root = Path(config.train.checkpoint_dir) / config.config_hash()
    if resume:
        _check_world(root, parallel)
    if parallel is not None:
        root = root / f"rank-{parallel.rank}-of-{parallel.world}"
    identity = {"config_hash": config.config_hash(), "data_fingerprint": data_fingerprint}
    checkpoints = Checkpointer(
        root,
        identity,
        Interval.parse(config.train.checkpoint_every),
        resume=resume,
        parallel=parallel,
    )
    try:
        if resume and parallel is not None:
            checkpoints.resume = parallel.min(checkpoints._latest_seq())
            checkpoints.drop_newer_than(checkpoints.resume)
        if resume:
            checkpoints.identity.update(checkpoints.restored_identity())
        elif checkpoints.has_checkpoints():
            raise CheckpointError(
                f"{root} holds checkpoints of an earlier run of this config: pass --resume to "
                "continue it, or remove the directory to start again"
            )
    except BaseException:
        checkpoints.close()
        raise
    return checkpoints


def _check_world(root: Path, parallel: Parallel | None) -> None:
    """Refuse to resume checkpoints written by a run on another number of ranks."""
    if not root.is_dir():
        return
    worlds = {int(m[1]) for p in root.iterdir() if (m := RANK_DIR_RE.match(p.name))}
    world = parallel.world if parallel is not None else 1
    if worlds and world not in worlds:
        ranks = max(worlds)
        raise CheckpointError(
            f"{root} holds the checkpoints of a run on {ranks} ranks; resume it on {ranks} "
            f"(--nproc-per-node {ranks}), not {world}"
        )


def remove_checkpoints(checkpoints: Checkpointer) -> None:
    """A finished run's checkpoints have served; remove them (and release the lock)."""
    checkpoints.close()
    shutil.rmtree(checkpoints.root, ignore_errors=True)
    if checkpoints.parallel is not None:  # the last rank out removes the config's folder
        with contextlib.suppress(OSError):
            checkpoints.root.parent.rmdir()


@dataclass
class CheckpointInfo:
    """One written checkpoint, as the ``checkpoint`` task reports it."""

    seq: int
    kind: str
    bits: int
    step: int
    bytes: int
    embedding_bytes: int
    """The embedding's tensors: weights (quantized or not), their row-wise optimizer state,
    row ids of an increment, index maps."""
    weight_bytes: int
    """The embedding weights alone (what quantization shrinks): codes, scales and minimums
    of a quantized checkpoint."""
    seconds: float
    rows_fraction: float
    path: str


class Checkpointer:
    """Writes a run's checkpoints under ``root`` and restores them.

    The training loop calls :meth:`observe` every step (row tracking for incremental
    checkpoints), :meth:`due` to ask whether it is time, and :meth:`save`; at its start
    :meth:`restore` when resuming. Holds ``root/LOCK`` until :meth:`close`.
    """

    def __init__(
        self,
        root: str | Path,
        identity: dict[str, str],
        every: Interval | None = None,
        policy: CheckpointPolicy | None = None,
        resume: bool | int = False,
        parallel: Parallel | None = None,
    ) -> None:
        """``identity``: ``config_hash`` and ``data_fingerprint`` (checked on restore) and
        anything else to keep (``mlflow_run_id``). ``resume``: ``True`` for the latest
        checkpoint, an int for that checkpoint's sequence number. ``parallel``: this rank
        of a distributed run, whose ranks each write their own part at the same steps."""
        if parallel is not None and (policy or CheckpointPolicy()) != CheckpointPolicy():
            raise CheckpointError("a distributed run writes full, unquantized checkpoints")
        self.root = Path(root)
        self.parallel = parallel
        self.identity = dict(identity)
        self.every = every
        self.policy = policy or CheckpointPolicy()
        self.resume = resume
        self.written: list[CheckpointInfo] = []
        self.tracker: RowTracker | None = None
        self._lock_fd: int | None = None
        self._last_step = 0
        self._last_time = time.monotonic()
        self._chain_full_bytes: int | None = None
        self._chain_increment_bytes = 0
        self._chain_increments = 0
        self._last_increment_bytes = 0
        self._best_written: int | None = None
        self._chain_base = 0
        self.restore_seconds: float | None = None
        """Wall time of the last :meth:`restore` (read, verify, apply)."""
        self.restored_step = 0
        self._lock()

    # -- lifetime

    def _lock(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise CheckpointError(
                f"checkpoint directory {self.root} is in use by another run (pid {holder}); "
                "two runs never write into one directory"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd
        for stale in self.root.glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)

    def close(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop's calls

    def start(self, model: RecModel) -> None:
        """Called once before training: checks the method can be checkpointed and starts
        row tracking for incremental checkpoints."""
        model.embedding.checkpoint_state()  # raises one line if the method cannot
        if self.policy.incremental and self.tracker is None:
            self.tracker = RowTracker(model)
        self._last_time = time.monotonic()

    def observe(self, model: RecModel, sparse: torch.Tensor) -> None:
        if self.tracker is not None:
            self.tracker.observe(model, sparse)

    def due(self, step: int) -> bool:
        if self.every is None:
            return False
        due = self.every.due(step, self._last_step, time.monotonic(), self._last_time)
        if self.parallel is not None and self.every.seconds is not None:
            due = self.parallel.sum([float(due)])[0] > 0  # clocks differ: all ranks or none
        return due

    def save(
        self,
        model: RecModel,
        dense_opt: torch.optim.Optimizer | None,
        loop: LoopState,
    ) -> CheckpointInfo:
        """Write one checkpoint of the training state now (atomically)."""
        started = time.perf_counter()
        bits = self.policy.bits
        kind = self._next_kind()
        seq = self._latest_seq() + 1
        embedding = {f"embedding.{k}": v for k, v in model.embedding.checkpoint_state().items()}
        groups = model.embedding.checkpoint_row_groups()
        fraction = self.tracker.fraction() if self.tracker else 1.0
        if kind == "incremental":
            assert self.tracker is not None
            embedding = _rows_only(embedding, groups, self.tracker.modified())
        quantized = {}
        if bits < 32:
            embedding, quantized = _quantize(embedding, groups, bits)
        rng, rng_meta = _rng_state()
        optim, param_groups = _optimizer_state(dense_opt)
        tensors = {
            k: v.detach().cpu()
            for k, v in {**embedding, **_dense_state(model), **optim, **rng}.items()
        }
        best_dir = self._write_best(loop)
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "seq": seq,
            "kind": kind,
            "base": seq if kind == "full" else self._chain_base,
            "bits": bits,
            "quantized": quantized,
            "identity": self.identity,
            "loop": loop.meta(),
            "best": best_dir,
            "rng": rng_meta,
            "param_groups": param_groups,
            "written": time.time(),
        }
        path = self._publish(f"ckpt-{seq:06d}", tensors, manifest)
        if kind == "full":
            self._chain_base = seq
        nbytes = _dir_bytes(path)
        emb_bytes = sum(
            _tensor_bytes(v) for k, v in tensors.items() if k.startswith(("embedding.", "rows."))
        )
        weight_bytes = sum(_tensor_bytes(v) for k, v in tensors.items() if _is_weight(k, groups))
        self._account(kind, nbytes)
        if self.tracker is not None:
            self.tracker.reset()
        self._last_step, self._last_time = loop.step, time.monotonic()
        if self.parallel is not None:  # every rank holds this one before any drops the last
            self.parallel.barrier()
        if not self.policy.keep_all:
            self._prune(seq, kind)
        info = CheckpointInfo(
            seq,
            kind,
            bits,
            loop.step,
            nbytes,
            emb_bytes,
            weight_bytes,
            time.perf_counter() - started,
            fraction,
            str(path),
        )
        self.written.append(info)
        return info

    def restore(self, model: RecModel, dense_opt: torch.optim.Optimizer | None) -> LoopState | None:
        """When resuming: load the chain ending at the checkpoint asked for into ``model``
        and ``dense_opt``, set every RNG, and return the loop state; else ``None``."""
        if self.resume is False:
            return None
        started = time.perf_counter()
        seq = self._resume_seq()
        if seq <= 0:
            raise CheckpointError(f"no checkpoint to resume from in {self.root}")
        chain = self._chain(seq)
        last = chain[-1][0]
        self._check_identity(last, self.root / f"ckpt-{seq:06d}" / MANIFEST)
        merged = _merge_chain(model, chain)
        model.embedding.load_checkpoint_state(
            {
                k.removeprefix("embedding."): v
                for k, v in merged.items()
                if k.startswith("embedding.")
            }
        )
        dense = {
            k.removeprefix("model."): v for k, v in chain[-1][1].items() if k.startswith("model.")
        }
        if hasattr(model, "load_dense_checkpoint_state"):  # sharded: the replicated part
            try:
                model.load_dense_checkpoint_state(dense)
            except ValueError as exc:
                raise CheckpointError(f"{self.root / f'ckpt-{seq:06d}'}: {exc}") from None
            missing, unexpected = [], []
        else:
            missing, unexpected = model.load_state_dict(dense, strict=False)
        if unexpected or any(not k.startswith("embedding.") for k in missing):
            raise CheckpointError(
                f"{self.root / f'ckpt-{seq:06d}'}: does not fit this model (missing "
                f"{[k for k in missing if not k.startswith('embedding.')][:3]}, unexpected {unexpected[:3]})"
            )
        tensors = chain[-1][1]
        _load_optimizer(dense_opt, tensors, last["param_groups"])
        _set_rng_state(tensors, last["rng"])
        loop = LoopState(**last["loop"])
        if last["best"]:
            best = read_tensors(self._verified(self.root / last["best"]))
            loop.best = {k.removeprefix("model."): v for k, v in best.items()}
            self._best_written = loop.best_step
        self._last_step = loop.step
        self._last_time = time.monotonic()
        self._chain_full_bytes = None  # the next checkpoint after a resume is a full one
        self.restore_seconds = time.perf_counter() - started
        self.restored_step = loop.step
        return loop

    def drop_newer_than(self, seq: int) -> None:
        """Remove this rank's checkpoints after ``seq``: a distributed run killed while its
        ranks wrote left some ranks one ahead, and all go on from the one they share."""
        for path in self.root.iterdir():
            match = CHECKPOINT_RE.match(path.name)
            if match and int(match[1]) > seq > 0:
                shutil.rmtree(path)

    def _resume_seq(self) -> int:
        return self._latest_seq() if self.resume is True else int(self.resume)

    def has_checkpoints(self) -> bool:
        return self._latest_seq() > 0

    def restored_identity(self) -> dict[str, str]:
        """The identity in the latest checkpoint's manifest (e.g. its MLflow run id), after
        checking that it is this run's (config hash and data fingerprint)."""
        seq = self._resume_seq()
        if seq <= 0:
            raise CheckpointError(f"no checkpoint to resume from in {self.root}")
        path = self.root / f"ckpt-{seq:06d}" / MANIFEST
        manifest = self._manifest(path.parent)
        self._check_identity(manifest, path)
        for s in range(int(manifest.get("base", seq)), seq + 1):  # every file, before any work
            self._verified(self.root / f"ckpt-{s:06d}")
        if manifest.get("best"):
            self._verified(self.root / manifest["best"])
        return dict(manifest["identity"])

    def _check_identity(self, manifest: dict[str, Any], path: Path) -> None:
        for key in ("config_hash", "data_fingerprint"):
            theirs, ours = manifest["identity"].get(key), self.identity.get(key)
            if ours is not None and theirs != ours:
                raise CheckpointError(
                    f"{path}: written by a run with {key.replace('_', ' ')} {theirs}, "
                    f"this run's is {ours}; refusing to resume"
                )

    # -- internals

    def _next_kind(self) -> str:
        p = self.policy
        if not p.incremental or self._chain_full_bytes is None:
            return "full"
        if p.max_increments is not None and self._chain_increments >= p.max_increments:
            return "full"
        predicted = self._chain_increment_bytes + self._last_increment_bytes
        return "full" if predicted > p.restore_budget * self._chain_full_bytes else "incremental"

    def _account(self, kind: str, nbytes: int) -> None:
        if kind == "full":
            self._chain_full_bytes, self._chain_increment_bytes = nbytes, 0
            self._chain_increments, self._last_increment_bytes = 0, 0
        else:
            self._chain_increment_bytes += nbytes
            self._chain_increments += 1
            self._last_increment_bytes = nbytes

    def _latest_seq(self) -> int:
        seqs = [int(m[1]) for p in self.root.iterdir() if (m := CHECKPOINT_RE.match(p.name))]
        return max(seqs, default=0)

    def _write_best(self, loop: LoopState) -> str | None:
        if loop.best is None:
            return None
        name = f"best-{loop.best_step:09d}"
        if self._best_written != loop.best_step or not (self.root / name).is_dir():
            tensors = {f"model.{k}": v.detach().cpu() for k, v in loop.best.items()}
            self._publish(
                name,
                tensors,
                {
                    "format": FORMAT,
                    "version": FORMAT_VERSION,
                    "kind": "best",
                    "step": loop.best_step,
                    "identity": self.identity,
                },
            )
            self._best_written = loop.best_step
        return name

    def _publish(
        self, name: str, tensors: dict[str, torch.Tensor], manifest: dict[str, Any]
    ) -> Path:
        final = self.root / name
        tmp = self.root / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        needed = sum(_tensor_bytes(t) for t in tensors.values())
        try:
            check_space(self.root, needed, CHECKPOINT_OPTION)
            tmp.mkdir()
            write_tensors(tensors, tmp)
            manifest["files"] = {
                f.name: {"bytes": f.stat().st_size, "sha256": _sha256(f)}
                for f in sorted(tmp.iterdir())
            }
            manifest[MANIFEST_DIGEST] = manifest_digest(manifest)
            with open(tmp / MANIFEST, "w", encoding="utf-8") as handle:
                json.dump(manifest, handle, indent=1)
                handle.flush()
                os.fsync(handle.fileno())
            _fsync_dir(tmp)
            if final.exists():  # a stale best- directory of the same step
                shutil.rmtree(final)
            os.rename(tmp, final)
            _fsync_dir(self.root)
        except BaseException as exc:  # DCP's CheckpointException is a BaseException
            full = isinstance(exc, DiskFullError) or is_disk_full(exc, self.root)
            shutil.rmtree(tmp, ignore_errors=True)  # measured full first: this frees space
            cause = _unwrap_dcp(exc)
            if not (full or isinstance(cause, OSError)):
                raise
            previous = self._latest_seq()
            kept = (
                f"the previous checkpoint ckpt-{previous:06d} is intact"
                if previous
                else "no earlier checkpoint exists"
            )
            if full:
                said = cause.strerror if isinstance(cause, OSError) else None
                error = disk_full_error(final, needed, CHECKPOINT_OPTION, said)
                raise CheckpointDiskFull(f"cannot write checkpoint {error}; {kept}") from None
            assert isinstance(cause, OSError)
            reason = cause.strerror or errno.errorcode.get(cause.errno or 0, str(cause))
            raise CheckpointError(f"cannot write checkpoint {final}: {reason}; {kept}") from None
        return final

    def _prune(self, seq: int, kind: str) -> None:
        if kind == "full":
            for path in self.root.iterdir():
                match = CHECKPOINT_RE.match(path.name)
                if match and int(match[1]) < seq:
                    shutil.rmtree(path, ignore_errors=True)
        keep = self._manifest(self.root / f"ckpt-{seq:06d}").get("best")
        for path in self.root.glob("best-*"):
            if path.name != keep:
                shutil.rmtree(path, ignore_errors=True)

    def _manifest(self, path: Path) -> dict[str, Any]:
        file = path / MANIFEST
        if not path.is_dir():
            raise CheckpointError(f"{path}: checkpoint directory is missing")
        try:
            manifest = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CheckpointError(
                f"{file}: missing (not a recsuite checkpoint, or a torn write)"
            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{file}: unreadable ({exc})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise CheckpointError(
                f"{file}: not a recsuite checkpoint (format {manifest.get('format') if isinstance(manifest, dict) else None!r})"
            )
        if manifest.get("version") != FORMAT_VERSION:
            raise CheckpointError(
                f"{file}: format version {manifest.get('version')}, this suite reads {FORMAT_VERSION}"
            )
        if manifest.get(MANIFEST_DIGEST) != manifest_digest(manifest):
            raise CheckpointError(
                f"{file}: edited or corrupt since checkpoint {path.name} was written (its "
                f"{MANIFEST_DIGEST} does not match its content); refusing to load it"
            )
        return manifest

    def _verified(self, path: Path) -> Path:
        manifest = self._manifest(path)
        files = manifest.get("files") or {}
        for name, expected in files.items():
            file = path / name
            if not file.is_file():
                raise CheckpointError(f"{file}: missing")
            size = file.stat().st_size
            if size != expected["bytes"]:
                raise CheckpointError(
                    f"{file}: truncated or grown ({size} bytes, expected {expected['bytes']})"
                )
            if _sha256(file) != expected["sha256"]:
                raise CheckpointError(f"{file}: corrupt (SHA-256 differs from the manifest's)")
        extra = sorted(p.name for p in path.iterdir() if p.name not in files and p.name != MANIFEST)
        if extra:
            raise CheckpointError(f"{path / extra[0]}: not part of this checkpoint")
        return path

    def _chain(self, seq: int) -> list[tuple[dict[str, Any], dict[str, torch.Tensor]]]:
        """Manifests and tensors from the last full checkpoint up to ``seq``."""
        last = self._manifest(self.root / f"ckpt-{seq:06d}")
        base = int(last.get("base", seq))
        chain = []
        for s in range(base, seq + 1):
            path = self.root / f"ckpt-{s:06d}"
            manifest = self._manifest(path)
            expected = "full" if s == base else "incremental"
            if manifest.get("kind") != expected or int(manifest.get("base", -1)) != base:
                raise CheckpointError(
                    f"{path / MANIFEST}: expected a {expected} checkpoint of the chain from ckpt-{base:06d}"
                )
            try:
                tensors = read_tensors(self._verified(path))
            except CheckpointError:
                raise
            except Exception as exc:  # DCP's own errors on a damaged file
                raise CheckpointError(
                    f"{path}: unreadable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
                ) from None
            chain.append((manifest, tensors))
        return chain


def _tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def _row_group(name: str, groups: dict[str, int]) -> str | None:
    """The row group a ``embedding.<group>.<what>`` tensor belongs to."""
    key = name.removeprefix("embedding.")
    group = key.rsplit(".", 1)[0]
    return group if group in groups else None


def _is_weight(name: str, groups: dict[str, int]) -> bool:
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
        if _is_weight(key, groups) and tensor.ndim == 2 and tensor.is_floating_point():
            full_w += _tensor_bytes(tensor)
            quant_w += tensor.shape[0] * quantized_row_bytes(int(tensor.shape[1]), bits)
            rows += tensor.shape[0]
            width += tensor.shape[0] * tensor.shape[1]
        else:
            other += _tensor_bytes(tensor)
    if not rows:
        nan = float("nan")
        return {"weight_bound": nan, "embedding_bound": nan, "dim": nan, "other_bytes_per_row": nan}
    return {
        "weight_bound": full_w / quant_w,
        "embedding_bound": (full_w + other) / (quant_w + other),
        "dim": width / rows,
        "other_bytes_per_row": other / rows,
    }


def _rows_only(
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


def _quantize(
    embedding: dict[str, torch.Tensor], groups: dict[str, int], bits: int
) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    out: dict[str, torch.Tensor] = {}
    quantized: dict[str, int] = {}
    by_dim: dict[int, list[str]] = {}
    for name, tensor in embedding.items():
        if _is_weight(name, groups) and tensor.ndim == 2 and tensor.is_floating_point():
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


def _merge_chain(
    model: RecModel, chain: list[tuple[dict[str, Any], dict[str, torch.Tensor]]]
) -> dict[str, torch.Tensor]:
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
