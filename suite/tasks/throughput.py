"""``throughput``: training and inference samples/s, inference latency, and the loader alone.

For each batch size, over a steady window after ``warmup_steps``:

- **loader**: iterating the training :class:`BatchLoader` alone (same shuffle and seed as
  training), no model: the rate the data path can feed. If training runs close to it,
  the loader bounds training.
- **train**: the real training loop, end to end: next loader batch, copy to the device,
  :func:`suite.engine.train.train_step` (forward, loss, backward, the dense optimizer, the
  embedding's own sparse update and hooks; fused tables update inside backward). Timed as one
  window (device synchronized at its ends), so it includes the loader's cost.
- **inference**: ``model.eval()`` under ``torch.no_grad()`` on validation batches; each
  batch is timed alone (copy to device + forward, synchronized), which gives latency
  percentiles p50/p95/p99 (as DeepRecSys reports them) and samples/s = examples / summed
  latency. The loader's time is outside these timings.

Rates count real examples, so a last short batch of an epoch counts for what it holds;
``details`` records the effective batch size, the thread count and the device.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import numpy as np
import torch
from pydantic import Field, model_validator

from suite.config import Frozen
from suite.data.batch import Batch
from suite.data.loader import BatchLoader
from suite.environment import device_name
from suite.registry import TASKS
from suite.results import MetricSpec
from suite.tasks.base import RunContext, Task, TaskOutput


class ThroughputOptions(Frozen):
    """Batch sizes and the measuring window.

    The window is ``measure_seconds`` of wall time when set, else ``measure_steps`` steps.
    """

    batch_sizes: list[int] = Field(default_factory=lambda: [128, 2048], min_length=1)
    warmup_steps: int = Field(10, ge=0, description="steps run before the window")
    measure_steps: int | None = Field(50, ge=1, description="steps in the window")
    measure_seconds: float | None = Field(None, gt=0, description="window length in seconds")

    @model_validator(mode="after")
    def _check(self) -> ThroughputOptions:
        if any(b < 1 for b in self.batch_sizes):
            raise ValueError("batch_sizes: every batch size must be >= 1")
        if self.measure_steps is None and self.measure_seconds is None:
            raise ValueError("measure_steps: set measure_steps or measure_seconds")
        return self


@dataclass(frozen=True)
class Window:
    """What one timed window saw."""

    steps: int
    examples: int
    seconds: float
    cpu_seconds: float = float("nan")
    """CPU time of this process over the window (all its threads): on a shared machine,
    ``examples / cpu_seconds`` is a rate that other processes do not disturb."""

    @property
    def samples_per_second(self) -> float:
        return self.examples / self.seconds if self.seconds > 0 else float("nan")

    @property
    def samples_per_cpu_second(self) -> float:
        return self.examples / self.cpu_seconds if self.cpu_seconds > 0 else float("nan")

    @property
    def mean_batch(self) -> float:
        return self.examples / self.steps if self.steps else 0.0


def synchronize(device: torch.device) -> None:
    """Wait for queued device work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cycle(loader: BatchLoader) -> Iterator[Batch]:
    """The loader's batches epoch after epoch (epoch ``e`` uses its own shuffle)."""
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def timed_window(
    step: Callable[[], int],
    device: torch.device,
    warmup_steps: int,
    measure_steps: int | None,
    measure_seconds: float | None = None,
) -> Window:
    """Run ``step`` (returns the examples it processed) ``warmup_steps`` times, then time
    a window of ``measure_seconds`` (if given) or ``measure_steps`` calls."""
    for _ in range(warmup_steps):
        step()
    synchronize(device)
    steps = examples = 0
    cpu_start, start = time.process_time(), time.perf_counter()
    while True:
        examples += step()
        steps += 1
        if measure_seconds is not None:
            if time.perf_counter() - start >= measure_seconds:
                break
        elif steps >= (measure_steps or 1):
            break
    synchronize(device)
    seconds = time.perf_counter() - start
    return Window(steps, examples, seconds, time.process_time() - cpu_start)


def measure_loader(
    loader: BatchLoader, warmup: int, steps: int | None, seconds: float | None
) -> Window:
    """Samples/s of iterating ``loader`` alone (batches built, nothing else)."""
    batches = cycle(loader)
    return timed_window(lambda: len(next(batches)), torch.device("cpu"), warmup, steps, seconds)


def measure_training(
    model: torch.nn.Module,
    loader: BatchLoader,
    dense_opt: torch.optim.Optimizer | None,
    device: torch.device,
    warmup: int,
    steps: int | None,
    seconds: float | None,
) -> tuple[Window, float]:
    """Samples/s of the real training loop; also the last loss."""
    from suite.engine.train import train_step

    batches = cycle(loader)
    state = {"step": 0, "loss": None}
    model.train()

    def one() -> int:
        batch = next(batches)
        state["step"] += 1
        loss = train_step(model, batch.to(device), dense_opt, state["step"])
        state["loss"] = loss
        return len(batch)

    window = timed_window(one, device, warmup, steps, seconds)
    last = state["loss"]
    return window, float(last.detach()) if last is not None else float("nan")


