"""Plans of the ``sharding`` task run for real: 2 gloo processes, DMP, fbgemm CPU kernels.

For each planner's plan at a small world size, ``measure_plans`` starts ``world`` real
``torch.distributed`` processes (gloo, CPU), builds the sharded ``EmbeddingBagCollection``
with TorchRec's ``DistributedModelParallel`` under that plan (table-batched fbgemm kernels,
SGD fused into the backward), feeds every rank its slice of global batches of the
dataset's ids, and clocks per rank:

* ``step_ms``: one forward and backward of the sharded collection as training runs it
  (input all-to-all, lookups, pooled all-to-all, and back), so it includes waiting for the
  slowest rank;
* ``compute_ms``: the same step's local lookups alone, forward and backward, replayed on
  the inputs the rank received: the embedding work the plan gave that rank, which is what
  TorchRec's estimator costs per rank.

Their per-rank max/mean is the measured imbalance that sits next to the estimated one.
Tables larger than ``max_rows`` are shrunk to ``max_rows`` (ids taken modulo the rows), so
the run fits this machine; lookup cost barely depends on a table's rows, its placement is
what the plan decides.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from suite.engine import planning
from suite.engine.parallel import gather_to_file, spawn_gloo
from suite.engine.planning import quiet_torchrec


@dataclass(frozen=True)
class MeasureJob:
    """What every rank needs: tables, plans, ids and how long to clock."""

    rows: list[int]  # [T] rows of each table as built (after the cap)
    dim: int
    batch: int  # per rank
    steps: int
    warmup: int
    plans: dict[str, list[dict[str, Any]]]  # planner -> per table {sharding_type, shard_ranks}
    ids_path: str  # int64 [N, T] ids, already within each table's rows
    out_path: str


def capped_ids(sparse: np.ndarray, rows: list[int], features: int, need: int) -> np.ndarray:
    """``need`` samples of ids for every table: table ``t`` reads feature ``t % features``
    of the samples (cycled when the split is short), modulo the table's rows. ``[need, T]``."""
    take = np.arange(need) % sparse.shape[0]
    chunk = np.asarray(sparse[take]).astype(np.int64)
    cols = [chunk[:, t % features] % rows[t] for t in range(len(rows))]
    return np.stack(cols, axis=1)


def measure_plans(
    plans: dict[str, list[dict[str, Any]]],
    rows: list[int],
    dim: int,
    batch: int,
    sparse: np.ndarray,
    features: int,
    world: int = 2,
    steps: int = 10,
    warmup: int = 2,
    max_rows: int = 100_000,
) -> dict[str, list[dict[str, float]]]:
    """Per planner, per rank: ``step_ms`` and ``compute_ms`` (see the module docstring).

    ``plans`` maps a planner to its tables (``sharding_type``, ``shard_ranks``: the rank of
    each shard, in shard order); ``sparse`` is ``[N, features]`` ids of the dataset.
    """
    capped = [min(int(r), max_rows) for r in rows]
    need = world * batch * (steps + warmup)
    with tempfile.TemporaryDirectory(prefix="recsuite-shard-") as tmp:
        ids_path = str(Path(tmp) / "ids.npy")
        np.save(ids_path, capped_ids(sparse, capped, features, need))
        job = MeasureJob(
            capped, dim, batch, steps, warmup, plans, ids_path, str(Path(tmp) / "out.json")
        )
        spawn_gloo(_rank_main, world, asdict(job))
        gathered = json.loads(Path(job.out_path).read_text())
        return {name: [g[name] for g in gathered] for name in plans}


