"""``tiered``: embedding rows placed across memory tiers, simulated on the real access stream.

A placement stacks tiers from fastest to slowest (e.g. DRAM caching the hot rows of an SCM
or NAND backing store, as in the Software Defined Memory paper, or HBM over DRAM as in
ZionEX). Each upper tier holds a share of all rows and is managed by a policy: ``lru`` (an
exclusive hierarchy with LRU demotion, which behaves as one LRU cache of the tiers' summed
size, so its hits come from the exact stack-distance curve) or ``lfu`` (the hottest rows by
frequency). The bottom tier holds every row and serves the rest, first lookups included.

Per placement the task reports the share of lookups each tier serves, the expected lookup
time per batch, and the memory cost. A tier's time for ``n`` lookups is ``n * latency /
parallelism + n * max(row bytes, block bytes) / bandwidth``; tiers work concurrently, so a
batch takes as long as its slowest tier. Tier figures are named, editable presets
(``suite/presets/tiers/default.yaml``). On CUDA, fbgemm's own caching tables
(``EmbeddingLocation.MANAGED_CACHING``, LRU and LFU) can replay the stream as a check.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from suite.config import Frozen, format_validation_error, load_yaml
from suite.data.access import AccessStream, lfu_hit_rates, lru_hit_rates, stack_distances
from suite.errors import ConfigError
from suite.registry import TASKS
from suite.results import MetricSpec
from suite.tasks.base import RunContext, Task, TaskOutput
from suite.tasks.characterize import CharacterizeOptions, load_stream

DEFAULT_TIERS = Path(__file__).resolve().parent.parent / "presets" / "tiers" / "default.yaml"


class Tier(Frozen):
    """One memory technology's figures (see the preset file for sources)."""

    latency_ns: float = Field(gt=0)
    bandwidth_gbps: float = Field(gt=0)
    block_bytes: int = Field(ge=1)
    parallelism: int = Field(ge=1)
    usd_per_gb: float = Field(ge=0)


class Level(Frozen):
    """A tier of a placement and the share of all rows it holds (upper tiers only)."""

    tier: str
    share: float | None = Field(None, gt=0, le=1, description="share of rows; bottom: all")


class Placement(Frozen):
    """Tiers from fastest to slowest; the last one holds every row."""

    name: str
    levels: list[Level] = Field(min_length=1)
    policy: Literal["lru", "lfu"] = "lru"

    @model_validator(mode="after")
    def _shares(self) -> Placement:
        upper = self.levels[:-1]
        if any(level.share is None for level in upper):
            raise ValueError(f"placement {self.name!r}: every tier above the last needs a share")
        if sum(level.share or 0 for level in upper) >= 1:
            raise ValueError(f"placement {self.name!r}: upper tiers' shares must sum below 1")
        return self


def default_placements() -> list[Placement]:
    """DRAM over SCM and over NAND, HBM over DRAM, at 1% and 10% caches, both policies."""
    out = [Placement(name="dram only", levels=[Level(tier="dram")])]
    for policy in ("lru", "lfu"):
        for share in (0.01, 0.1):
            for upper, lower in (("dram", "scm"), ("dram", "nand"), ("hbm", "dram")):
                out.append(
                    Placement(
                        name=f"{upper} {share:.0%} + {lower} ({policy})",
                        levels=[Level(tier=upper, share=share), Level(tier=lower)],
                        policy=policy,
                    )
                )
    return out


class TieredOptions(CharacterizeOptions):
    """The stream to replay (as ``characterize``), the tiers and the placements."""

    tiers_file: str | None = Field(None, description="tier figures (default: built-in preset)")
    placements: list[Placement] = Field(default_factory=default_placements, min_length=1)
    lookup_batch: int | None = Field(
        None, ge=1, description="samples per batch for the lookup time (default: train batch)"
    )
    fbgemm_replay: bool = Field(
        False, description="on CUDA, replay the stream through fbgemm's caching tables too"
    )


def load_tiers(path: str | Path | None) -> dict[str, Tier]:
    """Tier figures from a YAML file with a ``tiers`` mapping; errors name file and field."""
    path = Path(path).expanduser() if path else DEFAULT_TIERS
    data = load_yaml(path)
    tiers = data.get("tiers")
    if not isinstance(tiers, dict) or not tiers:
        raise ConfigError(f"tiers file {path}: expected a mapping 'tiers: {{name: figures}}'")
    out = {}
    for name, figures in tiers.items():
        try:
            out[str(name)] = Tier.model_validate(figures)
        except ValidationError as exc:
            raise ConfigError(
                f"tiers file {path}: {format_validation_error(exc, f'tiers.{name}.')}"
            ) from None
    return out


def tier_shares(placement: Placement, curve: np.ndarray) -> list[float]:
    """Share of lookups each tier serves, from the hit-rate ``curve`` at the cumulative
    capacities of the upper tiers (``[levels - 1]``)."""
    shares, served = [], 0.0
    for k in range(len(placement.levels) - 1):
        hit = float(curve[k])
        shares.append(hit - served)
        served = hit
    shares.append(1.0 - served)
    return shares


