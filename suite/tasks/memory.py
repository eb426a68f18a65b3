"""``memory``: bytes by component, peak memory of a step, and the compression ratio.

Everything is measured after the method's compression has happened: a method that
compresses during training (FIITED prunes along a schedule) is first trained through the
one training loop for :meth:`~suite.embeddings.base.EmbeddingMethod.compression_steps`
steps (``compress: false`` measures the model as built).

Components (bytes of the real tensors; the embedding method's analytic
:meth:`~suite.embeddings.base.EmbeddingMethod.memory` is checked against them):

- embedding parameters, auxiliary structures (split by
  :meth:`~suite.embeddings.base.EmbeddingMethod.auxiliary_parts` into index and
  utilities) and sparse optimizer state, from
  :meth:`~suite.embeddings.base.EmbeddingMethod.storage_tensors` plus, for tables with
  sparse gradients, the torch sparse optimizer's state tensors;
- dense parameters (backbone, and dense parameters the embedding method owns outside its
  storage, e.g. projections) and the dense optimizer's state tensors, measured after
  one real training step (Adam allocates its state on the first step).

Peaks, over one training step (the second, so optimizer state already exists) and one
inference forward, with the batch already built and on the device:

- GPU: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``.
- CPU: the process's peak resident set. Linux keeps a high-water mark (``VmHWM`` in
  ``/proc/self/status``); writing ``5`` to ``/proc/self/clear_refs`` resets it to the
  current RSS, so ``VmHWM`` after the step is the peak during it. Where that write is
  refused, a thread samples ``VmRSS`` every millisecond instead (``details`` says which).
  ``*_peak_bytes`` is the absolute process peak (interpreter, libraries, model and
  optimizer state included); ``*_extra_bytes`` is that peak minus the RSS just before
  the step. The allocator keeps freed memory for reuse, so the extra is what the step
  needed beyond what the process already held, not every transient allocation.

Compression ratio: the same config with ``full`` embeddings (same dim and backend) is
built and its ``(parameters + auxiliary)`` bytes divided by this method's;
``embedding_total_fraction_of_full`` compares totals with optimizer state.
"""

from __future__ import annotations

import gc
import math
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from pydantic import Field

from suite.config import Frozen
from suite.data.batch import Batch
from suite.data.loader import BatchLoader
from suite.models.base import RecModel
from suite.registry import TASKS
from suite.results import MetricSpec
from suite.tasks.base import RunContext, Task, TaskOutput

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


class MemoryOptions(Frozen):
    """Batch sizes of the measured steps and whether to build the ``full`` reference."""

    batch_size: int | None = Field(
        None, ge=1, description="training step batch; default train.batch_size"
    )
    inference_batch_size: int | None = Field(
        None, ge=1, description="inference batch; default train.eval_batch_size"
    )
    compare_full: bool = Field(True, description="build the full-embedding config for the ratio")
    compress: bool = Field(
        True, description="train until the embedding method's compression is done (e.g. pruning)"
    )


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Summed ``nbytes`` of ``tensors``, each distinct tensor (same data, shape, dtype)
    counted once."""
    seen: set[tuple[int, tuple[int, ...], torch.dtype]] = set()
    total = 0
    for t in tensors:
        key = (t.data_ptr(), tuple(t.shape), t.dtype)
        if key in seen:
            continue
        seen.add(key)
        total += t.nbytes
    return total


def optimizer_state_tensors(optimizer: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    """Every tensor in a torch optimizer's state (moments, accumulators, step counters)."""
    if optimizer is None:
        return []
    return [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]


def _status_kib(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+)\s+kB", STATUS.read_text(), re.MULTILINE)
    return int(match.group(1)) if match else 0


def _reset_hwm() -> bool:
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return _status_kib("VmHWM") <= _status_kib("VmRSS") + 64  # reset took effect


class _RssSampler:
    """Samples VmRSS every millisecond in a thread (fallback when VmHWM cannot be reset)."""

    def __init__(self) -> None:
        self.peak = _status_kib("VmRSS")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _status_kib("VmRSS"))
            time.sleep(0.001)

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _status_kib("VmRSS"))


