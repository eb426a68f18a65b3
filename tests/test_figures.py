"""One colour per method everywhere; figures written as PDF, SVG and 300 dpi PNG; plots
a paper would print (titles, typeset formulas, legends, bars, MiB)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import to_hex

from suite.data.access import REUSE_LABELS, AccessStream, reuse_histogram
from suite.data.access_plots import reuse_figure
from suite.figures import (
    BACKBONE_COLORS,
    EMBEDDING_COLORS,
    MIB,
    NEUTRAL,
    PALETTE,
    SCALING_LAW,
    color,
    label,
    palette,
    save_figure,
)
from suite.registry import EMBEDDINGS, MODELS
from suite.reproduce.plots import Family, auc_vs_bytes_figure, scaling_figure
from suite.stats import MIN_R2, fit_scaling
from suite.studies import load_study_spec
from suite.studies.report import front_figure
from suite.tasks.checkpoint import bytes_figure
from suite.tasks.scaling import fit_power_law
from suite.tasks.scaling import scaling_figure as task_scaling_figure

# Machado, Oliveira & Fernandes (2009), severity 1.0, on linear RGB
DEUTERANOPIA = np.array(
    [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.01182, 0.04294, 0.968881]]
)
PROTANOPIA = np.array(
    [
        [0.152286, 1.052583, -0.204868],
        [0.114503, 0.786281, 0.099216],
        [-0.003882, -0.048116, 1.051998],
    ]
)


def lab(hex_colour: str, vision: np.ndarray | None = None) -> np.ndarray:
    """CIELAB (D65) of ``#rrggbb``, optionally as a colour-vision deficiency sees it."""
    srgb = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    rgb = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    if vision is not None:
        rgb = np.clip(vision @ rgb, 0, 1)
    xyz = (
        np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
        @ rgb
        / np.array([0.95047, 1.0, 1.08883])
    )
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def closest_pair(colours: dict[str, str], vision: np.ndarray | None = None) -> tuple:
    """The smallest CIE76 distance between two of ``colours`` and the names of that pair."""
    return min(
        (float(np.linalg.norm(lab(colours[a], vision) - lab(colours[b], vision))), a, b)
        for a, b in itertools.combinations(colours, 2)
    )


def test_a_method_has_one_colour_everywhere() -> None:
    assert color("qr") == palette(["full", "qr"])["qr"] == palette(["qr"])["qr"]
    assert color("some-new-method") == color("some-new-method")


def test_every_registered_method_and_backbone_has_its_own_fixed_colour() -> None:
    methods, backbones = EMBEDDINGS.names(), MODELS.names()
    assert set(methods) <= set(EMBEDDING_COLORS), "add the new method to EMBEDDING_COLORS"
    assert set(backbones) <= set(BACKBONE_COLORS), "add the new backbone to BACKBONE_COLORS"
    assert len({color(m).lower() for m in methods}) == len(methods)
    assert len({c.lower() for c in PALETTE.values()}) == len(PALETTE)  # one name per colour
    assert all(label(m) != "" for m in methods + backbones)


def test_method_colours_stay_apart_for_colour_blind_readers() -> None:
    methods = {m: color(m) for m in EMBEDDINGS.names()}
    # the colours of qr and fiited before (#de8f05, #d55e00) were 25.6 apart, 12.6 under
    # deuteranopia: the pair readers took for one colour
    assert closest_pair(methods)[0] >= 30, closest_pair(methods)
    for vision in (DEUTERANOPIA, PROTANOPIA):
        assert closest_pair(methods, vision)[0] >= 15, closest_pair(methods, vision)
    backbones = {b: color(b) for b in MODELS.names()}
    for vision in (None, DEUTERANOPIA, PROTANOPIA):
        assert closest_pair(backbones, vision)[0] >= 40


