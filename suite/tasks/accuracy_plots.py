"""The accuracy task's figures: its validation curve and its test ROC curve (PNG), drawn
under ``results_dir/plots/accuracy/`` and logged under the MLflow run's ``plots/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from suite.figures import NEUTRAL, color, save_figure

ROC_POINTS = 2000
"""At most this many points of the ROC curve are drawn (a million test rows need not be)."""


def _figure(width: float = 4.8, height: float = 3.4) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def roc_points(labels: np.ndarray, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """False and true positive rates ``[k]`` of ``logits [N]`` against ``labels [N]``, at
    every distinct threshold (ties together), thinned to :data:`ROC_POINTS`."""
    y = np.asarray(labels).astype(bool).ravel()
    order = np.argsort(-np.asarray(logits, dtype=np.float64).ravel(), kind="stable")
    scores, y = np.asarray(logits, dtype=np.float64).ravel()[order], y[order]
    ends = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]  # last row of each tie
    tp, fp = np.cumsum(y)[ends], np.cumsum(~y)[ends]
    tpr = np.r_[0.0, tp / max(int(y.sum()), 1)]
    fpr = np.r_[0.0, fp / max(int((~y).sum()), 1)]
    if len(fpr) > ROC_POINTS:
        keep = np.unique(np.linspace(0, len(fpr) - 1, ROC_POINTS).astype(int))
        fpr, tpr = fpr[keep], tpr[keep]
    return fpr, tpr


def draw_accuracy(
    history: list[dict[str, float]],
    labels: np.ndarray,
    logits: np.ndarray,
    test_auc: float,
    embedding: str,
    out_dir: Path,
    option: str | None = None,
) -> list[Path]:
    """``validation_curve.png`` (validation AUC and log loss by step, where the run
    validated) and ``roc.png`` (the test set's ROC curve with its AUC); the files
    written."""
    written = []
    steps = [h["step"] for h in history if "val_auc" in h]
    if steps:
        fig, ax = _figure()
        ax.plot(
            steps,
            [h["val_auc"] for h in history if "val_auc" in h],
            marker="o",
            color=color(embedding),
            label="AUC",
        )
        ax.set_xlabel("training step")
        ax.set_ylabel("validation AUC")
        if all("val_logloss" in h for h in history):
            other = ax.twinx()
            other.plot(
                steps,
                [h["val_logloss"] for h in history],
                marker="s",
                color=NEUTRAL[2],
                linestyle="--",
                label="log loss",
            )
            other.set_ylabel("validation log loss")
            lines = ax.get_lines() + other.get_lines()
            ax.legend(lines, [line.get_label() for line in lines], frameon=False, loc="best")
        ax.set_title("Validation curve")
        written.append(save_figure(fig, out_dir / "validation_curve.png", ("png",), option)[0])
    if len(np.unique(labels)) == 2:
        fpr, tpr = roc_points(labels, logits)
        fig, ax = _figure(3.6, 3.6)
        ax.plot(fpr, tpr, color=color(embedding), label=f"AUC {test_auc:.4f}")
        ax.plot([0, 1], [0, 1], color=NEUTRAL[2], linestyle=":", linewidth=1)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_title("Test ROC")
        ax.legend(loc="lower right", frameon=False)
        written.append(save_figure(fig, out_dir / "roc.png", ("png",), option)[0])
    return written