def _generators(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """TorchRec's sharding-plan generators for the plan's tables (placements kept; the
    planner's row-wise shards span every rank, as ``row_wise()`` does)."""
    from torchrec.distributed.sharding_plan import (
        column_wise,
        data_parallel,
        row_wise,
        table_row_wise,
        table_wise,
    )

    out = {}
    for t in tables:
        kind, ranks = t["sharding_type"], list(t["shard_ranks"])
        if kind == "table_wise":
            out[t["table"]] = table_wise(rank=ranks[0])
        elif kind == "row_wise":
            out[t["table"]] = row_wise()
        elif kind == "column_wise":
            out[t["table"]] = column_wise(ranks=ranks)
        elif kind == "table_row_wise":
            out[t["table"]] = table_row_wise(host_index=0)  # one host: its ranks are all
        elif kind == "data_parallel":
            out[t["table"]] = data_parallel()
        else:
            raise ValueError(f"sharding type {kind!r} of table {t['table']} cannot be measured")
    return out


def _rank_main(rank: int, world: int, job_dict: dict[str, Any]) -> None:
    """One rank: every plan in turn, timed; rank 0 writes the gathered figures."""
    job = MeasureJob(**job_dict)
    ids = np.load(job.ids_path)
    with quiet_torchrec("measured sharding plans (TorchRec's DMP)"):
        figures = {
            name: _time_plan(job, tables, ids, rank, world) for name, tables in job.plans.items()
        }
    gather_to_file(rank, figures, job.out_path)


def _time_plan(
    job: MeasureJob, tables: list[dict[str, Any]], ids: np.ndarray, rank: int, world: int
) -> dict[str, float]:
    """One plan on this rank: median ``step_ms`` and ``compute_ms`` over the clocked
    steps, and the tables it holds a shard of."""
    model = _sharded_collection(job, tables, world)
    step_ms, compute_ms = _clock_steps(model, job, ids, rank, world)
    held = sorted(  # tables with a model-parallel shard on this rank, as DMP built them
        key.split(".")[-2]
        for key, value in model.state_dict().items()
        if callable(getattr(value, "local_shards", None)) and value.local_shards()
    )
    return {
        "step_ms": float(np.median(step_ms)),
        "compute_ms": float(np.median(compute_ms)),
        "tables": held,
    }


def _sharded_collection(job: MeasureJob, tables: list[dict[str, Any]], world: int) -> Any:
    """The job's tables (``t<i>``, read by feature ``f<i>``) under DMP with the plan's
    placements, SGD fused into the backward."""
    import torch
    import torch.distributed as dist
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan
    from torchrec.distributed.types import ShardingEnv, ShardingPlan
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    torch.manual_seed(0)
    count = len(job.rows)
    ebc = planning.meta_collection(
        [f"t{i}" for i in range(count)],
        list(job.rows),
        [job.dim] * count,
        [f"f{i}" for i in range(count)],
    )
    apply_optimizer_in_backward(torch.optim.SGD, ebc.parameters(), {"lr": 0.01})
    sharder = EmbeddingBagCollectionSharder()
    module_plan = construct_module_sharding_plan(
        ebc,
        _generators(tables),
        sharder=sharder,
        local_size=world,
        world_size=world,
        device_type="cpu",
    )
    return DistributedModelParallel(
        ebc,
        device=torch.device("cpu"),
        plan=ShardingPlan({"": module_plan}),
        env=ShardingEnv.from_process_group(dist.group.WORLD),
        sharders=[sharder],
    )


def _clock_steps(
    model: Any, job: MeasureJob, ids: np.ndarray, rank: int, world: int
) -> tuple[list[float], list[float]]:
    """Milliseconds of each clocked step on this rank: the whole forward and backward,
    and the rank's local lookups alone replayed on the inputs it received."""
    import torch
    import torch.distributed as dist
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    # the sharded collection's lookups, one per sharding type (DDP wraps a data-parallel one)
    lookups = [getattr(m, "module", m) for m in model.module._lookups]
    received: list[tuple[torch.nn.Module, Any]] = []

    def keep(module: torch.nn.Module, args: tuple) -> None:
        received.append((module, args[0]))

    hooks = [m.register_forward_pre_hook(keep) for m in lookups]
    count = len(job.rows)
    keys = [f"f{i}" for i in range(count)]
    step_ms, compute_ms = [], []
    for step in range(job.warmup + job.steps):
        start = (step * world + rank) * job.batch
        batch = torch.from_numpy(ids[start : start + job.batch])  # [B, T]
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=keys,
            values=batch.t().reshape(-1).contiguous(),
            lengths=torch.ones(count * job.batch, dtype=torch.int32),
        )
        received.clear()
        dist.barrier()
        tick = time.perf_counter()
        pooled = model(kjt).values()  # [B, T * D]
        pooled.backward(torch.ones_like(pooled))
        took = time.perf_counter() - tick
        inputs = list(received)
        dist.barrier()
        tick = time.perf_counter()
        for lookup, features in inputs:  # the rank's own embedding work, no communication
            out = lookup(features)
            if out.requires_grad:
                out.backward(torch.ones_like(out))
        local = time.perf_counter() - tick
        if step >= job.warmup:
            step_ms.append(took * 1e3)
            compute_ms.append(local * 1e3)
    for hook in hooks:
        hook.remove()
    return step_ms, compute_ms


