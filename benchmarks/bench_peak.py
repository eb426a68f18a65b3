"""The DLRM training step against this machine's GEMM peak and against plain PyTorch.

    python benchmarks/bench_peak.py [--repeats 3] [--seconds 2] [--batches 128,2048]

The model is issue 16's (bottom 512-256-64 to dim 16, top 512-256, 26 criteo-synth
tables, SGD lr 0.1 on the MLPs and on the tables). Per batch size, in one process:

- **GEMM peak at the step's shapes**: every fp32 GEMM one training step runs (for each
  ``nn.Linear(n, m)`` at batch ``B``: forward ``[B,n]x[n,m]``, gradient of the input
  ``[B,m]x[m,n]``, gradient of the weight ``[m,B]x[B,n]``), each timed alone (best of
  several) through ``torch.mm`` (MKL) and through oneDNN; the peak is the best of those
  rates, and each library's own best is shown. A 1024^3 GEMM is shown beside it.
- **the step's GEMM rate**: ``torch.profiler`` over a few real steps (``with_flops``):
  FLOPs of ``aten::mm``/``addmm``/``bmm`` over their own time; as a fraction of the peak.
- **the analytic compute floor**: training FLOPs per example (3x forward,
  :func:`suite.models.base.training_flops`) x samples/s, as a fraction of the peak.
- **suite vs plain**: the suite's loop (fbgemm table-batched embeddings, fused SGD)
  against DLRM written as ``dlrm_s_pytorch.py`` writes it (one ``nn.EmbeddingBag`` per
  table, one ``torch.optim.SGD`` over all parameters, sparse gradients), both fed by
  the same :class:`BatchLoader` and timed over the same window; the loader alone has its
  own row. Windows alternate between the sides; ratios are per pair, with the mean and
  95% CI over pairs (``suite.stats.mean_ci``).
- **the bound**: both sides run the same GEMMs, so were the suite's step nothing but its
  GEMMs (its other ops free), suite/plain would be the measured ratio / the suite's GEMM
  time share (Amdahl). A target above that bound needs faster GEMMs, not less overhead.
  Both steps' GEMM shares are shown.

Writes ``results/bench/peak.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

# isort: off
import suite  # noqa: F401  first: sets OMP_WAIT_POLICY before torch loads libgomp

# isort: on
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_dense_step import bench_config  # noqa: E402
from bench_throughput import PlainDLRM  # noqa: E402

from suite.config import RunConfig  # noqa: E402
from suite.data.loader import BatchLoader  # noqa: E402
from suite.data.prepared import PreparedDataset  # noqa: E402
from suite.data.source import get_prepared  # noqa: E402
from suite.engine.build import build_model, seed_everything  # noqa: E402
from suite.engine.train import make_dense_optimizer, train_step  # noqa: E402
from suite.models.base import RecModel, training_flops  # noqa: E402
from suite.stats import mean_ci  # noqa: E402
from suite.tasks.throughput import Window, cycle, measure_loader, timed_window  # noqa: E402

GEMMS = ("aten::mm", "aten::addmm", "aten::bmm")


def best_seconds(run: Callable[[], object], seconds: float) -> float:
    """The fastest of ``run``'s repeats over ~``seconds`` (after one untimed call)."""
    run()
    best, deadline = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        tick = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - tick)
    return best


def onednn_linear() -> Callable[..., torch.Tensor] | None:
    """oneDNN's fp32 linear (the op Inductor lowers CPU linears to), where torch has it."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise.default
    except (AttributeError, RuntimeError):
        return None


def gemm_rate(m: int, k: int, n: int, seconds: float = 0.3) -> float:
    """Best FLOP/s of ``[m,k] x [k,n]`` in fp32 through ``torch.mm`` (MKL on x86 builds)."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    return 2 * m * k * n / best_seconds(lambda: torch.mm(a, b, out=out), seconds)


def onednn_gemm_rate(m: int, k: int, n: int, seconds: float = 0.3) -> float | None:
    """Best FLOP/s of the same product through oneDNN (``[m,k]`` times a ``[n,k]`` weight,
    transposed), or None without oneDNN. Another library's kernels on the same cores: the
    machine's peak at a shape is the better of the two."""
    linear = onednn_linear()
    if linear is None:
        return None
    a, weight = torch.randn(m, k), torch.randn(n, k)
    return 2 * m * k * n / best_seconds(lambda: linear(a, weight, None, "none", [], ""), seconds)


