"""Paper-ready figures: one colour per method and backbone everywhere, vector and 300 dpi.

Every plot the suite draws (reports, tasks, studies, leaderboard) takes its colours from
:func:`color`, its legend names from :func:`label` and is written by :func:`save_figure`,
so a method looks the same in every figure and every figure exists as PDF, SVG and a
300 dpi PNG. Memory is drawn in MiB (powers of 1024, as :mod:`suite.units` prints it).
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path
from typing import Any

# Colour-blind-safe hues from Okabe & Ito (2008) and Paul Tol's "muted", "bright", "dark"
# and "light" schemes. Each group of names drawn together (the embedding methods, the
# backbones, the precisions) was chosen to maximise the smallest CIE76 distance between
# its colours in normal vision and under simulated deuteranopia and protanopia; every
# name has its own colour, so a colour names one thing in every figure.
EMBEDDING_COLORS: dict[str, str] = {
    "full": "#0072B2",  # blue
    "hash": "#555555",  # dark grey
    "qr": "#E69F00",  # orange
    "mixed_dim": "#009E73",  # bluish green
    "fiited": "#CC79A7",  # reddish purple
    "adaembed": "#D55E00",  # vermillion
    "robe": "#88CCEE",  # cyan
    "dhe": "#225522",  # dark green
    "ttrec": "#332288",  # indigo
    "alpt": "#222255",  # dark navy
}
BACKBONE_COLORS: dict[str, str] = {
    "dlrm": "#56B4E9",  # sky blue
    "dcnv2": "#999933",  # olive
    "wukong": "#000000",  # black
}
PRECISION_COLORS: dict[str, str] = {
    "fp32": "#663333",  # brown
    "fp16": "#EE8866",  # light orange
    "int8": "#009988",  # teal
    "int4": "#AA4499",  # purple
    "int2": "#EE3377",  # magenta
    "lowprec": "#882255",  # wine
}
PALETTE: dict[str, str] = {**EMBEDDING_COLORS, **BACKBONE_COLORS, **PRECISION_COLORS}
# Series that are no method, backbone or precision (this data against a published
# histogram, LRU against LFU): Tol's "light" hues, which no name in PALETTE uses.
NEUTRAL = ("#44BB99", "#FFAABB", "#BBBBBB")
# Unknown names hash into this set (Okabe-Ito without black).
_FALLBACK = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"]

LABELS: dict[str, str] = {
    "full": "full",
    "hash": "hash",
    "qr": "QR",
    "mixed_dim": "mixed-dim",
    "fiited": "FIITED",
    "adaembed": "AdaEmbed",
    "robe": "ROBE",
    "dhe": "DHE",
    "ttrec": "TT-Rec",
    "alpt": "ALPT",
    "dlrm": "DLRM",
    "dcnv2": "DCNv2",
    "wukong": "Wukong",
    "fp32": "FP32",
    "fp16": "FP16",
    "int8": "INT8",
    "int4": "INT4",
    "int2": "INT2",
}
METRIC_LABELS: dict[str, str] = {
    "test_logloss": "test log loss",
    "val_logloss": "validation log loss",
    "test_auc": "test AUC",
    "val_auc": "validation AUC",
}
# The scaling law every scaling plot fits, typeset by matplotlib's mathtext.
SCALING_LAW = r"$L(C) = L_\infty + a\,C^{-b}$"
MIB = 2**20
FORMATS = ("pdf", "svg", "png")
PNG_DPI = 300


def color(name: str) -> str:
    """The colour of a method, backbone or precision, the same in every figure; a name
    outside :data:`PALETTE` gets a stable colour by hash."""
    if name in PALETTE:
        return PALETTE[name]
    return _FALLBACK[zlib.crc32(name.encode()) % len(_FALLBACK)]


def palette(names: list[str]) -> dict[str, str]:
    """``{name: colour}`` for seaborn's ``palette=`` argument."""
    return {name: color(name) for name in names}


def label(name: str) -> str:
    """How a legend or title names a method, backbone or precision (``fiited`` -> ``FIITED``)."""
    return LABELS.get(name, name)


def metric_label(metric: str) -> str:
    """How an axis names a metric (``test_logloss`` -> ``test log loss``)."""
    return METRIC_LABELS.get(metric, metric.replace("_", " "))


def fit_rejection(points: int, r2: float, converged: bool = True) -> str | None:
    """Why a scaling fit fails :attr:`suite.stats.PowerLawFit.usable`, as a legend says it
    (``None`` when it passes)."""
    from suite.stats import MIN_FIT_POINTS, MIN_R2

    if not converged:
        return "fit did not converge"
    if points < MIN_FIT_POINTS:
        return f"fit rejected ({points} < {MIN_FIT_POINTS} sizes)"
    if not math.isfinite(r2) or r2 < MIN_R2:
        return f"fit rejected (R² < {MIN_R2:g})"
    return None


def save_figure(
    fig: Any, path: str | Path, formats: tuple[str, ...] = FORMATS, option: str | None = None
) -> list[Path]:
    """Write ``fig`` as ``path`` with each suffix in ``formats`` (PNG at 300 dpi).

    ``path``'s own suffix is replaced; returns the files written, PNG first when present.
    Each file is drawn in memory and written atomically: a full disk is one line naming
    the file, its size and ``option`` (the setting that moves it), with no partial file.
    """
    import io

    import matplotlib

    from suite.fileio import write_bytes_atomic

    base = Path(path).with_suffix("")
    base.parent.mkdir(parents=True, exist_ok=True)
    written = []
    # the same figure gives the same bytes: no creation date, SVG ids from a fixed salt
    with matplotlib.rc_context({"svg.hashsalt": "recsuite"}):
        for fmt in sorted(formats, key=lambda f: f != "png"):
            out = base.with_suffix(f".{fmt}")
            metadata = {"CreationDate": None} if fmt == "pdf" else {"Date": None}
            drawn = io.BytesIO()
            fig.savefig(
                drawn,
                format=fmt,
                dpi=PNG_DPI if fmt == "png" else None,
                bbox_inches="tight",
                metadata=metadata if fmt in ("pdf", "svg") else None,
            )
            written.append(write_bytes_atomic(out, drawn.getvalue(), option))
    return written
