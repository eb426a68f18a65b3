"""The GPU check at the papers' scale (issue 70, item 5): the ``full`` DLRM job of the
``dlrm`` reproduction spec on Kaggle-size tables, trained a bounded number of steps by the
suite's own loop (:class:`suite.engine.train._Loop`: batches prepared ahead, pinned,
copied without a host wait, the loss read back every ``log_every`` steps).

Per table backend (fbgemm's TBE, torch) and batch (2048 and 8192 on CUDA): training
samples/s over ``measure`` steps after ``warmup``, then ``profile`` more steps under
``torch.profiler`` giving the step's breakdown (data, embedding forward, embedding
backward, dense forward and backward, optimizer, host gaps: ms per step) and the GPU's
busy share (the union of its kernels and copies, measured under the profiler, over the
step time measured without it), and the embedding lookup's bytes/s against the device's
copy bandwidth. Its targets (issue 70): fbgemm end to end at least the torch backend's
rate (at every batch); GPU busy at least 80% of the step at batch 8192. A target missed is a finding shown in the record and the summary, not a
failed step (a broken run is).

Data: with ``RECSUITE_BENCH_KAGGLE`` naming a file, the ``criteo-kaggle`` loader (protocol
``dlrm``) over it (generated there once by ``benchmarks/gen_criteo.py`` at Kaggle's
45,840,617 rows if missing: ~11 GB); otherwise, on CUDA, ``criteo-synth`` with Kaggle's
26 real cardinalities (33.8M embedding rows, 2.0 GiB at dim 16) and as many rows as the
steps read. The CPU analog (no CUDA, or ``--dry-run``) runs the same code on a tiny
``gen_criteo.py`` file through the ``criteo-kaggle`` loader at batches 256 and 1024.
"""

from __future__ import annotations

import importlib.util
import math
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import yaml

from suite.gpu_check.bandwidth import TBEShape, copy_bandwidth, tbe_bytes
from suite.gpu_check.steps import REPO, StepOutcome, kind

SPEC = Path(__file__).resolve().parents[1] / "reproductions" / "dlrm.yaml"
KAGGLE_ROWS = 45_840_617
KAGGLE_ENV = "RECSUITE_BENCH_KAGGLE"
"""A path for the Kaggle-size generated file (``nox -s bench`` reads the same variable)."""

SIZES: dict[str, dict[str, Any]] = {
    "cuda": {
        "batches": [2048, 8192],
        "warmup": 20,
        "measure": 100,
        "profile": 10,
        "copy_bytes": 1 << 30,
        "eval_rows": 16_384,
    },
    "cpu": {
        "batches": [256, 1024],
        "warmup": 2,
        "measure": 4,
        "profile": 2,
        "copy_bytes": 16 << 20,
        "raw_rows": 20_000,
    },
}
TARGETS = {"fbgemm_vs_torch_samples_per_s": 1.0, "gpu_busy_share_at_largest_batch": 0.80}
"""This step's targets (issue 70); the TBE bandwidth targets are the ``tbe-bandwidth``
step's (:data:`suite.gpu_check.bandwidth.TARGET_SHARE_OF_COPY`), at its production shapes.
The lookup's share of the copy bandwidth at this job's shape (dim 16, one id per feature)
is recorded here beside them."""
BACKENDS = ("fbgemm", "torch")
PHASES = (
    "data",
    "embedding_forward",
    "embedding_backward",
    "dense_forward",
    "dense_backward",
    "optimizer",
)
EMBEDDING_BACKWARD = ("Lookup", "Embedding", "embedding")
"""Words naming the embedding's autograd nodes (fbgemm's ``SplitLookupFunction_...``,
torch's ``EmbeddingBackward0``); every other node is the dense part's."""


def full_job() -> dict[str, Any]:
    """The ``full`` profile's DLRM job of ``suite/reproductions/dlrm.yaml`` as dotted
    overrides: its base (dataset, device, model, train) and its run (embedding, task)."""
    spec = yaml.safe_load(SPEC.read_text())
    nested = {**spec["profiles"]["full"]["base"], **spec["runs"]["full"]}
    return _dotted(nested)