def step_gemm_shapes(model: RecModel, batch: int) -> list[tuple[int, int, int]]:
    """(m, k, n) of every MLP GEMM one training step runs at ``batch``."""
    shapes = []
    for layer in model.backbone.modules():
        if isinstance(layer, nn.Linear):
            n_in, n_out = layer.in_features, layer.out_features
            shapes += [(batch, n_in, n_out), (batch, n_out, n_in), (n_out, batch, n_in)]
    return shapes


def gemm_peak(model: RecModel, batch: int, seconds: float = 0.3) -> dict:
    """Per step GEMM shape, the fp32 rate of ``torch.mm`` and of oneDNN (each the best over
    ~``seconds`` of repeats); the peak is the best rate of either, at any of the shapes."""
    per_shape, by_library = {}, {}
    for m, k, n in sorted(set(step_gemm_shapes(model, batch))):
        rates = {
            "torch.mm": gemm_rate(m, k, n, seconds),
            "onednn": onednn_gemm_rate(m, k, n, seconds),
        }
        per_shape[f"{m}x{k}x{n}"] = {lib: r for lib, r in rates.items() if r is not None}
    for lib in ("torch.mm", "onednn"):
        found = [rates[lib] for rates in per_shape.values() if lib in rates]
        if found:
            by_library[lib] = max(found)
    return {
        "peak_flops": max(by_library.values()),
        "peak_by_library": by_library,
        "per_shape": per_shape,
    }


Step = Callable[[], int]


def suite_step(config: RunConfig, data: PreparedDataset, batch: int) -> Step:
    """The suite's loop: fbgemm table-batched embeddings with fused SGD, ``train_step``."""
    model = build_model(config, data)
    dense_opt = make_dense_optimizer(model.dense_parameters(), config.train)
    batches = cycle(BatchLoader(data.split("train"), batch, shuffle=True, seed=config.seed))
    step = 0

    def one() -> int:
        nonlocal step
        step += 1
        b = next(batches)
        train_step(model, b, dense_opt, step)
        return len(b)

    return one


def plain_step(config: RunConfig, data: PreparedDataset, batch: int) -> Step:
    """The reference script's way: EmbeddingBag per table, one SGD over everything."""
    seed_everything(config.seed)
    options = config.model.typed_options()
    model = PlainDLRM(
        data.schema.cardinalities,
        data.schema.num_dense,
        config.embedding.options["dim"],
        list(options.bottom_mlp),
        list(options.top_mlp),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=config.train.dense_lr)
    loss_fn = nn.BCEWithLogitsLoss()
    batches = cycle(BatchLoader(data.split("train"), batch, shuffle=True, seed=config.seed))

    def one() -> int:
        b = next(batches)
        optimizer.zero_grad()
        loss_fn(model(b.dense, b.sparse), b.label).backward()
        optimizer.step()
        return len(b)

    return one


def profiled_gemm_rate(step: Step, batch: int, steps: int | None = None) -> dict:
    """FLOPs and own time of a step's GEMMs, from the profiler over a few real steps."""
    for _ in range(3):
        step()
    steps = steps or (20 if batch < 1024 else 5)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True
    ) as prof:
        for _ in range(steps):
            step()
    events = [e for e in prof.key_averages() if e.key in GEMMS]
    total = sum(e.self_cpu_time_total for e in prof.key_averages()) / 1e6
    flops = sum(e.flops for e in events)
    seconds = sum(e.self_cpu_time_total for e in events) / 1e6
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
    return {
        "top_ops_self_share": {e.key: e.self_cpu_time_total / 1e6 / total for e in ops},
        "gemm_flops_per_step": flops / steps,
        "gemm_seconds_share": seconds / total,
        "gemm_flops_per_s": flops / seconds,
    }


def measure(
    make: Callable[[RunConfig, PreparedDataset, int], Step],
    config: RunConfig,
    data: PreparedDataset,
    batch: int,
    seconds: float,
) -> Window:
    """A fresh ``make`` side's samples/s over a window of ``seconds`` (after 3 warm-up steps)."""
    return timed_window(make(config, data, batch), torch.device("cpu"), 3, None, seconds)


