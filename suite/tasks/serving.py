"""``serving``: a trained model under a query stream with a tail-latency target.

After Gupta et al. (arXiv 1906.03109) and DeepRecSys (arXiv 2001.02772): queries arrive as
a Poisson stream with sizes from a named distribution (heavy-tailed ``lognormal`` by
default, as production query sizes are); the batching policy splits a query into batches
of at most ``max_batch`` samples; ``workers`` serve queries first come, first served. The
service time of a batch of ``b`` samples is *measured*: the trained model's inference on
``b`` test rows, median of repeats, per table precision (fp32, and int8/int4 through
fbgemm's n-bit kernels). A deterministic queue simulation then turns the measured service
times into latency percentiles, so the task reports the throughput at the p99 (or chosen
percentile) target and the whole latency-throughput curve.
"""

from __future__ import annotations

import heapq
import math
import time
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from suite.config import Frozen, RunConfig
from suite.embeddings.base import ComposedEmbedding
from suite.embeddings.quantize import Precision, quantize_embedding
from suite.errors import ConfigError
from suite.kernel_backend import require_fbgemm
from suite.models.base import RecModel
from suite.registry import TASKS
from suite.results import MetricSpec
from suite.tasks.accuracy import train_and_evaluate
from suite.tasks.base import RunContext, Task, TaskOutput


class ServingOptions(Frozen):
    """The query stream, the batching policy and the latency target."""

    precisions: list[Precision] = Field(
        default_factory=lambda: ["fp32", "int8", "int4"], min_length=1
    )
    size_distribution: Literal["lognormal", "pareto", "uniform", "fixed"] = Field(
        "lognormal", description="query sizes (samples per query)"
    )
    mean_size: float = Field(64.0, ge=1, description="mean samples per query")
    size_sigma: float = Field(1.0, gt=0, description="lognormal sigma / pareto tail shape")
    max_size: int = Field(4096, ge=1, description="largest query")
    queries: int = Field(4000, ge=100, description="queries simulated per arrival rate")
    max_batch: int = Field(256, ge=1, description="batching policy: split queries above this")
    workers: int = Field(1, ge=1, description="queries served at once")
    percentile: float = Field(99.0, gt=0, lt=100, description="tail-latency percentile")
    target_ms: float = Field(20.0, gt=0, description="latency target at that percentile")
    repeats: int = Field(15, ge=3, description="timed repeats per batch size")
    seed_offset: int = Field(0, description="added to the run seed for the query stream")
    plot: bool = True


def query_sizes(options: ServingOptions, rng: np.random.Generator) -> np.ndarray:
    """``[queries]`` samples per query, integers in ``[1, max_size]``."""
    n, mean = options.queries, options.mean_size
    if options.size_distribution == "fixed":
        sizes = np.full(n, mean)
    elif options.size_distribution == "uniform":
        sizes = rng.uniform(1, 2 * mean - 1, n)
    elif options.size_distribution == "lognormal":
        sigma = options.size_sigma
        sizes = rng.lognormal(math.log(mean) - sigma**2 / 2, sigma, n)
    else:  # pareto with shape a > 1 has mean x_m * a / (a - 1)
        shape = 1.0 + options.size_sigma
        sizes = (rng.pareto(shape, n) + 1) * mean * (shape - 1) / shape
    return np.clip(np.round(sizes), 1, options.max_size).astype(np.int64)


def batch_grid(max_batch: int) -> list[int]:
    """Batch sizes to time: powers of two up to ``max_batch``, and ``max_batch``."""
    sizes = [2**k for k in range(int(math.log2(max_batch)) + 1)]
    return sorted(set(sizes) | {max_batch})


