"""The checkpoints of a training run: when to write one (interval and policy), what it
holds, writing it and restoring the training state from it exactly, and the run's wiring
(``run_checkpoints``, ``remove_checkpoints``).

A checkpoint holds named tensors only (no pickled objects): the backbone's state, the
embedding method's :meth:`~suite.embeddings.base.EmbeddingMethod.checkpoint_state`
(fbgemm TBE weights and fused optimizer state), the dense optimizer's state, every RNG;
the loop's position (step, epoch, batch within the epoch: the loader's shuffle is a
function of seed and epoch), its running sums and validation history, the best-so-far
pointer, the config hash and data fingerprint are JSON in the manifest.
"""

from __future__ import annotations

import contextlib
import math
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from suite.config import RunConfig
from suite.embeddings.base import supports_checkpoints
from suite.engine.checkpoint.capture import (
    dense_state,
    load_optimizer,
    optimizer_state,
    rng_state,
    set_rng_state,
)
from suite.engine.checkpoint.checknrun import (
    BITS,
    RowTracker,
    is_weight,
    merge_chain,
    quantize_embedding,
    rows_only,
)
from suite.engine.checkpoint.store import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    CheckpointError,
    CheckpointStore,
    data_bytes,
    read_manifest,
    read_tensors,
    tensor_bytes,
    verified,
)
from suite.errors import ConfigError
from suite.models.base import ONE_PROCESS, Ranks, RecModel

RANK_DIR_RE = re.compile(r"^rank-\d+-of-(\d+)$")
DEFAULT_EVERY = "1m"
"""The interval we recommend (``--set train.checkpoint_every=1m``); the benchmark measures
the checkpoint path's share of training time at it."""


@dataclass(frozen=True)
class CheckpointEvery:
    """Every ``steps`` steps, or every ``seconds`` of wall time."""

    steps: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, value: int | str | None) -> CheckpointEvery | None:
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


