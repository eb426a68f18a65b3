"""``sharding``: sharding plans for a dataset's embedding tables, as a benchmark (no training).

The NeuroShard / AutoShard question: given the tables and a world size, how evenly does a
plan spread the embedding cost, and does it fit? For each world size the task asks
TorchRec's planner (``EmbeddingShardingPlanner``: table-, row-, column-, table-row-wise and
data-parallel shards, chosen by its own cost model) and three table-wise baselines
(size-greedy, lookup-greedy, seeded random) for a plan, and scores every plan with the same
TorchRec estimators (``EmbeddingPerfEstimator``, ``EmbeddingStorageEstimator``): the
slowest and mean per-rank embedding cost (their ratio is the imbalance), per-rank memory,
and whether every rank fits its device memory.

Tables are the dataset's (``tables: prepared``) or, for the synthetic datasets, the real
datasets' full-size vocabularies they are shaped after (``tables: full-size``, the
default), optionally scaled (``row_scale``) and replicated (``table_copies``) to the
populations a user asks about.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from suite.config import Frozen, RunConfig
from suite.engine import planning
from suite.engine.sharding_measure import draw_measured, measure_plans, print_measured, summarize
from suite.kernel_backend import require_fbgemm
from suite.registry import TASKS
from suite.results import MetricSpec
from suite.tasks.base import RunContext, Task, TaskOutput

PLANNERS = ("torchrec", "size-greedy", "lookup-greedy", "random")


class ShardingOptions(Frozen):
    """Tables, world sizes and the device each rank stands for."""

    world_sizes: list[int] = Field(default_factory=lambda: [2, 4, 8, 16, 32, 64, 128], min_length=1)
    tables: Literal["full-size", "prepared"] = "full-size"
    row_scale: float = Field(1.0, gt=0, description="multiply every table's rows")
    table_copies: int = Field(1, ge=1, description="replicate the table set")
    compute_device: Literal["cuda", "cpu"] = Field("cuda", description="what each rank is")
    hbm_gib: float = Field(80.0, gt=0, description="device memory per rank (cuda)")
    ddr_gib: float = Field(128.0, gt=0, description="host memory per rank")
    batch_size: int | None = Field(None, ge=1, description="per-rank batch (default: train's)")
    planners: list[Literal["torchrec", "size-greedy", "lookup-greedy", "random"]] = Field(
        default_factory=lambda: list(PLANNERS), min_length=1
    )
    plot: bool = True
    measure: bool = Field(
        True, description="run each plan at measure_world on this machine (gloo, DMP) and clock it"
    )
    measure_world: int = Field(2, ge=2, le=8, description="processes of the measured run")
    measure_steps: int = Field(10, ge=1, description="clocked steps per plan (after 2 warm-up)")
    measure_max_rows: int = Field(
        100_000, ge=1, description="measured run: tables shrunk to at most this many rows"
    )


def table_rows(ctx: RunContext, options: ShardingOptions) -> list[int]:
    """Rows of each table the plans place."""
    rows = list(ctx.data.schema.cardinalities)
    if options.tables == "full-size":
        source = ctx.config.dataset.registry.get(ctx.config.dataset.name)
        profile = getattr(source, "profile", None)
        rows = list(getattr(profile, "real_cardinalities", None) or rows)
    scaled = [max(1, int(round(r * options.row_scale))) for r in rows]
    return scaled * options.table_copies


QUIET = "task sharding (TorchRec's planner)"
"""What needs fbgemm, for :func:`suite.engine.planning.quiet_torchrec`'s message."""


