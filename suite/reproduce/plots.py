"""Plots of a reproduction, with 90% CI error bars over seeds: AUC against embedding
memory for every method (one plot per dataset), and each scaling study with its fits.

Colours come from :mod:`suite.figures` (one per method/backbone in every figure) and each
plot is written by :func:`suite.figures.save_figure` (PDF, SVG, 300 dpi PNG).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from suite.figures import (
    MIB,
    SCALING_LAW,
    color,
    fit_rejection,
    label,
    metric_label,
    save_figure,
)
from suite.reproduce.curve import CurveData, Standing, curve_data, curve_plot_name
from suite.reproduce.outcome import Reproduction, SeededRun
from suite.stats import ScalingFit


def accuracy_points(reproduction: Reproduction):
    """One row per distinct accuracy run: method, dataset, bytes, AUC mean, CI and seeds."""
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
                    "seeds": auc.n,
                }
            )
    return pd.DataFrame(rows)


def plain_log_ticks(ax) -> None:
    """Major ticks as plain numbers and no labels on minor ticks (they collide)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def figure():
    """A 7 x 4.6 inch Figure on the Agg canvas and its one Axes: ``(fig, ax)``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.6))
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def one_point_per_memory(part):
    """``part`` with one row per (method, bytes): the same run in several papers (a shared
    ``full`` baseline) is one point, the one with the most seeds, then the first by run."""
    ranked = part.sort_values(["seeds", "run"], ascending=[False, True], kind="stable")
    return ranked.drop_duplicates(["method", "bytes"]).sort_values(["method", "bytes"])


def auc_vs_bytes_figure(part, dataset: str):
    """Test AUC against embedding MiB (log), one line per method with its 90% CI bars.

    ``part``: :func:`accuracy_points` rows of one dataset. Returns the Figure.
    """
    fig, ax = figure()
    points = one_point_per_memory(part)
    methods = sorted(set(points["method"]), key=lambda m: (m != "full", m))
    for method in methods:
        rows = points[points["method"] == method]
        ax.errorbar(
            rows["bytes"] / MIB,
            rows["auc"],
            yerr=rows["err"],
            fmt="-o",
            color=color(method),
            capsize=3,
            markersize=5,
            lw=1.5,
            label=label(method),
        )
    ax.set_xscale("log")
    plain_log_ticks(ax)
    ax.legend(fontsize=8, loc="best", title="embedding", title_fontsize=8)
    ax.set_xlabel("embedding memory (MiB, log scale)")
    ax.set_ylabel("test AUC (mean and 90% CI over seeds)")
    ax.set_title(f"Test AUC vs embedding memory per method ({dataset})")
    return fig


def draw_auc_vs_bytes(reproduction: Reproduction, out_dir: Path) -> list[str]:
    """Test AUC against embedding MiB per method, one plot per dataset; returns PNG names."""
    frame = accuracy_points(reproduction)
    names: list[str] = []
    if frame.empty:
        return names
    for dataset, part in frame.groupby("dataset", sort=True):
        fig = auc_vs_bytes_figure(part, str(dataset))
        written = save_figure(fig, out_dir / f"auc_vs_bytes_{dataset}")
        names.append(written[0].name)
    return names


@dataclass(frozen=True)
class Family:
    """One scaling family of a reproduction: its runs' compute and metric with 90% CIs."""

    name: str
    backbone: str
    flops: np.ndarray  # [P] training FLOPs per size
    means: np.ndarray  # [P] metric mean over seeds
    errs: np.ndarray  # [P] 90% CI half-width (0 without one)
    fit: ScalingFit


def _fit_legend(family: Family) -> str:
    """``DLRM fit: b = 0.95, R² = 0.99``, or why the fit fails the gate."""
    fit = family.fit
    text = f"{_family_label(family)} fit: b = {fit.fit.b:.3g}, R² = {fit.fit.r2:.2f}"
    reason = fit_rejection(fit.fit.points, fit.fit.r2, fit.fit.converged)
    if reason is None and not fit.measurable:
        reason = "fit rejected (no stable bootstrap interval for $b$)"
    return f"{text}, {reason}" if reason else text


def _family_label(family: Family) -> str:
    name = label(family.backbone)
    return name if family.name == family.backbone else f"{family.name} ({name})"