def accuracy_rows() -> pd.DataFrame:
    """Rows as ``suite.reproduce.plots.accuracy_points`` gives them; the ``full`` baseline
    is in two papers, once with fewer seeds."""
    rows = [
        ("fiited/full", "full", 5.3 * MIB, 0.700, 0.002, 5),
        ("ada/full", "full", 5.3 * MIB, 0.699, 0.004, 3),
        ("qr/qr_4", "qr", 1.4 * MIB, 0.692, 0.010, 5),
        ("qr/qr_16", "qr", 0.4 * MIB, 0.682, 0.003, 5),
        ("fiited/fiited_65", "fiited", 1.8 * MIB, 0.700, 0.002, 5),
        ("fiited/fiited_9975", "fiited", 0.04 * MIB, 0.685, 0.003, 5),
    ]
    columns = ["run", "method", "bytes", "auc", "err", "seeds"]
    return pd.DataFrame(rows, columns=columns).assign(dataset="criteo-synth")


def test_auc_plot_draws_one_point_and_one_error_bar_per_run_and_memory() -> None:
    ax = auc_vs_bytes_figure(accuracy_rows(), "criteo-synth").axes[0]
    bars = {c.get_label(): c for c in ax.containers}
    assert sorted(bars) == sorted(["full", "QR", "FIITED"])  # one container per method
    line, caps, _ = bars["full"].lines
    assert list(line.get_ydata()) == [0.700]  # the 5-seed run, drawn once
    assert all(len(cap.get_xdata()) == 1 for cap in caps)  # one pair of caps
    assert line.get_color() == color("full")
    assert "MiB" in ax.get_xlabel()


def test_a_method_has_the_same_colour_in_the_auc_plot_and_the_pareto_plot() -> None:
    auc_ax = auc_vs_bytes_figure(accuracy_rows(), "criteo-synth").axes[0]
    auc_colours = {c.get_label(): c.lines[0].get_color() for c in auc_ax.containers}

    spec = load_study_spec(Path(__file__).parents[1] / "studies" / "hash.yaml")
    trials = pd.DataFrame(
        {
            "method": ["qr", "fiited", "qr"],
            "embedding_bytes": [0.5 * MIB, 0.8 * MIB, 2.0 * MIB],
            "val_auc": [0.69, 0.70, 0.71],
            "feasible": [True, True, False],
            "pareto": [True, True, False],
        }
    )
    front_ax = front_figure(spec, trials).axes[0]
    legend = front_ax.get_legend()
    handles = dict(
        zip([t.get_text() for t in legend.get_texts()], legend.legend_handles, strict=True)
    )
    for method in ("qr", "fiited"):
        assert to_hex(handles[label(method)].get_markerfacecolor()) == color(method).lower()
        assert to_hex(auc_colours[label(method)]) == color(method).lower()
    texts = [t.get_text() for t in legend.get_texts()]
    assert "memory limit 0.954 MiB" in texts  # hash.yaml's limit: 1e6 bytes
    assert front_ax.get_xlabel() == "embedding memory (MiB)"
    assert not any("MB" in t and "MiB" not in t for t in texts + [front_ax.get_xlabel()])