def _setup(rows: list[int], dim: int, world: int, options: ShardingOptions) -> tuple:
    """TorchRec's view of the tables: a meta-device collection, the topology, the
    per-table constraints and the sharders."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.types import ParameterConstraints

    count = len(rows)
    module = planning.meta_collection(
        [f"t{i}" for i in range(count)], rows, [dim] * count, [f"f{i}" for i in range(count)]
    )
    gib = 1024**3
    topology = planning.topology(
        world,
        options.compute_device,
        hbm_bytes=int(options.hbm_gib * gib) if options.compute_device == "cuda" else None,
        ddr_bytes=int(options.ddr_gib * gib),
    )
    constraints = {f"t{i}": ParameterConstraints(pooling_factors=[1.0]) for i in range(count)}
    return module, topology, constraints, [EmbeddingBagCollectionSharder()]


@functools.lru_cache(maxsize=32)
def _torchrec_plan(
    rows: tuple[int, ...], dim: int, world: int, options_json: str, batch: int
) -> str:
    """TorchRec's planner's plan, scored (JSON). It does not depend on the seed, so the
    seeds of one process plan once."""
    from torchrec.distributed.planner.types import PlannerError

    options = ShardingOptions.model_validate_json(options_json)
    chosen: list = []

    def keep(plan: list) -> list:
        chosen[:] = plan
        return plan

    with planning.quiet_torchrec(QUIET):
        module, topology, constraints, sharders = _setup(list(rows), dim, world, options)
        planner = planning.planner(topology, batch, constraints, stats=[], callbacks=[keep])
        try:
            planner.plan(module, sharders)
            return json.dumps(score(chosen, world, topology, options))
        except PlannerError as exc:
            return json.dumps({"fits": False, "error": str(exc).splitlines()[0]})


def plan_world(
    rows: list[int], dim: int, world: int, options: ShardingOptions, batch: int, seed: int
) -> dict[str, dict[str, Any]]:
    """Every planner's plan for ``world`` ranks, scored with TorchRec's estimators."""
    with planning.quiet_torchrec(QUIET):
        return _plan_world(rows, dim, world, options, batch, seed)


def _plan_world(
    rows: list[int], dim: int, world: int, options: ShardingOptions, batch: int, seed: int
) -> dict[str, dict[str, Any]]:
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.shard_estimators import (
        EmbeddingPerfEstimator,
        EmbeddingStorageEstimator,
    )

    module, topology, constraints, sharders = _setup(rows, dim, world, options)
    out: dict[str, dict[str, Any]] = {}
    if "torchrec" in options.planners:
        out["torchrec"] = json.loads(
            _torchrec_plan(tuple(rows), dim, world, options.model_dump_json(), batch)
        )
    enumerator = EmbeddingEnumerator(
        topology=topology,
        batch_size=batch,
        constraints=constraints,
        estimator=[
            EmbeddingPerfEstimator(topology=topology, constraints=constraints),
            EmbeddingStorageEstimator(topology=topology, constraints=constraints),
        ],
    )
    candidates = enumerator.enumerate(module, sharders)
    table_wise = {}
    for option in candidates:
        if option.sharding_type != "table_wise":
            continue
        best = table_wise.get(option.name)
        if best is None or option.total_perf < best.total_perf:
            table_wise[option.name] = option
    options_tw = [table_wise[f"t{i}"] for i in range(len(rows))]
    rng = np.random.default_rng(seed)
    for name in options.planners:
        if name == "torchrec":
            continue
        out[name] = score(baseline(name, options_tw, world, rng), world, topology, options)
    return out


def baseline(name: str, table_options: list, world: int, rng: np.random.Generator) -> list:
    """Table-wise plans: each table's one shard placed by a simple rule."""
    import copy

    placed = [copy.deepcopy(o) for o in table_options]
    load = np.zeros(world)
    if name == "random":
        for option in placed:
            option.shards[0].rank = int(rng.integers(world))
        return placed

    def weight(option) -> float:
        shard = option.shards[0]
        return (
            float(shard.storage.hbm + shard.storage.ddr)
            if name == "size-greedy"
            else float(shard.perf.total)
        )

    for option in sorted(placed, key=weight, reverse=True):
        rank = int(np.argmin(load))
        option.shards[0].rank = rank
        load[rank] += weight(option)
    return placed