def scaling_figure(metric: str, families: list[Family]):
    """``metric`` against training FLOPs (log), one colour per backbone: seed means with
    90% CI bars and, where the fit converged, the fitted law dashed. Returns the Figure."""
    fig, ax = figure()
    handles = []  # in drawing order: each family's points, then its fit
    for family in families:
        converged = family.fit.fit.converged
        points = ax.errorbar(
            family.flops,
            family.means,
            yerr=family.errs,
            fmt="o",
            color=color(family.backbone),
            capsize=3,
            label=_family_label(family) + ("" if converged else ", fit did not converge"),
        )
        handles.append(points)
        if converged:
            xs = np.geomspace(family.flops.min(), family.flops.max(), 60)
            (line,) = ax.plot(
                xs,
                family.fit.fit.predict(xs),
                ls="--",
                lw=1,
                color=color(family.backbone),
                label=_fit_legend(family),
            )
            handles.append(line)
    backbones = ", ".join(label(b) for b in dict.fromkeys(f.backbone for f in families))
    ax.set_xscale("log")
    ax.set_xlabel("training compute $C$ (FLOPs, log scale)")
    ax.set_ylabel(f"{metric_label(metric)} (mean and 90% CI over seeds)")
    ax.set_title(
        f"Scaling: {metric_label(metric)} vs training FLOPs ({backbones})\n"
        f"dashed: fitted {SCALING_LAW}",
        fontsize=11,
    )
    ax.legend(handles=handles, fontsize=7)
    return fig


def draw_scaling(reproduction: Reproduction, out_dir: Path) -> list[str]:
    """Each paper's scaling families: metric against training FLOPs with CIs and fits."""
    names: list[str] = []
    for outcome in reproduction.papers:
        if not outcome.fits:
            continue
        metric = next(c.claim.metric for c in outcome.claims if c.claim.families())
        families = []
        for family, fit in outcome.fits.items():
            records: list[SeededRun] = [
                outcome.runs[f"{family}/{m}"] for m in outcome.families[family]
            ]
            cis = [r.interval(metric) for r in records]
            families.append(
                Family(
                    name=family,
                    backbone=records[0].config.model.name,
                    flops=np.array([r.metrics.get("training_flops", math.nan) for r in records]),
                    means=np.array([c.mean for c in cis]),
                    errs=np.array([0.0 if math.isnan(c.low) else c.half_width for c in cis]),
                    fit=fit,
                )
            )
        fig = scaling_figure(metric, families)
        written = save_figure(fig, out_dir / f"scaling_{outcome.spec.paper}")
        names.append(written[0].name)
    return names


LINE = {"fmt": "-o", "capsize": 3, "markersize": 4, "lw": 1.4}
"""How a method's line is drawn on the compression curve."""


def curve_figure(data: CurveData):
    """Test AUC (mean, 90% CI) against total embedding bytes (MiB, log), a line per
    method, the reference dashed. Returns the Figure."""
    fig, ax = figure()
    by_method: dict[str, list[Standing]] = {}
    for rows in data.standings:
        for s in rows:
            by_method.setdefault(s.method, []).append(s)
    for method in data.curve.methods:
        points = sorted(by_method.get(method, []), key=lambda s: -s.budget)
        if not points:
            continue
        x = [
            data.records[(method, s.budget)].metrics["embedding_total_bytes"] / MIB for s in points
        ]
        y = [s.auc for s in points]
        err = [0.0 if math.isnan(s.low) else (s.high - s.low) / 2 for s in points]
        ax.errorbar(x, y, yerr=err, color=color(method), label=label(method), **LINE)
    ref, name = data.reference, data.curve.reference
    auc = ref.interval("test_auc")
    ax.axhline(auc.mean, color=color(name), ls="--", lw=1)
    ax.errorbar(
        [ref.metrics.get("embedding_total_bytes", math.nan) / MIB],
        [auc.mean],
        yerr=[0.0 if math.isnan(auc.low) else auc.half_width],
        color=color(name),
        label=f"{label(name)} (all bytes)",
        **LINE,
    )
    ax.set_xscale("log")
    plain_log_ticks(ax)
    ax.set_xlabel("total embedding bytes incl. optimizer state (MiB, log scale)")
    ax.set_ylabel("test AUC (mean and 90% CI)")
    ax.set_title(f"Compression methods at equal memory ({data.dataset})")
    ax.legend(fontsize=7, loc="best", title="method", title_fontsize=7)
    return fig


def draw_curves(reproduction: Reproduction, out_dir: Path) -> list[str]:
    """Write each spec's curve plot under ``out_dir``; return the PNG names."""
    names = []
    for outcome in reproduction.papers:
        data = curve_data(outcome)
        if data is None or not any(data.standings):
            continue
        fig = curve_figure(data)
        path = out_dir / curve_plot_name(outcome.spec.paper, data.dataset)
        names.append(save_figure(fig, path)[0].name)
    return names


def draw_plots(reproduction: Reproduction, out_dir: Path) -> list[str]:
    """Write every plot under ``out_dir``; return the PNG file names for the report."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    draw_curves(reproduction, out_dir)  # shown in their spec's section, not under Plots
    return draw_auc_vs_bytes(reproduction, out_dir) + draw_scaling(reproduction, out_dir)