@torch.no_grad()
def measure_service_times(
    models: dict[str, RecModel], ctx: RunContext, sizes: list[int], repeats: int
) -> dict[str, dict[int, float]]:
    """Median seconds of one inference of ``b`` test rows, per model and ``b`` in ``sizes``.

    The models are timed in turn within each repeat, so a drift in the machine's speed
    falls on all of them alike.
    """
    split = ctx.data.split("test")
    n = max(sizes)
    rows = np.arange(n) % len(split)
    dense = torch.from_numpy(np.array(split.dense[rows])).to(ctx.device)
    sparse = torch.from_numpy(np.array(split.sparse[rows]).astype(np.int64)).to(ctx.device)
    times: dict[str, dict[int, list[float]]] = {name: {b: [] for b in sizes} for name in models}
    for model in models.values():
        model.eval()
    for b in sizes:
        for model in models.values():
            model(dense[:b], sparse[:b])  # warm-up
        for _ in range(repeats):
            for name, model in models.items():
                if ctx.device.type == "cuda":
                    torch.cuda.synchronize(ctx.device)
                tick = time.perf_counter()
                model(dense[:b], sparse[:b])
                if ctx.device.type == "cuda":
                    torch.cuda.synchronize(ctx.device)
                times[name][b].append(time.perf_counter() - tick)
    return {name: {b: float(np.median(t)) for b, t in per.items()} for name, per in times.items()}


def query_service_seconds(sizes: np.ndarray, times: dict[int, float], max_batch: int) -> np.ndarray:
    """Service time of each query: its full batches plus the remainder, interpolated
    linearly between the timed batch sizes. ``[queries]``."""
    grid = np.asarray(sorted(times))
    values = np.asarray([times[b] for b in grid])
    full, rest = np.divmod(sizes, max_batch)
    t_full = float(np.interp(max_batch, grid, values))
    t_rest = np.where(rest > 0, np.interp(rest, grid, values), 0.0)
    return full * t_full + t_rest


def simulate_latencies(
    gaps: np.ndarray, service: np.ndarray, rate: float, workers: int
) -> np.ndarray:
    """Latency of each query (seconds) for Poisson arrivals at ``rate`` queries/s.

    ``gaps`` are unit-rate exponential inter-arrival gaps, scaled by ``1/rate`` so every
    rate sees the same pattern (common random numbers keep the curve monotone).
    """
    arrivals = np.cumsum(gaps / rate)
    if workers == 1:
        finish = np.empty_like(arrivals)
        free = 0.0
        for i, (arrive, need) in enumerate(zip(arrivals.tolist(), service.tolist(), strict=True)):
            free = max(free, arrive) + need
            finish[i] = free
        return finish - arrivals
    free_at = [0.0] * workers
    latencies = np.empty_like(arrivals)
    for i, (arrive, need) in enumerate(zip(arrivals.tolist(), service.tolist(), strict=True)):
        start = max(heapq.heappop(free_at), arrive)
        heapq.heappush(free_at, start + need)
        latencies[i] = start + need - arrive
    return latencies


def rate_at_target(
    gaps: np.ndarray, service: np.ndarray, options: ServingOptions, capacity: float
) -> float:
    """The highest arrival rate whose latency percentile meets the target (bisection).

    0 when even an idle system misses the target.
    """
    target = options.target_ms / 1e3

    def meets(rate: float) -> bool:
        latency = simulate_latencies(gaps, service, rate, options.workers)
        return float(np.percentile(latency, options.percentile)) <= target

    low, high = capacity * 1e-4, capacity
    if not meets(low):
        return 0.0
    if meets(high):
        return high
    for _ in range(40):
        mid = math.sqrt(low * high)
        low, high = (mid, high) if meets(mid) else (low, mid)
        if high / low < 1.001:
            break
    return low


