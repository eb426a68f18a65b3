"""TorchRec's planner, set up in one place for the runs that shard their tables
(:func:`suite.engine.distributed.shard_model`) and for the ``sharding`` task's plans: the
tables as a meta-device ``EmbeddingBagCollection``, the topology, the per-table
constraints, the planner, and the plan's summary as a run's details hold it.

TorchRec and fbgemm warn and log a great deal while they plan and shard;
:func:`quiet_torchrec` silences them for the calls it wraps only.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from suite.config import ShardingConfig
from suite.embeddings.tables import FBGEMM_DIM_MULTIPLE
from suite.errors import ConfigError
from suite.kernel_backend import require_fbgemm

QUIET_MODULES = ("torchrec", "fbgemm_gpu")
"""The packages whose warnings :func:`quiet_torchrec` ignores."""

QUIET_LOGGERS = ("torchrec", "torch.fx", "root")
"""The loggers it turns down to errors (TorchRec's planner logs its plan as a table)."""


@contextmanager
def quiet_torchrec(why: str = "TorchRec's sharded tables") -> Iterator[None]:
    """Inside: TorchRec's and fbgemm's warnings ignored and their loggers at ERROR
    (``why`` names what needs fbgemm, when it is missing). Filters and levels are put
    back on the way out, so nothing else in the process is silenced."""
    require_fbgemm(why)
    levels = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    with warnings.catch_warnings():
        for module in QUIET_MODULES:
            warnings.filterwarnings("ignore", module=module)
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
        try:
            yield
        finally:
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)


FX_TRACING_NOTE = "is_fx_tracing will return true"
"""The start of the line torch.fx logs once per process when a sharded TorchRec module
asks ``is_fx_tracing()`` in its forward (training, well after the planner's calls)."""


class _DropNote(logging.Filter):
    """Drops the records whose message starts with ``prefix``; lets every other through."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def drop_fx_tracing_note() -> None:
    """Filter out :data:`FX_TRACING_NOTE` alone from torch.fx's log (once per process)."""
    logger = logging.getLogger("torch.fx._symbolic_trace")
    if not any(isinstance(f, _DropNote) for f in logger.filters):
        logger.addFilter(_DropNote(FX_TRACING_NOTE))


def meta_collection(
    names: list[str], rows: list[int], dims: list[int], features: list[str] | None = None
) -> Any:
    """A TorchRec ``EmbeddingBagCollection`` on the meta device: table ``names[t]`` of
    ``rows[t] x dims[t]``, read by feature ``features[t]`` (default: the table's name)."""
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig

    return EmbeddingBagCollection(
        tables=[
            EmbeddingBagConfig(name=name, embedding_dim=d, num_embeddings=n, feature_names=[f])
            for name, n, d, f in zip(names, rows, dims, features or names, strict=True)
        ],
        device=torch.device("meta"),
    )


def topology(
    world: int,
    compute_device: str,
    local_world: int | None = None,
    hbm_bytes: int | None = None,
    ddr_bytes: int | None = None,
) -> Any:
    """TorchRec's ``Topology`` of ``world`` ranks (``local_world`` of them on a host;
    device and host memory per rank, TorchRec's defaults when ``None``)."""
    from torchrec.distributed.planner import Topology

    return Topology(
        world_size=world,
        compute_device=compute_device,
        hbm_cap=hbm_bytes,
        ddr_cap=ddr_bytes,
        local_world_size=local_world,
    )


def planner(where: Any, batch_size: int, constraints: dict[str, Any], **options: Any) -> Any:
    """TorchRec's ``EmbeddingShardingPlanner`` on topology ``where`` for ``batch_size``
    samples per rank under per-table ``constraints`` (``options``: the planner's own,
    such as ``stats`` and ``callbacks``)."""
    from torchrec.distributed.planner import EmbeddingShardingPlanner

    return EmbeddingShardingPlanner(
        topology=where, batch_size=batch_size, constraints=constraints, **options
    )


def constraints(
    sharding: ShardingConfig, names: list[str], dims: list[int], world: int
) -> dict[str, Any]:
    """TorchRec ``ParameterConstraints`` per table from ``sharding`` (default type and
    per-table overrides); column-wise shards split a table's columns over the ranks."""
    from torchrec.distributed.planner import ParameterConstraints

    unknown = sorted(set(sharding.tables) - set(names))
    if unknown:
        raise ConfigError(
            f"sharding.tables: no table named {', '.join(unknown)} "
            f"(tables: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''})"
        )
    out = {}
    for name, dim in zip(names, dims, strict=True):
        kind = sharding.tables.get(name, sharding.default)
        if kind == "auto":
            continue
        extra = {}
        if "column" in kind:
            parts = max(1, min(world, dim // FBGEMM_DIM_MULTIPLE))
            extra["min_partition"] = max(FBGEMM_DIM_MULTIPLE, dim // parts)
        out[name] = ParameterConstraints(sharding_types=[kind], **extra)
    return out


def plan_summary(
    plan: Any,
    names: list[str],
    rows: list[int],
    dims: list[int],
    world: int,
    chosen: Any,
    optimizer_floats: list[int],
) -> dict[str, Any]:
    """Per table: sharding type, ranks and bytes; per rank: bytes and estimated cost
    (from the planner ``chosen`` that made ``plan``)."""
    module_plan = next(iter(plan.plan.values()))
    per_rank_bytes = [0] * world
    tables = []
    for name, n, d, opt in zip(names, rows, dims, optimizer_floats, strict=True):
        sharding = module_plan[f"{name}"]
        ranks = sorted({int(r) for r in (sharding.ranks or [])})
        shards = sharding.sharding_spec.shards if sharding.sharding_spec is not None else []
        total = 4 * (n * d + opt)
        for shard in shards:
            rank = int(str(shard.placement).split("rank:")[1].split("/")[0])
            sr, sc = shard.shard_sizes
            per_rank_bytes[rank] += 4 * sr * sc + 4 * opt * sr * sc // max(1, n * d)
        if not shards:  # data-parallel: a full copy on every rank
            for rank in range(world):
                per_rank_bytes[rank] += total
        tables.append(
            {"table": name, "type": sharding.sharding_type, "ranks": ranks, "bytes": total}
        )
    costs = [0.0] * world
    best = getattr(chosen, "_best_plan", None) or []
    for option in best:
        for shard in option.shards:
            if shard.rank is not None and shard.perf is not None:
                costs[shard.rank] += float(shard.perf.total)
    return {
        "world_size": world,
        "tables": tables,
        "ranks": [
            {"rank": r, "bytes": per_rank_bytes[r], "estimated_cost_ms": costs[r]}
            for r in range(world)
        ],
    }


def format_plan(plan: dict[str, Any]) -> str:
    """The plan as two plain-text tables (per table, per rank)."""
    from tabulate import tabulate

    from suite.units import human_bytes

    tables = tabulate(
        [
            [
                t["table"],
                t["type"],
                ",".join(map(str, t["ranks"])) or "all",
                human_bytes(t["bytes"]),
            ]
            for t in plan["tables"]
        ],
        headers=["table", "sharding", "ranks", "bytes"],
    )
    ranks = tabulate(
        [
            [r["rank"], human_bytes(r["bytes"]), f"{r['estimated_cost_ms']:.3f}"]
            for r in plan["ranks"]
        ],
        headers=["rank", "table bytes", "estimated cost (ms/step)"],
    )
    wire = f"embedding all-to-all: {plan['all_to_all']}\n" if "all_to_all" in plan else ""
    return f"sharding plan over {plan['world_size']} ranks\n{tables}\n\n{ranks}\n{wire}"
