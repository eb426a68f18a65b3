"""Plots of the access characterization and of tiered-memory placements (seaborn)."""

from __future__ import annotations

from pathlib import Path

from suite.data.access import PUBLISHED_REUSE_HISTOGRAM, REUSE_LABELS
from suite.figures import NEUTRAL, save_figure


def _figure(width: float = 6.4, height: float = 3.8):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def reuse_figure(figures: dict):
    """The reuse-factor histogram as grouped bars (its bins are categories, in order):
    this data's unique rows and lookups against the published dlrm_datasets shares."""
    import pandas as pd
    import seaborn as sns

    fig, ax = _figure(7.5, 3.8)
    rows = [
        {"bin": label, "share": share, "series": series}
        for series, hist in (
            ("unique rows (this data)", figures["reuse"]["unique_rows"]),
            ("lookups (this data)", figures["reuse"]["lookups"]),
            ("dlrm_datasets (published)", PUBLISHED_REUSE_HISTOGRAM),
        )
        for label, share in hist.items()
    ]
    sns.barplot(
        data=pd.DataFrame(rows),
        x="bin",
        y="share",
        hue="series",
        order=list(REUSE_LABELS),
        palette=list(NEUTRAL),
        saturation=1.0,
        ax=ax,
    )
    ax.set_xlabel("reuse factor per window (bins)")
    ax.set_ylabel("share")
    ax.tick_params(axis="x", rotation=60, labelsize=7)
    ax.legend(fontsize=7, loc="upper right", frameon=False)
    ax.set_title("Reuse-factor histogram: this data against the published one")
    return fig


def draw_characterization(figures: dict, out_dir: Path) -> list[Path]:
    """Reuse histogram against the published one, hit-rate curves, unique rows per batch.

    Returns the PNG of each figure (PDF and SVG are written beside it).
    """
    import pandas as pd
    import seaborn as sns

    written = [save_figure(reuse_figure(figures), out_dir / "reuse_histogram.png")[0]]

    fig, ax = _figure()
    cache = pd.DataFrame(figures["cache"])
    long = cache.melt(
        id_vars=["fraction", "bytes"],
        value_vars=["lru_hit_rate", "lfu_hit_rate"],
        var_name="policy",
        value_name="hit rate",
    )
    long["policy"] = long["policy"].str.replace("_hit_rate", "").str.upper()
    sns.lineplot(
        data=long,
        x="fraction",
        y="hit rate",
        hue="policy",
        marker="o",
        palette={"LRU": NEUTRAL[0], "LFU": NEUTRAL[1]},
        ax=ax,
    )
    ax.axhline(
        1 - figures["compulsory_miss_rate"], ls=":", color="grey", lw=1, label="no-miss bound"
    )
    ax.set_xscale("log")
    ax.set_ylim(0, 1)
    ax.set_xlabel("cache size (share of all rows)")
    ax.set_ylabel("hit rate")
    ax.legend(fontsize=8, frameon=False)
    ax.set_title("Cache hit rate against cache size")
    written.append(save_figure(fig, out_dir / "hit_rates.png")[0])

    per_batch = figures["unique_per_batch"]
    if per_batch:
        fig, ax = _figure()
        frame = pd.DataFrame(
            [
                {"batch size": int(b), "unique share": v["unique_share"]}
                for b, v in per_batch.items()
            ]
        )
        sns.lineplot(
            data=frame, x="batch size", y="unique share", marker="o", color=NEUTRAL[0], ax=ax
        )
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1)
        ax.set_ylabel("unique rows / lookups per batch")
        ax.set_title("Unique rows per batch")
        written.append(save_figure(fig, out_dir / "unique_per_batch.png")[0])
    return written


def draw_tiers(placements: list[dict], out_dir: Path) -> list[Path]:
    """Expected lookup time per batch against memory cost, one point per placement."""
    import pandas as pd
    import seaborn as sns

    frame = pd.DataFrame(
        [
            {
                "placement": p["name"],
                "policy": p["policy"].upper(),
                "lookup time per batch (ms)": p["batch_lookup_seconds"] * 1e3,
                "memory cost (USD)": p["memory_cost_usd"],
            }
            for p in placements
        ]
    )
    fig, ax = _figure()
    sns.scatterplot(
        data=frame,
        x="memory cost (USD)",
        y="lookup time per batch (ms)",
        hue="policy",
        style="policy",
        s=70,
        palette={"LRU": NEUTRAL[0], "LFU": NEUTRAL[1]},
        ax=ax,
    )
    for row in frame.itertuples():
        ax.annotate(
            row.placement, (row[4], row[3]), textcoords="offset points", xytext=(4, 3), fontsize=6
        )
    ax.set_yscale("log")
    ax.set_title("Tiered placements: lookup time against memory cost")
    return [save_figure(fig, out_dir / "placements.png")[0]]