def _dotted(nested: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in nested.items():
        if isinstance(value, dict):
            out |= _dotted(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def gen_criteo() -> Any:
    """``benchmarks/gen_criteo.py`` of the checkout, as a module."""
    path = REPO / "benchmarks" / "gen_criteo.py"
    if not path.is_file():
        raise RuntimeError(f"no {path} (the check needs the suite's checkout)")
    spec = importlib.util.spec_from_file_location("gen_criteo", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kaggle_file(path: Path, rows: int) -> Path:
    """``path``, a Criteo Kaggle-format file of ``rows`` rows written by ``gen_criteo.py``
    (once: an existing file is reused)."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        gen_criteo().generate(path, rows)
    return path


def dataset_overrides(device: torch.device, work: Path) -> dict[str, Any]:
    """Where the check's data comes from (see the module docstring)."""
    sizes = SIZES[kind(device)]
    named = os.environ.get(KAGGLE_ENV)
    if named or device.type != "cuda":
        rows = KAGGLE_ROWS if named else sizes["raw_rows"]
        raw = kaggle_file(Path(named) if named else work / "train.txt", rows)
        return {"dataset.raw": str(raw), "dataset.cache_dir": str(work / "prepared")}
    from suite.datasets.criteo import CRITEO_CARDINALITIES

    steps = sizes["warmup"] + sizes["measure"] + sizes["profile"]
    return {
        "dataset.name": "criteo-synth",
        "dataset.protocol": None,
        "dataset.cache_dir": str(work / "prepared"),
        "dataset.options.train_rows": steps * max(sizes["batches"]),
        "dataset.options.val_rows": sizes["eval_rows"],
        "dataset.options.test_rows": sizes["eval_rows"],
        "dataset.options.vocab_scale": 1.0,
        "dataset.options.keep_below": max(CRITEO_CARDINALITIES),
    }


def kaggle_step(device: torch.device) -> StepOutcome:
    """The ``full`` DLRM job at Kaggle size on ``device``, both backends, both batches."""
    from suite.api import resolve
    from suite.data.source import get_prepared
    from suite.engine.build import build_model

    sizes = SIZES[kind(device)]
    figures: dict[str, Any] = {"job": full_job(), "sizes": sizes, "targets": TARGETS}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-kaggle-") as work:
        base = {
            **full_job(),
            **dataset_overrides(device, Path(work)),
            "device": device.type,
            "train.progress": False,
            "tracking.enabled": False,
        }
        if device.type == "cpu":
            base["train.threads"] = 1
        started = time.perf_counter()
        data = get_prepared(resolve(None, base).dataset, progress=False)
        figures["prepare_seconds"] = time.perf_counter() - started
        figures["dataset"] = {
            "name": data.manifest.get("dataset"),
            "train_rows": len(data.split("train")),
            "embedding_rows": int(sum(data.schema.cardinalities)),
        }
        figures["copy_bytes_per_s"] = copy_bandwidth(device, sizes["copy_bytes"])
        runs: dict[str, dict[str, Any]] = {}
        for backend in BACKENDS:
            config = resolve(None, {**base, "embedding.options.backend": backend})
            model = build_model(config, data)
            for batch in sizes["batches"]:
                run = measure(model, data, config, device, batch, sizes)
                run |= _lookup_bytes(int(config.embedding.options["dim"]), run)
                run["table_backends"] = sorted(set(model.embedding.layout()["table_backends"]))
                runs[f"{backend}_b{batch}"] = run
                if not math.isfinite(run["final_train_logloss"]):
                    problems.append(f"{backend} at batch {batch}: non-finite training loss")
            if backend == "fbgemm" and "fbgemm" not in run["table_backends"]:
                problems.append("the fbgemm run's tables are not in fbgemm's kernel")
            del model
    figures["runs"] = runs
    copy = figures["copy_bytes_per_s"]
    for run in runs.values():
        for direction in ("forward", "backward"):
            ms = run["profile"][f"embedding_{direction}_ms"]
            rate = run[f"lookup_{direction}_bytes"] / (ms / 1e3) if ms > 0 else float("nan")
            run[f"lookup_{direction}_share_of_copy"] = rate / copy
    figures["versus_targets"] = versus_targets(runs, sizes, device)
    return StepOutcome(figures, summary(runs, figures["versus_targets"], sizes), problems)


def measure(
    model: Any, data: Any, config: Any, device: torch.device, batch: int, sizes: dict[str, Any]
) -> dict[str, Any]:
    """Train ``model`` with the suite's loop at ``batch``: samples/s over ``measure`` steps
    after ``warmup``, then the profile of ``profile`` more steps."""
    from suite.engine.train import _Loop
    from suite.progress import progress_bar

    warmup, steps, profiled = sizes["warmup"], sizes["measure"], sizes["profile"]
    total = warmup + steps + profiled
    cfg = config.train.model_copy(update={"batch_size": batch, "max_steps": total})
    loop = _Loop.start(model, data, cfg, config.seed, device, [], None)
    loop.bar = progress_bar(total=total, enabled=False)
    logged: list[float] = []
    loop.on_train_metrics = lambda metrics, step: logged.append(metrics["train_logloss"])
    model.train()
    batches = _batches(loop, device)
    for _ in range(warmup):
        loop.step(next(batches))
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        loop.step(next(batches))
    _sync(device)
    seconds = time.perf_counter() - start
    with _profiled(model, device) as prof:
        started = time.perf_counter()
        for _ in range(profiled):
            with torch.profiler.record_function("recsuite::step"):
                loop.step(next(batches))
        _sync(device)
        window = time.perf_counter() - started
    batches.close()
    step_ms = 1e3 * seconds / steps
    return {
        "batch": batch,
        "tables": len(data.schema.cardinalities),
        "steps": steps,
        "samples_per_s": steps * batch / seconds,
        "step_ms": step_ms,
        "final_train_logloss": logged[-1] if logged else float("nan"),
        "unique_rows_per_batch": _unique_rows(loop),
        **breakdown(prof, device, window, profiled, step_ms),
    }


def _batches(loop: Any, device: torch.device) -> Any:
    """The loop's batches as the loop reads them (ahead, pinned on CUDA), its data reads
    marked for the profiler."""
    from suite.data.prefetch import batches_ahead

    read = loop.loader._read

    def marked(*args: Any, **kwargs: Any) -> Any:
        with torch.profiler.record_function("recsuite::data"):
            return read(*args, **kwargs)

    loop.loader._read = marked
    return batches_ahead(_forever(loop.loader), device)


def _forever(loader: Any) -> Iterator[Any]:
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        yield from loader.batches()
        epoch += 1


@contextmanager
def _profiled(model: Any, device: torch.device) -> Iterator[Any]:
    """``torch.profiler`` over the block, the embedding's and the whole model's forward
    marked by hooks."""
    marks: list[Any] = []

    def opener(name: str) -> Any:
        def hook(module: Any, args: Any) -> None:
            mark = torch.profiler.record_function(name)
            mark.__enter__()
            marks.append(mark)

        return hook

    def closer(module: Any, args: Any, output: Any) -> None:
        marks.pop().__exit__(None, None, None)

    handles = [
        model.register_forward_pre_hook(opener("recsuite::forward")),
        model.register_forward_hook(closer),
        model.embedding.register_forward_pre_hook(opener("recsuite::embedding_forward")),
        model.embedding.register_forward_hook(closer),
    ]
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    _sync(device)
    try:
        with torch.profiler.profile(activities=activities) as prof:
            yield prof
    finally:
        for handle in handles:
            handle.remove()


def _time(event: Any, device: torch.device) -> float:
    """An averaged event's total time in µs: on the device for CUDA, on the CPU else."""
    if device.type == "cuda":
        return float(getattr(event, "device_time_total", getattr(event, "cuda_time_total", 0)))
    return float(event.cpu_time_total)


def breakdown(
    prof: Any, device: torch.device, window_s: float, steps: int, step_ms: float
) -> dict[str, Any]:
    """The profiled steps' time per phase (ms per step; on CUDA the device's time, on CPU
    the host's); on CUDA the device's busy time per step, its share of ``step_ms`` (the
    step measured without the profiler, whose host overhead would widen the gaps) and the
    host gaps (the rest of ``step_ms``)."""
    phase = dict.fromkeys(PHASES, 0.0)
    forward = 0.0
    optimizers: dict[str, float] = {}
    data_event = "Memcpy HtoD" if device.type == "cuda" else "recsuite::data"
    for event in prof.key_averages():
        name, spent = event.key, _time(event, device)
        if name == "recsuite::forward":
            forward += spent
        elif name == "recsuite::embedding_forward":
            phase["embedding_forward"] += spent
        elif name.startswith("autograd::engine::evaluate_function:"):
            embedding = any(word in name for word in EMBEDDING_BACKWARD)
            phase["embedding_backward" if embedding else "dense_backward"] += spent
        elif name.startswith("Optimizer.step#"):
            phase["optimizer"] += spent
            optimizers[name.removeprefix("Optimizer.step#")] = spent / steps / 1e3
        elif name == data_event or name.startswith(data_event + " "):
            phase["data"] += spent  # CUDA: the copies to the device; CPU: the batch reads
    phase["dense_forward"] = max(0.0, forward - phase["embedding_forward"])
    per_step = {f"{k}_ms": v / steps / 1e3 for k, v in phase.items()}
    profiled_ms = 1e3 * window_s / steps
    out: dict[str, Any] = {
        "profile": {"profiled_step_ms": profiled_ms, **per_step, "optimizers_ms": optimizers}
    }
    if device.type == "cuda":
        busy_ms = 1e3 * _busy_seconds(prof) / steps
        out["profile"]["device_busy_ms"] = busy_ms
        out["profile"]["host_gaps_ms"] = max(0.0, step_ms - busy_ms)
        out["gpu_busy_share"] = min(1.0, busy_ms / step_ms)
    else:
        out["profile"]["host_gaps_ms"] = None  # no device to wait on
        out["gpu_busy_share"] = None
    return out


def _busy_seconds(prof: Any) -> float:
    """Seconds in which the device ran a kernel or a copy (the union of their spans)."""
    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
    )
    busy, end = 0.0, -math.inf
    for lo, hi in spans:
        if hi <= end:
            continue
        busy += hi - max(lo, end)
        end = hi
    return busy / 1e6


def _unique_rows(loop: Any) -> int:
    """Distinct (feature, id) pairs of the loop's first batch: the rows a backward updates."""
    first = next(iter(loop.loader.batches()))
    return sum(int(column.unique().numel()) for column in first.sparse.t())


def _lookup_bytes(dim: int, run: dict[str, Any]) -> dict[str, Any]:
    """Bytes the lookup's forward and backward move at ``run``'s shape (one id per
    feature; :func:`suite.gpu_check.bandwidth.tbe_bytes`)."""
    shape = TBEShape(run["tables"], 0, dim, run["batch"], 1)
    moved = tbe_bytes(shape, run["unique_rows_per_batch"])
    return {"lookup_forward_bytes": moved["forward"], "lookup_backward_bytes": moved["backward"]}


def versus_targets(
    runs: dict[str, dict[str, Any]], sizes: dict[str, Any], device: torch.device
) -> dict[str, Any]:
    """Each target's figure, bound and whether it is met (``None`` on CPU: the targets
    are a GPU's)."""
    ratio = {b: runs[f"fbgemm_b{b}"]["samples_per_s"] / runs[f"torch_b{b}"]["samples_per_s"]
             for b in sizes["batches"]}  # fmt: skip
    largest = runs[f"fbgemm_b{max(sizes['batches'])}"]
    figures = {
        "fbgemm_vs_torch_samples_per_s": min(ratio.values()),
        "gpu_busy_share_at_largest_batch": largest["gpu_busy_share"],
    }
    out: dict[str, Any] = {}
    for name, bound in TARGETS.items():
        value = figures[name]
        met = None if value is None or device.type != "cuda" else bool(value >= bound)
        out[name] = {"value": value, "at_least": bound, "met": met}
    out["fbgemm_vs_torch_per_batch"] = ratio
    return out


def summary(runs: dict[str, dict[str, Any]], targets: dict[str, Any], sizes: dict) -> str:
    """One table line: each run's samples/s, the GPU's busy share, the targets."""
    rates = ", ".join(
        f"b{b}: fbgemm {runs[f'fbgemm_b{b}']['samples_per_s']:,.0f} torch "
        f"{runs[f'torch_b{b}']['samples_per_s']:,.0f}/s"
        for b in sizes["batches"]
    )
    big = max(sizes["batches"])
    busy = runs[f"fbgemm_b{big}"]["gpu_busy_share"]
    marks = {True: "met", False: "MISSED", None: "n/a"}
    verdicts = "; ".join(f"{name} {marks[targets[name]['met']]}" for name in TARGETS)
    busy_text = f"GPU busy {busy:.0%}" if busy is not None else "no GPU busy share on CPU"
    return f"{rates}; {busy_text}; targets: {verdicts}"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