def summarize(
    measured: dict[str, list[dict[str, float]]], plans: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Per planner: per-rank measured ms next to the plan's estimated cost, and both
    imbalances (max / mean over ranks)."""

    def imbalance(values: list[float]) -> float:
        mean = float(np.mean(values))
        return float(np.max(values) / mean) if mean > 0 else float("nan")

    out = {}
    for planner, ranks in measured.items():
        compute = [r["compute_ms"] for r in ranks]
        estimated = list(plans[planner]["rank_cost"])
        out[planner] = {
            "rank_tables": [r["tables"] for r in ranks],
            "rank_compute_ms": compute,
            "rank_step_ms": [r["step_ms"] for r in ranks],
            "rank_estimated_cost": estimated,
            "measured_imbalance": imbalance(compute),
            "estimated_imbalance": imbalance(estimated),
            "measured_max_ms": float(max(compute)),
            "step_ms": float(max(r["step_ms"] for r in ranks)),
        }
    return out


def print_measured(summary: dict[str, dict[str, Any]], note: str) -> None:
    """Per planner and rank: measured ms against the estimate, then the imbalances."""
    import pandas as pd

    rows = []
    for planner, s in summary.items():
        for rank, (ms, step, est) in enumerate(
            zip(s["rank_compute_ms"], s["rank_step_ms"], s["rank_estimated_cost"], strict=True)
        ):
            rows.append(
                {
                    "planner": planner,
                    "rank": rank,
                    "estimated cost": est,
                    "measured ms/step": ms,
                    "DMP fwd+bwd ms/step": step,
                    "est. imbalance": s["estimated_imbalance"] if rank == 0 else None,
                    "meas. imbalance": s["measured_imbalance"] if rank == 0 else None,
                }
            )
    print(note)
    print(pd.DataFrame(rows).to_string(index=False, na_rep="", float_format=lambda v: f"{v:.3g}"))


def draw_measured(summary: dict[str, dict[str, Any]], out_dir: Path, world: int) -> Path:
    """Imbalance estimated against measured per planner, and each rank's measured ms."""
    import pandas as pd
    import seaborn as sns
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from suite.figures import palette, save_figure

    kinds = ["estimated", "measured (local lookups)"]
    imbalance = pd.DataFrame(
        [
            {"planner": p, "figure": kind, "imbalance (max / mean)": s[key]}
            for p, s in summary.items()
            for kind, key in zip(kinds, ("estimated_imbalance", "measured_imbalance"), strict=True)
        ]
    )
    ranks = pd.DataFrame(
        [
            {"planner": p, "rank": f"rank {r}", "embedding ms / step": ms}
            for p, s in summary.items()
            for r, ms in enumerate(s["rank_compute_ms"])
        ]
    )
    fig = Figure(figsize=(9, 3.6))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    sns.barplot(
        data=imbalance,
        x="planner",
        y="imbalance (max / mean)",
        hue="figure",
        palette=palette(kinds),
        ax=left,
    )
    left.axhline(1.0, color="0.5", lw=0.8, ls="--")
    names = sorted(set(ranks["rank"]))
    sns.barplot(
        data=ranks,
        x="planner",
        y="embedding ms / step",
        hue="rank",
        palette=dict(zip(names, sns.color_palette("colorblind", len(names)), strict=True)),
        ax=right,
    )
    for ax in (left, right):
        ax.legend(fontsize=7, frameon=False)
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(f"Sharding plans at world size {world}: estimated against measured")
    return save_figure(fig, out_dir / f"sharding-measured-w{world}.png")[0]