@torch.no_grad()
def measure_inference(
    model: torch.nn.Module,
    loader: BatchLoader,
    device: torch.device,
    warmup: int,
    steps: int | None,
    seconds: float | None,
) -> tuple[Window, np.ndarray]:
    """Per-batch latency (seconds) of copy-to-device + forward, and the window they sum to."""
    batches = cycle(loader)
    latencies: list[tuple[float, float]] = []  # (wall, cpu) seconds per batch
    was_training = model.training
    model.eval()

    def one() -> int:
        batch = next(batches)
        synchronize(device)
        cpu_tick, tick = time.process_time(), time.perf_counter()
        on_device = batch.to(device)
        model(on_device.dense, on_device.sparse)
        synchronize(device)
        latencies.append((time.perf_counter() - tick, time.process_time() - cpu_tick))
        return len(batch)

    window = timed_window(one, device, warmup, steps, seconds)
    model.train(was_training)
    measured = np.asarray(latencies[warmup:]).reshape(-1, 2)
    lat = measured[:, 0]
    return Window(window.steps, window.examples, float(lat.sum()), float(measured[:, 1].sum())), lat


def _window(window: Window) -> dict[str, float]:
    return {
        **asdict(window),
        "mean_batch": window.mean_batch,
        "samples_per_second": window.samples_per_second,
        "samples_per_cpu_second": window.samples_per_cpu_second,
    }


@TASKS.register("throughput")
class ThroughputTask(Task):
    """Training and inference samples/s, inference latency p50/p95/p99, loader alone."""

    metrics = (
        MetricSpec(
            "train_samples_per_s_b*",
            True,
            "Training speed, batch {}",
            "samples/s",
            "measured",
            primary=True,
            shown=True,
        ),
        MetricSpec(
            "infer_samples_per_s_b*",
            True,
            "Inference speed, batch {}",
            "samples/s",
            "measured",
            shown=True,
        ),
        MetricSpec("infer_latency_ms_p50_b*", False, "Latency p50, batch {}", "ms", "measured"),
        MetricSpec("infer_latency_ms_p95_b*", False, "Latency p95, batch {}", "ms", "measured"),
        MetricSpec(
            "infer_latency_ms_p99_b*", False, "Latency p99, batch {}", "ms", "measured", shown=True
        ),
        MetricSpec(
            "loader_samples_per_s_b*", True, "Loader speed, batch {}", "samples/s", "measured"
        ),
    )

    Options = ThroughputOptions

    def run(self, ctx: RunContext) -> TaskOutput:
        from suite.engine.train import make_dense_optimizer

        cfg = ctx.config
        opts: ThroughputOptions = cfg.task.typed_options()
        model = ctx.build_model()
        dense_opt = make_dense_optimizer(model.dense_parameters(), cfg.train)
        train_split, val_split = ctx.data.split("train"), ctx.data.split("val")
        window = (opts.warmup_steps, opts.measure_steps, opts.measure_seconds)

        metrics: dict[str, float] = {}
        per_batch: dict[str, dict] = {}
        for size in opts.batch_sizes:
            train_loader = BatchLoader(train_split, size, shuffle=cfg.train.shuffle, seed=cfg.seed)
            loader = measure_loader(train_loader, *window)
            train_loader = BatchLoader(train_split, size, shuffle=cfg.train.shuffle, seed=cfg.seed)
            trained, loss = measure_training(model, train_loader, dense_opt, ctx.device, *window)
            infer, lat = measure_inference(model, BatchLoader(val_split, size), ctx.device, *window)
            p50, p95, p99 = (float(v) * 1e3 for v in np.percentile(lat, [50, 95, 99]))
            figures = {
                f"train_samples_per_s_b{size}": trained.samples_per_second,
                f"infer_samples_per_s_b{size}": infer.samples_per_second,
                f"infer_latency_ms_p50_b{size}": p50,
                f"infer_latency_ms_p95_b{size}": p95,
                f"infer_latency_ms_p99_b{size}": p99,
                f"loader_samples_per_s_b{size}": loader.samples_per_second,
            }
            metrics |= {name: float(value) for name, value in figures.items()}
            per_batch[str(size)] = {
                "train": {**_window(trained), "last_loss": loss},
                "inference": {
                    **_window(infer),
                    "latency_ms_mean": float(lat.mean() * 1e3),
                    "latency_ms_max": float(lat.max() * 1e3),
                },
                "loader": _window(loader),
                "train_over_loader": trained.samples_per_second / loader.samples_per_second,
            }
        details = {
            "device": ctx.device.type,
            "device_name": device_name(ctx.device.type),
            "threads": torch.get_num_threads(),
            "batch_sizes": list(opts.batch_sizes),
            "warmup_steps": opts.warmup_steps,
            "window": (
                {"seconds": opts.measure_seconds}
                if opts.measure_seconds is not None
                else {"steps": opts.measure_steps}
            ),
            "flops_per_example": model.flops_per_example(),
            "per_batch_size": per_batch,
            "method": (
                "train: end-to-end loop (loader + copy + train_step) timed as one "
                "window after warm-up; inference: per-batch copy + forward under no_grad, "
                "timed each; loader: BatchLoader iterated alone; device synchronized on GPU"
            ),
        }
        return TaskOutput(metrics, details=details)