def ci_text(values: list[float]) -> str:
    ci = mean_ci(values)
    return f"{ci.mean:.2f} [{ci.low:.2f}, {ci.high:.2f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3, help="suite/plain window pairs")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each window")
    parser.add_argument("--batches", default="2048,128")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--out", default=str(ROOT / "results" / "bench" / "peak.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = bench_config()
    data = get_prepared(config.dataset, progress=False)
    load_start = os.getloadavg()
    print(
        f"threads {torch.get_num_threads()}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, "
        f"load average {load_start[0]:.1f} on {os.cpu_count()} CPUs"
    )
    square = gemm_rate(1024, 1024, 1024, seconds=1.0)
    report: dict = {"square_1024_flops": square, "batches": {}}
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        model = build_model(config, data)
        flops_per_example = training_flops(model, 1)
        peak = gemm_peak(model, batch)
        profiled = profiled_gemm_rate(suite_step(config, data, batch), batch)
        plain_profiled = profiled_gemm_rate(plain_step(config, data, batch), batch)
        loader = BatchLoader(data.split("train"), batch, shuffle=True, seed=0)
        suite_runs, plain_runs, loader_runs = [], [], []
        for r in range(args.repeats):
            pair = [suite_step, plain_step] if r % 2 == 0 else [plain_step, suite_step]
            for make in pair:
                window = measure(make, config, data, batch, args.seconds)
                (suite_runs if make is suite_step else plain_runs).append(window)
            loader_runs.append(measure_loader(loader, 2, None, args.seconds / 4))
        ratios = [
            s.samples_per_second / p.samples_per_second
            for s, p in zip(suite_runs, plain_runs, strict=True)
        ]
        cpu_ratios = [
            s.samples_per_cpu_second / p.samples_per_cpu_second
            for s, p in zip(suite_runs, plain_runs, strict=True)
        ]
        # Amdahl: were the suite's step nothing but its GEMMs (at today's rate), it would be
        # 1 / GEMM share faster; the plain baseline runs the same GEMMs
        bound = [r / profiled["gemm_seconds_share"] for r in ratios]
        floor = [flops_per_example * s.samples_per_second / peak["peak_flops"] for s in suite_runs]
        entry = {
            "flops_per_example": flops_per_example,
            "gemm_peak": peak,
            "step_gemm": profiled,
            "plain_step_gemm": plain_profiled,
            "ratio_bound_gemm_only": bound,
            "gemm_rate_fraction_of_peak": profiled["gemm_flops_per_s"] / peak["peak_flops"],
            "floor_fraction": floor,
            "suite_samples_per_s": [w.samples_per_second for w in suite_runs],
            "plain_samples_per_s": [w.samples_per_second for w in plain_runs],
            "loader_samples_per_s": [w.samples_per_second for w in loader_runs],
            "ratio": ratios,
            "ratio_cpu": cpu_ratios,
        }
        report["batches"][str(batch)] = entry
        rows.append(
            [
                str(batch),
                ci_text(ratios) + "x",
                ci_text(cpu_ratios) + "x",
                f"{peak['peak_flops'] / 1e9:.0f}",
                f"{profiled['gemm_flops_per_s'] / 1e9:.0f}",
                f"{entry['gemm_rate_fraction_of_peak']:.0%}",
                f"{profiled['gemm_seconds_share']:.0%} / {plain_profiled['gemm_seconds_share']:.0%}",
                ci_text(bound) + "x",
                ci_text(floor),
                f"{min(w.samples_per_second for w in loader_runs) / max(entry['suite_samples_per_s']):.0f}x",
            ]
        )
    header = [
        "batch",
        "suite/plain wall",
        "suite/plain cpu-s",
        "GEMM peak GF/s",
        "step GEMM GF/s",
        "of peak",
        "GEMM share suite/plain",
        "bound if GEMMs only",
        "floor fraction",
        "loader/suite",
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(
        f"\nfp32 1024^3 GEMM: {square / 1e9:.0f} GFLOP/s; ratios: mean [95% CI] over {args.repeats} pairs"
    )
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
    for batch, entry in report["batches"].items():
        libraries = entry["gemm_peak"]["peak_by_library"]
        print(
            f"batch {batch}, GEMM peak by library: "
            + ", ".join(f"{lib} {rate / 1e9:.0f} GF/s" for lib, rate in libraries.items())
        )
        shares = entry["step_gemm"]["top_ops_self_share"]
        print(
            f"batch {batch}, own time by op: "
            + ", ".join(f"{k} {v:.0%}" for k, v in shares.items())
        )
    report["load_average"] = {"start": load_start, "end": os.getloadavg()}
    report["threads"] = torch.get_num_threads()
    report["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
    report["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