def simulate_placement(
    placement: Placement,
    tiers: dict[str, Tier],
    stream: AccessStream,
    distances: np.ndarray,
    row_bytes: int,
    lookups_per_batch: float,
) -> dict:
    """Tier shares, expected lookup time per batch and memory cost of one placement."""
    total_rows = stream.num_rows
    cumulative = np.cumsum([level.share or 0 for level in placement.levels[:-1]])
    capacities = np.round(cumulative * total_rows).astype(np.int64)
    if placement.policy == "lru":
        curve = lru_hit_rates(distances, capacities)
    else:
        curve = lfu_hit_rates(stream.keys, capacities)
    shares = tier_shares(placement, curve)
    levels, slowest, cost = [], 0.0, 0.0
    held = np.diff(np.concatenate([[0], capacities, [total_rows]]))
    for level, share, rows in zip(placement.levels, shares, held, strict=True):
        tier = tiers[level.tier]
        lookups = lookups_per_batch * share
        read_bytes = max(row_bytes, tier.block_bytes)
        seconds = lookups * tier.latency_ns * 1e-9 / tier.parallelism + lookups * read_bytes / (
            tier.bandwidth_gbps * 1e9
        )
        rows_stored = total_rows if level is placement.levels[-1] else int(rows)
        usd = rows_stored * row_bytes / 1e9 * tier.usd_per_gb
        slowest = max(slowest, seconds)
        cost += usd
        levels.append(
            {
                "tier": level.tier,
                "rows": rows_stored,
                "bytes": rows_stored * row_bytes,
                "lookup_share": share,
                "seconds_per_batch": seconds,
                "memory_cost_usd": usd,
            }
        )
    return {
        "name": placement.name,
        "policy": placement.policy,
        "levels": levels,
        "batch_lookup_seconds": slowest,
        "memory_cost_usd": cost,
    }


def metric_key(name: str) -> str:
    """A placement's name as a metric prefix: ``dram 10% + scm (lru)`` -> ``dram_10pct_scm_lru``."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower().replace("%", "pct")).strip("_")


@TASKS.register("tiered")
class TieredTask(Task):
    """Hit rates per tier, lookup time per batch and memory cost of tiered placements."""

    metrics = (
        MetricSpec(
            "*/batch_lookup_ms",
            False,
            "{} batch lookup time",
            "ms",
            "ratio",
            primary=True,
            shown=True,
        ),
        MetricSpec("*/memory_cost_usd", False, "{} memory cost", "USD", "ratio", shown=True),
        MetricSpec(
            "*/top_tier_share", True, "{} top-tier lookup share", kind="ratio", bounds=(0, 1)
        ),
    )

    Options = TieredOptions

    def check(self, config) -> None:
        options: TieredOptions = config.task.typed_options()
        tiers = load_tiers(options.tiers_file)
        for placement in options.placements:
            for level in placement.levels:
                if level.tier not in tiers:
                    raise ConfigError(
                        f"task.options.placements: placement {placement.name!r} names tier "
                        f"{level.tier!r} (tiers: {', '.join(tiers)})"
                    )

    def run(self, ctx: RunContext) -> TaskOutput:
        options: TieredOptions = ctx.config.task.typed_options()
        tiers = load_tiers(options.tiers_file)
        stream, source = load_stream(ctx, options)
        dim = int(ctx.config.embedding.options.get("dim", 16))
        row_bytes = options.row_bytes or dim * 4
        batch = options.lookup_batch or ctx.config.train.batch_size
        lookups_per_batch = len(stream) / max(stream.num_samples, 1) * batch
        distances = stack_distances(stream.keys)
        placements = [
            simulate_placement(p, tiers, stream, distances, row_bytes, lookups_per_batch)
            for p in options.placements
        ]
        metrics: dict[str, float] = {}
        for p in placements:
            key = metric_key(p["name"])
            metrics[f"{key}/batch_lookup_ms"] = p["batch_lookup_seconds"] * 1e3
            metrics[f"{key}/memory_cost_usd"] = p["memory_cost_usd"]
            metrics[f"{key}/top_tier_share"] = p["levels"][0]["lookup_share"]
        details: dict = {
            "source": source,
            "row_bytes": row_bytes,
            "lookups_per_batch": lookups_per_batch,
            "tiers": {k: v.model_dump() for k, v in tiers.items()},
            "placements": placements,
        }
        if options.fbgemm_replay:
            details["fbgemm_replay"] = fbgemm_cache_replay(stream, ctx, options, batch)
        if options.plot:
            from suite.data.access_plots import draw_tiers

            out = ctx.plot_dir("tiered")
            details["plots"] = [str(p) for p in draw_tiers(placements, out)]
        return TaskOutput(metrics, details=details)


def fbgemm_cache_replay(
    stream: AccessStream, ctx: RunContext, options: TieredOptions, batch: int
) -> list[dict]:
    """Replay the stream through fbgemm's caching tables; their hit rates next to ours.

    fbgemm's cache is set-associative (32 ways) and fetches a whole batch's rows before
    the lookup, so its hit rate differs a little from the fully associative simulation.
    ``fbgemm_stats``: the LRU hit rate from fbgemm's own cache statistics (None for LFU).
    """
    from suite.engine.cache_replay import replay_hit_rates

    if ctx.device.type != "cuda":
        raise ConfigError("task.options.fbgemm_replay: fbgemm's caching tables need device=cuda")
    distances = stack_distances(stream.keys)
    out = []
    for share in sorted({p.levels[0].share for p in options.placements if p.levels[0].share}):
        rows = int(round(share * stream.num_rows))
        for policy in ("lru", "lfu"):
            measured = replay_hit_rates(stream, share, policy, batch, ctx.device)
            simulated = (
                lru_hit_rates(distances, np.array([rows]))[0]
                if policy == "lru"
                else lfu_hit_rates(stream.keys, np.array([rows]))[0]
            )
            out.append(
                {
                    "share": share,
                    "policy": policy,
                    "fbgemm": measured["lookup"],
                    "fbgemm_stats": measured["stats"],
                    "simulated": float(simulated),
                }
            )
    return out
