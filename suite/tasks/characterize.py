"""``characterize``: how the training split's embedding rows are accessed (no training).

Per table and overall, in data order: lookups, unique rows, the reuse-factor histogram in
facebookresearch/dlrm_datasets' bins (directly comparable with the one it publishes),
a Zipf exponent, the share of lookups served by the hottest rows, unique rows per batch,
and LRU / LFU hit rates against cache size (as a share of rows and in bytes). A raw trace in
the dlrm_datasets format can stand in for the dataset (``trace: path``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from suite.config import Frozen
from suite.data.access import (
    PUBLISHED_REUSE_HISTOGRAM,
    REUSE_BATCH,
    AccessStream,
    hot_row_shares,
    lfu_hit_rates,
    lru_hit_rates,
    reuse_histogram,
    stack_distances,
    unique_per_batch,
    zipf_exponent,
)
from suite.registry import TASKS
from suite.results import MetricSpec
from suite.tasks.base import RunContext, Task, TaskOutput

CACHE_FRACTIONS = [0.0001, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]


class CharacterizeOptions(Frozen):
    """What to measure and on how much of the stream."""

    split: str = Field("train", description="split whose lookups are characterized")
    trace: str | None = Field(
        None, description="a dlrm_datasets trace file (indices, offsets, lengths) instead"
    )
    max_lookups: int | None = Field(
        4_000_000, ge=1, description="characterize the first N lookups (None: all)"
    )
    reuse_window: int = Field(REUSE_BATCH, ge=1, description="samples per reuse window")
    batch_sizes: list[int] = Field(
        default_factory=lambda: [128, 512, 2048, 8192, 32768, 65536],
        min_length=1,
        description="batch sizes for unique rows per batch",
    )
    cache_fractions: list[float] = Field(
        default_factory=lambda: list(CACHE_FRACTIONS),
        min_length=1,
        description="cache sizes as a share of all rows",
    )
    hot_fractions: list[float] = Field(
        default_factory=lambda: [0.001, 0.01, 0.1], description="hottest-row shares"
    )
    row_bytes: int | None = Field(
        None, ge=1, description="bytes per row; default: the embedding dim in fp32"
    )
    plot: bool = Field(True, description="draw the plots under results_dir/plots/characterize")


def load_stream(ctx: RunContext, options: CharacterizeOptions) -> tuple[AccessStream, dict]:
    """The access stream the options name, and where it came from."""
    if options.trace:
        from suite.data.traces import file_sha256, load_trace

        path = Path(options.trace).expanduser()
        stream = load_trace(path)
        source = {"kind": "trace", "path": str(path), "sha256": file_sha256(path)}
    else:
        split = ctx.data.split(options.split)
        stream = AccessStream.from_sparse(split.sparse, ctx.data.schema.cardinalities)
        source = {"kind": "split", "split": options.split, "fingerprint": ctx.data.fingerprint}
    total = len(stream)
    stream = stream.head(options.max_lookups)
    source |= {"lookups_total": total, "lookups_used": len(stream)}
    return stream, source


def characterize(stream: AccessStream, options: CharacterizeOptions, row_bytes: int) -> dict:
    """Every figure of the task for ``stream`` (overall and per table)."""
    num_rows = stream.num_rows
    distances = stack_distances(stream.keys)
    capacities = np.maximum(1, np.round(np.asarray(options.cache_fractions) * num_rows)).astype(
        np.int64
    )
    lru = lru_hit_rates(distances, capacities)
    lfu = lfu_hit_rates(stream.keys, capacities)
    exponent, r2 = zipf_exponent(stream.keys)
    overall = {
        "lookups": len(stream),
        "samples": stream.num_samples,
        "rows": num_rows,
        "unique_rows": int(np.unique(stream.keys).shape[0]),
        "zipf_exponent": exponent,
        "zipf_r2": r2,
        "hot_row_shares": hot_row_shares(stream.keys, num_rows, options.hot_fractions),
        "reuse": reuse_histogram(stream.keys, stream.samples, options.reuse_window),
        "unique_per_batch": unique_per_batch(stream, options.batch_sizes),
        "cache": [
            {
                "fraction": f,
                "rows": int(c),
                "bytes": int(c) * row_bytes,
                "lru_hit_rate": float(h_lru),
                "lfu_hit_rate": float(h_lfu),
            }
            for f, c, h_lru, h_lfu in zip(
                options.cache_fractions, capacities, lru, lfu, strict=True
            )
        ],
        "compulsory_miss_rate": float((distances < 0).mean()) if len(stream) else math.nan,
    }
    tables = []
    for t, rows in enumerate(stream.table_rows.tolist()):
        keys = stream.keys[stream.tables == t]
        if keys.size == 0:
            tables.append({"table": t, "rows": rows, "lookups": 0})
            continue
        t_exp, t_r2 = zipf_exponent(keys)
        tables.append(
            {
                "table": t,
                "rows": rows,
                "lookups": int(keys.size),
                "unique_rows": int(np.unique(keys).shape[0]),
                "zipf_exponent": t_exp,
                "zipf_r2": t_r2,
                "hot_row_shares": hot_row_shares(keys, rows, options.hot_fractions),
            }
        )
    overall["tables"] = tables
    return overall


@TASKS.register("characterize")
class CharacterizeTask(Task):
    """Access characterization of the embedding lookups: reuse, skew, cache hit rates."""

    # descriptive figures: neither direction is "better"; higher is better only where a
    # larger value means a cheaper memory system (more reuse, more hits)
    metrics = (
        MetricSpec("zipf_exponent", True, "Zipf exponent", kind="ratio", primary=True, shown=True),
        MetricSpec("zipf_r2", True, "Zipf fit R²", kind="ratio"),
        MetricSpec("lookups", True, "Lookups", kind="count"),
        MetricSpec("unique_rows", False, "Unique rows", kind="count"),
        MetricSpec("unique_row_share", False, "Unique-row share", kind="ratio", bounds=(0, 1)),
        MetricSpec(
            "compulsory_miss_rate",
            False,
            "Compulsory miss rate",
            kind="ratio",
            bounds=(0, 1),
            shown=True,
        ),
        MetricSpec("reuse_once_unique_share", True, "Rows used once, share", kind="ratio"),
        MetricSpec(
            "hot_*_lookup_share",
            True,
            "Lookups on the hottest {}",
            kind="ratio",
            bounds=(0, 1),
            shown=True,
        ),
        MetricSpec(
            "lru_hit_rate_*",
            True,
            "LRU hit rate, cache {}",
            kind="ratio",
            bounds=(0, 1),
            shown=True,
        ),
        MetricSpec("lfu_hit_rate_*", True, "LFU hit rate, cache {}", kind="ratio", bounds=(0, 1)),
    )

    Options = CharacterizeOptions

    def run(self, ctx: RunContext) -> TaskOutput:
        options: CharacterizeOptions = ctx.config.task.typed_options()
        stream, source = load_stream(ctx, options)
        dim = int(ctx.config.embedding.options.get("dim", 16))
        row_bytes = options.row_bytes or dim * 4
        figures = characterize(stream, options, row_bytes)
        metrics = summary_metrics(figures)
        details: dict[str, Any] = {
            "source": source,
            "row_bytes": row_bytes,
            "published_reuse_histogram": PUBLISHED_REUSE_HISTOGRAM,
            **figures,
        }
        if options.plot:
            from suite.data.access_plots import draw_characterization

            out = ctx.plot_dir("characterize")
            details["plots"] = [str(p) for p in draw_characterization(figures, out)]
        return TaskOutput(metrics, details=details)


def summary_metrics(figures: dict) -> dict[str, float]:
    """The flat figures logged as metrics; the rest stays in the details."""
    metrics: dict[str, float] = {
        "lookups": float(figures["lookups"]),
        "unique_rows": float(figures["unique_rows"]),
        "unique_row_share": figures["unique_rows"] / max(figures["rows"], 1),
        "zipf_exponent": figures["zipf_exponent"],
        "zipf_r2": figures["zipf_r2"],
        "compulsory_miss_rate": figures["compulsory_miss_rate"],
        "reuse_once_unique_share": figures["reuse"]["unique_rows"]["(0,1]"],
    }
    for fraction, share in figures["hot_row_shares"].items():
        metrics[f"hot_{fraction}_lookup_share"] = share
    for point in figures["cache"]:
        metrics[f"lru_hit_rate_{point['fraction']:g}"] = point["lru_hit_rate"]
        metrics[f"lfu_hit_rate_{point['fraction']:g}"] = point["lfu_hit_rate"]
    return metrics