def test_checkpoint_bytes_plot_is_in_mib_like_every_memory_figure() -> None:
    rows = [
        {"kind": kind, "step": step, "bytes": size}
        for kind, size in (("full", 3 * MIB), ("incremental", MIB // 2))
        for step in (10, 20)
    ]
    ax = bytes_figure(rows, ["full", "incremental"]).axes[0]
    assert ax.get_ylabel() == "bytes written per checkpoint (MiB)"
    heights = sorted({float(y) for line in ax.lines for y in line.get_ydata()})
    assert heights == [0.5, 3.0]  # 1e6-byte megabytes would read 0.524 and 3.15


def scaling_families() -> list[Family]:
    """Three backbones on five sizes and three seeds; dcnv2's losses are noise."""
    rng = np.random.default_rng(0)
    flops = np.geomspace(1e9, 1e11, 5)
    families = []
    for backbone, noise in (("dlrm", 0.0005), ("dcnv2", 0.02), ("wukong", 0.0005)):
        losses = 0.52 + 5.0 * flops[:, None] ** -0.3 + rng.normal(0, noise, (5, 3))
        fit = fit_scaling(flops, losses, resamples=40)
        families.append(Family(backbone, backbone, flops, losses.mean(1), losses.std(1), fit))
    return families


def test_reproduction_scaling_plot_says_what_it_shows() -> None:
    families = scaling_families()
    assert families[1].fit.fit.r2 < MIN_R2 <= families[0].fit.fit.r2  # the data do it
    fig = scaling_figure("test_logloss", families)
    fig.canvas.draw()  # mathtext that does not parse raises here
    ax = fig.axes[0]
    title = ax.get_title()
    assert title.startswith("Scaling: test log loss vs training FLOPs (DLRM, DCNv2, Wukong)")
    assert SCALING_LAW in title and SCALING_LAW == r"$L(C) = L_\infty + a\,C^{-b}$"
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("DCNv2 fit") and t.endswith("fit rejected (R² < 0.8)") for t in texts)
    assert not any("gate" in t for t in texts)
    dashed = {
        line.get_label().split(" fit")[0]: line.get_color()
        for line in ax.lines
        if line.get_linestyle() == "--"
    }
    assert dashed == {label(b): color(b) for b in ("dlrm", "dcnv2", "wukong")}


def test_scaling_task_plot_names_backbones_and_why_a_fit_is_rejected() -> None:
    points = [
        {"backbone": b, "preset": f"{b}-{s}", "training_flops": c, "test_logloss": 0.5 + c**-0.2}
        for b in ("dlrm", "wukong")
        for s, c in zip("sml", (1e9, 1e10, 1e11), strict=True)
    ]
    fits = {
        b: fit_power_law(
            [p["training_flops"] for p in points if p["backbone"] == b],
            [p["test_logloss"] for p in points if p["backbone"] == b],
        )
        for b in ("dlrm", "wukong")
    }
    fig = task_scaling_figure(points, fits, "criteo-synth")
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.get_title().startswith("Scaling: test log loss vs training FLOPs (DLRM, Wukong)")
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "DLRM fit: b = " in texts[1] and texts[1].endswith("fit rejected (3 < 4 sizes)")
    solid = [line for line in ax.lines if line.get_linestyle() == "-"]
    assert [line.get_color() for line in solid] == [color("dlrm"), color("wukong")]


def test_reuse_histogram_draws_its_bins_as_bars() -> None:
    stream = AccessStream.from_sparse(np.array([[0, 2], [0, 1], [3, 2], [0, 2]]), [4, 3])
    ax = reuse_figure({"reuse": reuse_histogram(stream.keys, stream.samples, 3)}).axes[0]
    bars = [p for p in ax.patches if p.get_width() > 0]
    assert len(bars) >= 3 * len(REUSE_LABELS)  # three series, one bar per bin each
    assert [t.get_text() for t in ax.get_xticklabels()] == list(REUSE_LABELS)
    assert all(len(line.get_xdata()) <= 2 for line in ax.lines)  # no line joins the bins
    assert to_hex(bars[0].get_facecolor()) == NEUTRAL[0].lower()  # no method's colour


def test_save_figure_writes_vector_and_300_dpi_png(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, 1])
    files = save_figure(fig, tmp_path / "plot.png")
    plt.close(fig)
    assert [f.suffix for f in files] == [".png", ".pdf", ".svg"]
    assert all(f.stat().st_size > 0 for f in files)
    dpi = Image.open(files[0]).info["dpi"]
    assert round(dpi[0]) == 300


def test_the_same_figure_saved_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    import time

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def draw(where: Path) -> dict[str, bytes]:
        fig, ax = plt.subplots(figsize=(2, 1))
        ax.plot([0, 1], [0, 1], marker="o")
        files = save_figure(fig, where / "plot.png")
        plt.close(fig)
        return {f.suffix: f.read_bytes() for f in files}

    first = draw(tmp_path / "a")
    time.sleep(1.1)  # a creation date would differ now
    assert draw(tmp_path / "b") == first
