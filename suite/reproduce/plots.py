"""Plots of a reproduction, with 95% CI error bars over seeds: AUC against embedding
memory for every method (one plot per dataset), and each scaling study with its fits.

Colours come from :mod:`suite.figures` (one per method/backbone in every figure) and each
plot is written by :func:`suite.figures.save_figure` (PDF, SVG, 300 dpi PNG).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from suite.figures import color, palette, save_figure
from suite.reproduce.runner import Reproduction, RunRecord


def accuracy_points(reproduction: Reproduction):  # noqa: ANN201
    """One row per distinct accuracy run: method, dataset, bytes, AUC mean and CI."""
    import pandas as pd

    rows, seen = [], set()
    for outcome in reproduction.papers:
        for rid, rec in outcome.runs.items():
            key = rec.config.config_hash()
            if key in seen or rec.config.task.name != "accuracy" or "/" in rid:
                continue
            seen.add(key)
            auc = rec.interval("test_auc")
            rows.append(
                {
                    "run": f"{outcome.spec.paper}/{rid}",
                    "method": rec.config.embedding.name,
                    "dataset": rec.config.dataset.name,
                    "bytes": rec.metrics.get("embedding_bytes", math.nan),
                    "auc": auc.mean,
                    "err": 0.0 if math.isnan(auc.low) else auc.half_width,
                }
            )
    return pd.DataFrame(rows)


def _figure():  # noqa: ANN202
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.6))
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def draw_auc_vs_bytes(reproduction: Reproduction, out_dir: Path) -> list[str]:
    """Test AUC against embedding MiB per method, one plot per dataset; returns PNG names."""
    import seaborn as sns

    frame = accuracy_points(reproduction)
    names: list[str] = []
    if frame.empty:
        return names
    for dataset, part in frame.groupby("dataset", sort=True):
        part = part.sort_values("bytes")
        fig, ax = _figure()
        methods = list(dict.fromkeys(part["method"]))
        sns.lineplot(
            data=part.assign(MiB=part["bytes"] / 2**20),
            x="MiB",
            y="auc",
            hue="method",
            palette=palette(methods),
            marker="o",
            ax=ax,
        )
        for method, rows in part.groupby("method"):
            ax.errorbar(
                rows["bytes"] / 2**20,
                rows["auc"],
                yerr=rows["err"],
                fmt="none",
                ecolor=color(str(method)),
                capsize=3,
            )
        ax.set_xscale("log")
        ax.set_xlabel("embedding memory (MiB, log)")
        ax.set_ylabel("test AUC (mean, 95% CI over seeds)")
        ax.set_title(f"Test AUC against embedding memory: {dataset}")
        written = save_figure(fig, out_dir / f"auc_vs_bytes_{dataset}")
        names.append(written[0].name)
    return names


def draw_scaling(reproduction: Reproduction, out_dir: Path) -> list[str]:
    """Each paper's scaling families: metric against training FLOPs with CIs and fits."""
    names: list[str] = []
    for outcome in reproduction.papers:
        if not outcome.fits:
            continue
        fig, ax = _figure()
        metric = next(c.claim.metric for c in outcome.claims if c.claim.families())
        for family, fit in outcome.fits.items():
            records: list[RunRecord] = [
                outcome.runs[f"{family}/{m}"] for m in outcome.families[family]
            ]
            flops = np.array([r.metrics.get("training_flops", math.nan) for r in records])
            cis = [r.interval(metric) for r in records]
            means = np.array([c.mean for c in cis])
            errs = np.array([0.0 if math.isnan(c.low) else c.half_width for c in cis])
            backbone = records[0].config.model.name
            ax.errorbar(
                flops, means, yerr=errs, fmt="o", color=color(backbone), capsize=3, label=family
            )
            if fit.fit.converged:
                xs = np.geomspace(flops.min(), flops.max(), 60)
                gate = "" if fit.measurable else ", fails gate"
                ax.plot(
                    xs,
                    fit.fit.predict(xs),
                    ls="--",
                    lw=1,
                    color=color(backbone),
                    label=f"{family} fit: b={fit.fit.b:.3g}, R²={fit.fit.r2:.2f}{gate}",
                )
        ax.set_xscale("log")
        ax.set_xlabel("training compute (FLOPs, log)")
        ax.set_ylabel(f"{metric.replace('_', ' ')} (mean, 95% CI over seeds)")
        ax.set_title(f"{outcome.spec.paper}: {metric} = L∞ + a·C^-b")
        ax.legend(fontsize=7)
        written = save_figure(fig, out_dir / f"scaling_{outcome.spec.paper}")
        names.append(written[0].name)
    return names


def draw_plots(reproduction: Reproduction, out_dir: Path) -> list[str]:
    """Write every plot under ``out_dir``; return the PNG file names for the report."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    return draw_auc_vs_bytes(reproduction, out_dir) + draw_scaling(reproduction, out_dir)