def score(plan: list, world: int, topology: Any, options: ShardingOptions) -> dict[str, Any]:
    """Per-rank cost and memory of ``plan`` (sharding options with ranked shards)."""
    cost = np.zeros(world)
    hbm = np.zeros(world)
    ddr = np.zeros(world)
    types: dict[str, int] = {}
    tables = []
    for option in plan:
        types[option.sharding_type] = types.get(option.sharding_type, 0) + 1
        ranks = []
        for shard in option.shards:
            cost[shard.rank] += shard.perf.total
            hbm[shard.rank] += shard.storage.hbm
            ddr[shard.rank] += shard.storage.ddr
            ranks.append(int(shard.rank))
        tables.append(
            {
                "table": option.name,
                "sharding_type": option.sharding_type,
                "kernel": option.compute_kernel,
                "ranks": sorted(set(ranks)),
                "shard_ranks": ranks,
                "bytes": int(sum(s.storage.hbm + s.storage.ddr for s in option.shards)),
                "cost": float(sum(s.perf.total for s in option.shards)),
            }
        )
    caps_hbm = np.array([d.storage.hbm for d in topology.devices], dtype=float)
    caps_ddr = np.array([d.storage.ddr for d in topology.devices], dtype=float)
    fits = bool((hbm <= caps_hbm).all() and (ddr <= caps_ddr).all())
    mean = float(cost.mean())
    return {
        "fits": fits,
        "max_cost": float(cost.max()),
        "mean_cost": mean,
        "imbalance": float(cost.max() / mean) if mean > 0 else float("nan"),
        "max_rank_bytes": float((hbm + ddr).max()),
        "rank_cost": cost.tolist(),
        "rank_hbm": hbm.tolist(),
        "rank_ddr": ddr.tolist(),
        "sharding_types": types,
        "tables": tables,
    }


@TASKS.register("sharding")
class ShardingTask(Task):
    """Imbalance, memory and fit of sharding plans from TorchRec's planner and baselines."""

    metrics = (
        MetricSpec(
            "*/max_cost",
            False,
            "{} max rank cost",
            "ms/iteration",
            "ratio",
            primary=True,
            shown=True,
        ),
        MetricSpec("*/imbalance", False, "{} imbalance", "max/mean", "ratio", shown=True),
        MetricSpec("*/max_rank_gib", False, "{} max rank memory", "GiB", "ratio", shown=True),
        MetricSpec("*/fits", True, "{} fits", kind="count", bounds=(0, 1)),
        MetricSpec("*/measured_imbalance", False, "{} measured imbalance", "max/mean", "measured"),
        MetricSpec("*/measured_max_ms", False, "{} slowest rank measured", "ms/step", "measured"),
        MetricSpec("*/step_ms", False, "{} DMP embedding step", "ms/step", "measured"),
        MetricSpec("*/rank*/measured_ms", False, "{} rank {} measured", "ms/step", "measured"),
        MetricSpec(
            "*/rank*/estimated_cost", False, "{} rank {} estimated", "ms/iteration", "ratio"
        ),
    )

    Options = ShardingOptions

    def check(self, config: RunConfig) -> None:
        require_fbgemm("task sharding (TorchRec's planner)")

    def run(self, ctx: RunContext) -> TaskOutput:
        from tqdm.auto import tqdm

        options: ShardingOptions = ctx.config.task.typed_options()
        rows = table_rows(ctx, options)
        dim = int(ctx.config.embedding.options.get("dim", 16))
        batch = options.batch_size or ctx.config.train.batch_size
        results: dict[int, dict[str, dict[str, Any]]] = {}
        for world in tqdm(
            options.world_sizes, desc="plans", unit="world", disable=not ctx.config.train.progress
        ):
            results[world] = plan_world(rows, dim, world, options, batch, ctx.config.seed)
        metrics: dict[str, float] = {}
        for world, plans in results.items():
            for planner, figures in plans.items():
                if "imbalance" not in figures:
                    continue
                key = f"{planner}/w{world}"
                metrics[f"{key}/imbalance"] = figures["imbalance"]
                metrics[f"{key}/max_cost"] = figures["max_cost"]
                metrics[f"{key}/max_rank_gib"] = figures["max_rank_bytes"] / 1024**3
                metrics[f"{key}/fits"] = float(figures["fits"])
        details: dict[str, Any] = {
            "tables": {"rows": rows, "dim": dim, "source": options.tables},
            "batch_size_per_rank": batch,
            "plans": {str(w): p for w, p in results.items()},
            "cost_unit": "TorchRec EmbeddingPerfEstimator total (ms per iteration)",
        }
        print_plans(results)
        out = ctx.plot_dir("sharding")
        if options.plot:
            details["plots"] = [str(draw_sharding(results, out))]
        if options.measure:
            world = options.measure_world
            plans = results.get(world) or plan_world(
                rows, dim, world, options, batch, ctx.config.seed
            )
            measured = clock_plans(ctx, options, plans, rows, dim, batch)
            details["measured"] = measured
            for planner, s in measured["plans"].items():
                key = f"{planner}/w{world}"
                metrics[f"{key}/measured_imbalance"] = s["measured_imbalance"]
                metrics[f"{key}/measured_max_ms"] = s["measured_max_ms"]
                metrics[f"{key}/step_ms"] = s["step_ms"]
                for r, (ms, est) in enumerate(
                    zip(s["rank_compute_ms"], s["rank_estimated_cost"], strict=True)
                ):
                    metrics[f"{key}/rank{r}/measured_ms"] = ms
                    metrics[f"{key}/rank{r}/estimated_cost"] = est
            if options.plot:
                details.setdefault("plots", []).append(
                    str(draw_measured(measured["plans"], out, world))
                )
        return TaskOutput(metrics, details=details)