def run_checkpoints(
    config: RunConfig, data_fingerprint: str, resume: bool, ranks: Ranks = ONE_PROCESS
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
        _check_world(root, ranks.world)
    if ranks.distributed:
        root = root / f"rank-{ranks.rank}-of-{ranks.world}"
    identity = {"config_hash": config.config_hash(), "data_fingerprint": data_fingerprint}
    checkpoints = Checkpointer(
        root,
        identity,
        CheckpointEvery.parse(config.train.checkpoint_every),
        resume=resume,
        ranks=ranks,
    )
    try:
        if resume and ranks.distributed:
            checkpoints.resume = ranks.min(checkpoints.store.latest_seq())
            checkpoints.store.drop_newer_than(checkpoints.resume)
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


def _check_world(root: Path, world: int) -> None:
    """Refuse to resume checkpoints written by a run on another number of ranks."""
    if not root.is_dir():
        return
    worlds = {int(m[1]) for p in root.iterdir() if (m := RANK_DIR_RE.match(p.name))}
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
    if checkpoints.ranks.distributed:  # the last rank out removes the config's folder
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
        every: CheckpointEvery | None = None,
        policy: CheckpointPolicy | None = None,
        resume: bool | int = False,
        ranks: Ranks = ONE_PROCESS,
    ) -> None:
        """``identity``: ``config_hash`` and ``data_fingerprint`` (checked on restore) and
        anything else to keep (``mlflow_run_id``). ``resume``: ``True`` for the latest
        checkpoint, an int for that checkpoint's sequence number. ``ranks``: those of a
        distributed run, each writing its own part at the same steps."""
        self.root = Path(root)
        self.ranks: Ranks = ranks
        if self.ranks.distributed and (policy or CheckpointPolicy()) != CheckpointPolicy():
            raise CheckpointError("a distributed run writes full, unquantized checkpoints")
        self.identity = dict(identity)
        self.every = every
        self.policy = policy or CheckpointPolicy()
        self.resume = resume
        self.written: list[CheckpointInfo] = []
        self.tracker: RowTracker | None = None
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
        self.store = CheckpointStore(self.root)

    # -- lifetime

    def close(self) -> None:
        """Release ``root/LOCK``."""
        self.store.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop's calls

    def start(self, model: RecModel) -> None:
        """Called once before training: checks the method can be checkpointed and that
        this rank writes for the model's ranks, and starts row tracking for incremental
        checkpoints."""
        if model.ranks.part != self.ranks.part:
            raise ConfigError(
                "a distributed run's checkpointers need its ranks: run_checkpoints(..., ranks)"
            )
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
        if self.every.seconds is not None:  # clocks differ: all ranks or none
            due = self.ranks.sum([float(due)])[0] > 0
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
        seq = self.store.latest_seq() + 1
        embedding = {f"embedding.{k}": v for k, v in model.embedding.checkpoint_state().items()}
        groups = model.embedding.checkpoint_row_groups()
        fraction = self.tracker.fraction() if self.tracker else 1.0
        if kind == "incremental":
            assert self.tracker is not None
            embedding = rows_only(embedding, groups, self.tracker.modified())
        quantized = {}
        if bits < 32:
            embedding, quantized = quantize_embedding(embedding, groups, bits)
        rng, rng_meta = rng_state()
        optim, param_groups = optimizer_state(dense_opt)
        tensors = {
            k: v.detach().cpu()
            for k, v in {**embedding, **dense_state(model), **optim, **rng}.items()
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
        path = self.store.publish(f"ckpt-{seq:06d}", tensors, manifest)
        if kind == "full":
            self._chain_base = seq
        nbytes = data_bytes(path)
        emb_bytes = sum(
            tensor_bytes(v) for k, v in tensors.items() if k.startswith(("embedding.", "rows."))
        )
        weight_bytes = sum(tensor_bytes(v) for k, v in tensors.items() if is_weight(k, groups))
        self._account(kind, nbytes)
        if self.tracker is not None:
            self.tracker.reset()
        self._last_step, self._last_time = loop.step, time.monotonic()
        self.ranks.barrier()  # every rank holds this one before any drops the last
        if not self.policy.keep_all:
            self.store.prune(seq, kind)
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
        chain = self.store.chain(seq)
        last = chain[-1][0]
        self._check_identity(last, self.root / f"ckpt-{seq:06d}" / MANIFEST)
        merged = merge_chain(model, chain)
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
        try:
            model.load_dense_checkpoint_state(dense)
        except ValueError as exc:
            raise CheckpointError(f"{self.root / f'ckpt-{seq:06d}'}: {exc}") from None
        tensors = chain[-1][1]
        load_optimizer(dense_opt, tensors, last["param_groups"])
        set_rng_state(tensors, last["rng"])
        loop = LoopState(**last["loop"])
        if last["best"]:
            best = read_tensors(verified(self.root / last["best"]))
            loop.best = {k.removeprefix("model."): v for k, v in best.items()}
            self._best_written = loop.best_step
        self._last_step = loop.step
        self._last_time = time.monotonic()
        self._chain_full_bytes = None  # the next checkpoint after a resume is a full one
        self.restore_seconds = time.perf_counter() - started
        self.restored_step = loop.step
        return loop

    def _resume_seq(self) -> int:
        return self.store.latest_seq() if self.resume is True else int(self.resume)

    def has_checkpoints(self) -> bool:
        return self.store.latest_seq() > 0

    def restored_identity(self) -> dict[str, str]:
        """The identity in the latest checkpoint's manifest (e.g. its MLflow run id), after
        checking that it is this run's (config hash and data fingerprint)."""
        seq = self._resume_seq()
        if seq <= 0:
            raise CheckpointError(f"no checkpoint to resume from in {self.root}")
        path = self.root / f"ckpt-{seq:06d}" / MANIFEST
        manifest = read_manifest(path.parent)
        self._check_identity(manifest, path)
        for s in range(int(manifest.get("base", seq)), seq + 1):  # every file, before any work
            verified(self.root / f"ckpt-{s:06d}")
        if manifest.get("best"):
            verified(self.root / manifest["best"])
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

    def _write_best(self, loop: LoopState) -> str | None:
        if loop.best is None:
            return None
        name = f"best-{loop.best_step:09d}"
        if self._best_written != loop.best_step or not (self.root / name).is_dir():
            tensors = {f"model.{k}": v.detach().cpu() for k, v in loop.best.items()}
            self.store.publish(
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