@TASKS.register("serving")
class ServingTask(Task):
    """Throughput at a tail-latency target and the latency-throughput curve, per precision."""

    metrics = (
        MetricSpec("test_auc", True, "Test AUC", bounds=(0.0, 1.0), shown=True),
        MetricSpec(
            "*_queries_per_s_at_target",
            True,
            "{} queries at the latency target",
            "queries/s",
            "measured",
            primary=True,
            shown=True,
        ),
        MetricSpec(
            "*_samples_per_s_at_target",
            True,
            "{} samples at the latency target",
            "samples/s",
            "measured",
        ),
        MetricSpec("*_batch*_ms", False, "{} batch of {}", "ms", "measured"),
        MetricSpec(
            "*_speedup_at_target", True, "{} speed-up at the target", "x", "measured", shown=True
        ),
    )

    Options = ServingOptions

    def check(self, config: RunConfig) -> None:
        options: ServingOptions = config.task.typed_options()
        needs_tables = any(p != "fp32" for p in options.precisions)
        method = config.embedding.registry.get(config.embedding.name)
        if needs_tables and not issubclass(method, ComposedEmbedding):
            raise ConfigError(
                f"task serving: embedding {config.embedding.name!r} has no plain tables to "
                "quantize; use task.options.precisions=[fp32] or a composed method"
            )
        if needs_tables:
            require_fbgemm(
                "task serving: task.options.precisions other than fp32 (fbgemm's n-bit tables)"
            )

    def run(self, ctx: RunContext) -> TaskOutput:
        cfg = ctx.config
        options: ServingOptions = cfg.task.typed_options()
        model, trained = train_and_evaluate(ctx)
        rng = np.random.default_rng(cfg.seed + options.seed_offset)
        sizes = query_sizes(options, rng)
        gaps = rng.exponential(1.0, options.queries)
        grid = batch_grid(options.max_batch)
        metrics: dict[str, float] = {"test_auc": trained.metrics["test_auc"]}
        per_precision: dict[str, dict] = {}
        served = {
            precision: model
            if precision == "fp32"
            else RecModel(quantize_embedding(model.embedding, precision), model.backbone)
            for precision in dict.fromkeys(options.precisions)
        }
        measured = measure_service_times(served, ctx, grid, options.repeats)
        for precision, times in measured.items():
            service = query_service_seconds(sizes, times, options.max_batch)
            capacity = options.workers / float(service.mean())
            best = rate_at_target(gaps, service, options, capacity)
            curve = []
            for load in (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95):
                latency = simulate_latencies(gaps, service, load * capacity, options.workers)
                curve.append(
                    {
                        "load": load,
                        "queries_per_s": load * capacity,
                        "samples_per_s": load * capacity * float(sizes.mean()),
                        "p50_ms": float(np.percentile(latency, 50)) * 1e3,
                        "p95_ms": float(np.percentile(latency, 95)) * 1e3,
                        "p99_ms": float(np.percentile(latency, 99)) * 1e3,
                    }
                )
            per_precision[precision] = {
                "batch_seconds": {str(b): t for b, t in times.items()},
                "capacity_queries_per_s": capacity,
                "queries_per_s_at_target": best,
                "samples_per_s_at_target": best * float(sizes.mean()),
                "curve": curve,
            }
            metrics[f"{precision}_queries_per_s_at_target"] = best
            metrics[f"{precision}_samples_per_s_at_target"] = best * float(sizes.mean())
            metrics[f"{precision}_batch{options.max_batch}_ms"] = times[options.max_batch] * 1e3
        base = per_precision.get("fp32", {}).get("queries_per_s_at_target")
        for precision, figures in per_precision.items():
            if precision != "fp32" and base:
                metrics[f"{precision}_speedup_at_target"] = (
                    figures["queries_per_s_at_target"] / base
                )
        details: dict = {
            "query_sizes": {
                "distribution": options.size_distribution,
                "mean": float(sizes.mean()),
                "p50": float(np.percentile(sizes, 50)),
                "p99": float(np.percentile(sizes, 99)),
                "max": int(sizes.max()),
            },
            "target": {"percentile": options.percentile, "ms": options.target_ms},
            "precisions": per_precision,
            "train_seconds": trained.details.get("train_seconds"),
        }
        if options.plot:
            out = ctx.plot_dir("serving")
            details["plots"] = [str(draw_serving(per_precision, options, out))]
        return TaskOutput(metrics, details=details)


def draw_serving(per_precision: dict, options: ServingOptions, out_dir: Path) -> Path:
    """Tail latency against throughput, one line per precision, the target dashed."""
    import pandas as pd
    import seaborn as sns
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from suite.figures import palette, save_figure

    rows = [
        {
            "precision": p,
            "throughput (k samples/s)": c["samples_per_s"] / 1e3,
            "p99 (ms)": c["p99_ms"],
        }
        for p, figures in per_precision.items()
        for c in figures["curve"]
    ]
    fig = Figure(figsize=(6.4, 3.8))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    sns.lineplot(
        data=pd.DataFrame(rows),
        x="throughput (k samples/s)",
        y="p99 (ms)",
        hue="precision",
        marker="o",
        palette=palette(list(per_precision)),
        ax=ax,
    )
    ax.axhline(options.target_ms, ls="--", color="grey", lw=1, label="target")
    ax.set_yscale("log")
    ax.set_ylabel(f"p{options.percentile:g} latency (ms)")
    ax.set_title("Latency against throughput")
    ax.legend(fontsize=8, frameon=False)
    return save_figure(fig, out_dir / "latency_throughput.png")[0]