def clock_plans(
    ctx: RunContext,
    options: ShardingOptions,
    plans: dict[str, dict[str, Any]],
    rows: list[int],
    dim: int,
    batch: int,
) -> dict[str, Any]:
    """Run the plans that fit at ``measure_world`` for real and set them beside their estimates."""
    world = options.measure_world
    runnable = {p: f["tables"] for p, f in plans.items() if "tables" in f}
    capped = sum(r > options.measure_max_rows for r in rows)
    note = (
        f"Measured at world size {world} on this machine (gloo, CPU, fbgemm kernels, "
        f"{batch} samples per rank, median of {options.measure_steps} steps); "
        f"{capped} of {len(rows)} tables shrunk to {options.measure_max_rows:,} rows. "
        f"Estimated cost: TorchRec's estimate for a {options.compute_device} rank."
    )
    train = ctx.data.split("train")
    if ctx.config.train.progress:
        print(f"measuring {len(runnable)} plans on {world} gloo processes...", file=sys.stderr)
    figures = measure_plans(
        runnable,
        rows,
        dim,
        batch,
        train.sparse,
        len(ctx.data.schema.cardinalities),
        world=world,
        steps=options.measure_steps,
        max_rows=options.measure_max_rows,
    )
    summary = summarize(figures, plans)
    print_measured(summary, note)
    return {
        "world": world,
        "row_cap": options.measure_max_rows,
        "capped_tables": capped,
        "batch_size_per_rank": batch,
        "steps": options.measure_steps,
        "note": note,
        "plans": summary,
    }


def print_plans(results: dict[int, dict[str, dict[str, Any]]]) -> None:
    """The planners' figures per world size as one table on stdout."""
    import pandas as pd

    rows = [
        {
            "world": world,
            "planner": planner,
            "fits": figures.get("fits"),
            "max cost": figures.get("max_cost"),
            "imbalance": figures.get("imbalance"),
            "max rank GiB": (figures.get("max_rank_bytes") or float("nan")) / 1024**3,
            "types": ", ".join(f"{k}:{v}" for k, v in figures.get("sharding_types", {}).items()),
        }
        for world, plans in results.items()
        for planner, figures in plans.items()
    ]
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3g}"))


def draw_sharding(results: dict[int, dict[str, dict[str, Any]]], out_dir: Path) -> Path:
    """Imbalance and slowest-rank cost against world size, one line per planner."""
    import pandas as pd
    import seaborn as sns
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from suite.figures import save_figure

    frame = pd.DataFrame(
        [
            {
                "world size": world,
                "planner": planner,
                "imbalance (max / mean)": f["imbalance"],
                "slowest rank cost": f["max_cost"],
            }
            for world, plans in results.items()
            for planner, f in plans.items()
            if "imbalance" in f
        ]
    )
    fig = Figure(figsize=(9, 3.6))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    for ax, y in ((left, "imbalance (max / mean)"), (right, "slowest rank cost")):
        sns.lineplot(data=frame, x="world size", y=y, hue="planner", marker="o", ax=ax)
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=7, frameon=False)
    right.set_yscale("log")
    fig.suptitle("Sharding plans against world size")
    return save_figure(fig, out_dir / "sharding.png")[0]