def peak_memory(fn: Callable[[], object], device: torch.device) -> dict[str, int | str]:
    """Run ``fn`` once; its peak memory (absolute and above the level before it)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        return {"peak": peak, "extra": peak - before, "method": "torch.cuda.max_memory_allocated"}
    if not STATUS.is_file():
        fn()
        return {"peak": 0, "extra": 0, "method": "unavailable (no /proc/self/status)"}
    before = _status_kib("VmRSS")
    if _reset_hwm():
        fn()
        peak = _status_kib("VmHWM")
        method = "VmHWM after reset via /proc/self/clear_refs"
    else:
        with _RssSampler() as sampler:
            fn()
        peak = sampler.peak
        method = "VmRSS sampled every 1 ms"
    return {"peak": peak * 1024, "extra": max(0, peak - before) * 1024, "method": method}


def _first_batch(loader: BatchLoader, device: torch.device) -> Batch:
    return next(iter(loader)).to(device)


def _full_embedding_bytes(ctx: RunContext) -> dict[str, int]:
    """(parameters, auxiliary, optimizer) bytes of the same config with ``full`` embeddings."""
    spec = ctx.config.embedding
    keep = {k: spec.options[k] for k in ("dim", "backend") if k in spec.options}
    config = ctx.config.with_overrides({"embedding.name": "full", "embedding.options": keep})
    model = ctx.build_model(config)
    memory = model.embedding.memory()
    del model
    gc.collect()
    return {
        "parameters": memory.parameters,
        "auxiliary": memory.auxiliary,
        "optimizer": memory.optimizer,
    }


def dense_parameter_split(
    model: RecModel, storage: dict[str, list[torch.Tensor]]
) -> dict[str, int]:
    """Bytes of dense parameters: the backbone's, and the embedding method's own that are
    not already among its storage tensors."""
    stored = {t.data_ptr() for ts in storage.values() for t in ts}
    in_embedding = {id(p) for p in model.embedding.parameters()}
    backbone = embedding = 0
    for p in model.dense_parameters():
        if id(p) not in in_embedding:
            backbone += p.nbytes
        elif p.data_ptr() not in stored:
            embedding += p.nbytes
    return {"backbone": backbone, "embedding": embedding}


def _compress(model: RecModel, ctx: RunContext) -> int:
    """Train ``model`` through the one training loop until its embedding method holds its
    compressed size; return the steps taken (0 for methods compressed from the start)."""
    from suite.engine.train import train

    steps = model.embedding.compression_steps()
    if steps <= 0:
        return 0
    cfg = ctx.config.train
    per_epoch = max(1, math.ceil(len(ctx.data.split("train")) / cfg.batch_size))
    budget = cfg.model_copy(
        update={
            "max_steps": steps,
            "epochs": math.ceil(steps / per_epoch),
            "checkpoint": "final",
            "eval_every_steps": None,
        }
    )
    return train(model, ctx.data, budget, ctx.config.seed, ctx.device).steps


def _measure_model(ctx: RunContext, opts: MemoryOptions) -> dict:
    """Build the config's model, train it until its compression is done, run two more
    training steps and one inference forward, and return its byte counts and peaks."""
    from suite.engine.train import make_dense_optimizer, train_step

    cfg, device = ctx.config, ctx.device
    model = ctx.build_model()
    done = _compress(model, ctx) if opts.compress else 0
    dense_opt = make_dense_optimizer(model.dense_parameters(), cfg.train)
    train_loader = BatchLoader(
        ctx.data.split("train"),
        opts.batch_size or cfg.train.batch_size,
        shuffle=cfg.train.shuffle,
        seed=cfg.seed,
    )
    infer_loader = BatchLoader(
        ctx.data.split("val"), opts.inference_batch_size or cfg.train.eval_batch_size
    )
    train_batch = _first_batch(train_loader, device)
    infer_batch = _first_batch(infer_loader, device)

    model.train()
    train_step(model, train_batch, dense_opt, done + 1)  # optimizer state now exists

    def training() -> None:
        train_step(model, train_batch, dense_opt, done + 2)

    def inference() -> None:
        with torch.no_grad():
            model(infer_batch.dense, infer_batch.sparse)

    train_peak = peak_memory(training, device)
    model.eval()
    infer_peak = peak_memory(inference, device)
    model.train()

    analytic = model.embedding.memory()
    storage = model.embedding.storage_tensors()
    sparse_state = storage.get("optimizer", [])
    parts = model.embedding.auxiliary_parts()
    return {
        "real": {
            "parameters": tensor_bytes(storage.get("parameters", [])),
            "auxiliary": tensor_bytes(storage.get("auxiliary", [])),
            "optimizer": tensor_bytes(sparse_state),
        },
        "auxiliary_parts": {k: tensor_bytes(v) for k, v in parts.items()},
        "compression_steps": done,
        "analytic": {
            "parameters": analytic.parameters,
            "auxiliary": analytic.auxiliary,
            "optimizer": analytic.optimizer,
        },
        "dense": dense_parameter_split(model, storage),
        "dense_optimizer": tensor_bytes(optimizer_state_tensors(dense_opt)),
        "train_peak": train_peak,
        "infer_peak": infer_peak,
        "batch_sizes": {"train": len(train_batch), "inference": len(infer_batch)},
    }


def _bytes(name: str, label: str, shown: bool = False, measured: bool = False) -> MetricSpec:
    kind = "measured" if measured else "size"
    return MetricSpec(name, False, label, "bytes", kind, bounds=(0, float("inf")), shown=shown)


@TASKS.register("memory")
class MemoryTask(Task):
    """Bytes by component, peak memory of a training and an inference step, compression ratio."""

    metrics = (
        _bytes("embedding_bytes", "Embedding memory", shown=True),
        _bytes("embedding_parameter_bytes", "Embedding parameters"),
        _bytes("embedding_auxiliary_bytes", "Embedding auxiliary"),
        _bytes("embedding_index_bytes", "Embedding index"),
        _bytes("embedding_utility_bytes", "Embedding utilities"),
        _bytes("sparse_optimizer_bytes", "Sparse optimizer state"),
        _bytes("embedding_total_bytes", "Embedding memory with optimizer state"),
        _bytes("dense_parameter_bytes", "Dense parameters"),
        _bytes("dense_optimizer_bytes", "Dense optimizer state"),
        _bytes("total_state_bytes", "Total training state", shown=True),
        _bytes("train_step_peak_bytes", "Training step peak", measured=True, shown=True),
        _bytes("train_step_extra_bytes", "Training step extra", measured=True),
        _bytes("inference_step_peak_bytes", "Inference step peak", measured=True),
        _bytes("inference_step_extra_bytes", "Inference step extra", measured=True),
        _bytes("full_embedding_bytes", "Full-table embedding memory"),
        _bytes("full_embedding_total_bytes", "Full-table embedding memory with optimizer state"),
        MetricSpec(
            "embedding_total_fraction_of_full",
            False,
            "Embedding memory with optimizer state, share of full tables",
            kind="ratio",
            bounds=(0.0, float("inf")),
        ),
        _bytes("analytic_mismatch_bytes", "Analytic mismatch"),
        MetricSpec(
            "compression_ratio", True, "Compression", "x", "ratio", primary=True, shown=True
        ),
        MetricSpec(
            "compression_ratio_with_optimizer", True, "Compression with optimizer", "x", "ratio"
        ),
    )

    Options = MemoryOptions

    def run(self, ctx: RunContext) -> TaskOutput:
        cfg = ctx.config
        opts: MemoryOptions = cfg.task.typed_options()
        m = _measure_model(ctx, opts)  # the model is gone when this returns
        real, analytic_bytes = m["real"], m["analytic"]
        train_peak, infer_peak = m["train_peak"], m["infer_peak"]
        dense, dense_opt_bytes = m["dense"], m["dense_optimizer"]
        embedding_bytes = real["parameters"] + real["auxiliary"]
        dense_bytes = dense["backbone"] + dense["embedding"]
        total = embedding_bytes + real["optimizer"] + dense_bytes + dense_opt_bytes
        mismatch = sum(abs(real[k] - analytic_bytes[k]) for k in real)

        if cfg.embedding.name == "full":
            full = dict(analytic_bytes)
        elif opts.compare_full:
            full = _full_embedding_bytes(ctx)
        else:
            full = None
        nan = float("nan")
        full_emb = float(full["parameters"] + full["auxiliary"]) if full else nan
        full_all = (
            float(full["parameters"] + full["auxiliary"] + full["optimizer"]) if full else nan
        )
        parts = m["auxiliary_parts"]
        embedding_total = embedding_bytes + real["optimizer"]

        metrics = {
            "embedding_parameter_bytes": float(real["parameters"]),
            "embedding_auxiliary_bytes": float(real["auxiliary"]),
            "embedding_index_bytes": float(parts.get("index", 0)),
            "embedding_utility_bytes": float(parts.get("utilities", 0)),
            "embedding_bytes": float(embedding_bytes),
            "sparse_optimizer_bytes": float(real["optimizer"]),
            "embedding_total_bytes": float(embedding_total),
            "dense_parameter_bytes": float(dense_bytes),
            "dense_optimizer_bytes": float(dense_opt_bytes),
            "total_state_bytes": float(total),
            "train_step_peak_bytes": float(train_peak["peak"]),
            "train_step_extra_bytes": float(train_peak["extra"]),
            "inference_step_peak_bytes": float(infer_peak["peak"]),
            "inference_step_extra_bytes": float(infer_peak["extra"]),
            "full_embedding_bytes": full_emb,
            "full_embedding_total_bytes": full_all,
            "embedding_total_fraction_of_full": embedding_total / full_all,
            "compression_ratio": full_emb / embedding_bytes if embedding_bytes else nan,
            "compression_ratio_with_optimizer": (
                full_all / (embedding_bytes + real["optimizer"])
                if embedding_bytes + real["optimizer"]
                else nan
            ),
            "analytic_mismatch_bytes": float(mismatch),
        }
        metrics = {k: v for k, v in metrics.items() if v == v}  # unavailable figures left out
        details = {
            "device": ctx.device.type,
            "threads": torch.get_num_threads(),
            "batch_sizes": m["batch_sizes"],
            "embedding": {
                "real": real,
                "analytic": analytic_bytes,
                "matches": mismatch == 0,
                "auxiliary_parts": parts,
            },
            "compression_steps": m["compression_steps"],
            "dense_parameters": dense,
            "full_embedding": full,
            "peak_method": {"train": train_peak["method"], "inference": infer_peak["method"]},
            "peak_step": "second training step after compression (optimizer state "
            "allocated by the first)",
        }
        return TaskOutput(metrics, details=details)
