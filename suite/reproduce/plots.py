"""Seaborn plots of a reproduction: AUC vs bytes, throughput per method, scaling."""

from __future__ import annotations

from pathlib import Path

from suite.reproduce.runner import PaperOutcome


def _frame(outcomes: list[PaperOutcome]):  # noqa: ANN202
    import pandas as pd

    rows, seen = [], set()
    for outcome in outcomes:
        for rid, rec in outcome.runs.items():
            key = rec.config.config_hash()
            if key in seen or rec.config.task.name != "accuracy":
                continue
            seen.add(key)
            rows.append(
                {
                    "run": f"{outcome.spec.paper}/{rid}",
                    "method": rec.config.embedding.name,
                    "backbone": rec.config.model.name,
                    "test AUC": rec.metrics.get("test_auc"),
                    "embedding bytes": rec.metrics.get("embedding_bytes"),
                    "train samples/s": rec.metrics.get("train_samples_per_s"),
                }
            )
    return pd.DataFrame(rows)


def draw_plots(outcomes: list[PaperOutcome], out_dir: Path) -> list[str]:
    """Write the plots under ``out_dir``; return their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    out_dir.mkdir(parents=True, exist_ok=True)
    frame = _frame(outcomes)
    names: list[str] = []
    if not frame.empty:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        sns.scatterplot(
            data=frame,
            x="embedding bytes",
            y="test AUC",
            hue="method",
            style="backbone",
            s=80,
            ax=ax,
        )
        ax.set_xscale("log")
        ax.set_title("Test AUC against embedding memory")
        fig.tight_layout()
        fig.savefig(out_dir / "auc_vs_bytes.png", dpi=110)
        plt.close(fig)
        names.append("auc_vs_bytes.png")

        fig, ax = plt.subplots(figsize=(7, 4.5))
        ordered = frame.sort_values("train samples/s", ascending=False)
        sns.barplot(data=ordered, y="run", x="train samples/s", hue="method", dodge=False, ax=ax)
        ax.set_title("Training throughput per run (machine-dependent)")
        fig.tight_layout()
        fig.savefig(out_dir / "throughput.png", dpi=110)
        plt.close(fig)
        names.append("throughput.png")
    scaling = scaling_points(outcomes)
    if scaling is not None and not scaling.empty:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        sns.lineplot(
            data=scaling, x="training FLOPs", y="test log loss", hue="backbone", marker="o", ax=ax
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title("Scaling: test log loss against training compute")
        fig.tight_layout()
        fig.savefig(out_dir / "scaling.png", dpi=110)
        plt.close(fig)
        names.append("scaling.png")
    return names


def scaling_points(outcomes: list[PaperOutcome]):  # noqa: ANN201
    """Points of every scaling-task run, or None."""
    import pandas as pd

    rows = []
    for outcome in outcomes:
        for rec in outcome.runs.values():
            if rec.config.task.name != "scaling":
                continue
            for point in rec.details.get("points", []):
                rows.append(
                    {
                        "backbone": point.get("backbone"),
                        "training FLOPs": point.get("training_flops"),
                        "test log loss": point.get("test_logloss"),
                    }
                )
    return pd.DataFrame(rows) if rows else None
