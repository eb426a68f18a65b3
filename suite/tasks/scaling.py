"""``scaling``: quality against training compute over a family of model-size presets.

Each preset (``suite/presets/models/<name>.yaml``) is laid over the run's own config, so
every point trains on the same data with the same budget, optimizer and seed, down the
ordinary ``train`` + ``evaluate`` path. Per backbone a saturating power law
``logloss = L_inf + a * C^(-b)`` is fitted (``C`` = training FLOPs, 3 x forward x examples;
:func:`suite.stats.fit_saturating_power_law`) and its exponent ``b``, ``L_inf``, R^2 and
whether it passes the fit-quality gate are reported; the points and fits are drawn on a
log-log plot under ``results/scaling/``. The reproductions judge scaling claims on
families of ordinary runs with seeds (``suite.reproduce``), not on this one-seed task.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, field_validator

from suite.config import Frozen, RunConfig, load_yaml, validate_config
from suite.engine.train import evaluate, train
from suite.errors import ConfigError, SuiteError
from suite.models.base import training_flops
from suite.presets import preset_path
from suite.registry import TASKS
from suite.results import MetricSpec
from suite.stats import fit_saturating_power_law
from suite.tasks.base import RunContext, Task, TaskOutput

DEFAULT_PRESETS = ["dlrm-xs", "dlrm-s", "dlrm-m", "wukong-xs", "wukong-s", "wukong-m"]
PRESET_KEYS = {"model", "embedding"}
PLOT_DIR = Path("results") / "scaling"


class ScalingOptions(Frozen):
    """Which size presets to train, and whether to draw the plot."""

    presets: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PRESETS),
        min_length=1,
        description="model presets (suite/presets/models/*.yaml) to train, in order",
    )
    plot: bool = Field(True, description="draw results/scaling/<dataset>-<confighash>.png")

    @field_validator("presets")
    @classmethod
    def _known_presets(cls, names: list[str]) -> list[str]:
        for name in names:
            try:
                preset_path(name)
            except SuiteError as exc:
                raise ValueError(str(exc)) from None
        if len(set(names)) != len(names):
            raise ValueError(f"presets must not repeat, got {names}")
        return names


def preset_config(base: RunConfig, name: str) -> RunConfig:
    """``base`` with preset ``name``'s model (replaced whole) and embedding options (merged
    into the run's own embedding method) laid over it, as an ``accuracy`` run."""
    preset = load_yaml(preset_path(name))
    if extra := sorted(set(preset) - PRESET_KEYS):
        raise ConfigError(f"preset {name!r}: only {sorted(PRESET_KEYS)} may be set, found {extra}")
    data = base.model_dump(mode="json")
    data["model"] = preset["model"]
    embedding = preset.get("embedding") or {}
    if embedding.get("name", data["embedding"]["name"]) != data["embedding"]["name"]:
        raise ConfigError(f"preset {name!r}: a size preset must not change the embedding method")
    data["embedding"]["options"].update(embedding.get("options") or {})
    data["task"] = {"name": "accuracy"}
    return validate_config(data, f"preset {name}")


def fit_power_law(compute: list[float], loss: list[float]) -> dict[str, float]:
    """``loss = l_inf + a C^-b`` by :func:`suite.stats.fit_saturating_power_law` as a dict
    (``exponent`` is ``b``; ``usable`` is 1.0 when the fit passes the quality gate)."""
    fit = fit_saturating_power_law(compute, loss)
    return {
        "l_inf": fit.l_inf,
        "a": fit.a,
        "exponent": fit.b,
        "r2": fit.r2,
        "points": fit.points,
        "usable": float(fit.usable),
    }


@TASKS.register("scaling")
class ScalingTask(Task):
    """Train a family of size presets on the same data and budget; fit loss vs compute."""

    metrics = (
        MetricSpec("best_test_logloss", False, "Best test log loss", primary=True, shown=True),
        MetricSpec("best_test_auc", True, "Best test AUC", bounds=(0.0, 1.0), shown=True),
        MetricSpec("*_exponent", True, "{} scaling exponent", shown=True),
        MetricSpec("*_r2", True, "{} fit R²", kind="ratio", bounds=(float("-inf"), 1.0)),
        MetricSpec("*_l_inf", False, "{} irreducible loss (fit)"),
        MetricSpec("*_fit_usable", True, "{} fit passes its gate", kind="count", bounds=(0, 1)),
    )

    Options = ScalingOptions

    def run(self, ctx: RunContext) -> TaskOutput:
        options: ScalingOptions = ctx.config.task.typed_options()
        started = time.perf_counter()
        points = [self._point(ctx, index, name) for index, name in enumerate(options.presets)]

        fits: dict[str, dict[str, float]] = {}
        for backbone in dict.fromkeys(p["backbone"] for p in points):
            mine = [p for p in points if p["backbone"] == backbone]
            if len({p["training_flops"] for p in mine}) >= 3:
                fits[backbone] = fit_power_law(
                    [p["training_flops"] for p in mine], [p["test_logloss"] for p in mine]
                )

        metrics: dict[str, float] = {}
        for backbone, fit in fits.items():
            metrics[f"{backbone}_exponent"] = fit["exponent"]
            metrics[f"{backbone}_r2"] = fit["r2"]
            metrics[f"{backbone}_l_inf"] = fit["l_inf"]
            metrics[f"{backbone}_fit_usable"] = fit["usable"]
        metrics["best_test_logloss"] = min(p["test_logloss"] for p in points)
        metrics["best_test_auc"] = max(p["test_auc"] for p in points)

        plot = None
        if options.plot:
            name = f"{ctx.config.dataset.name}-{ctx.config.config_hash()}.png"
            plot = str(draw_scaling_plot(points, fits, PLOT_DIR / name, ctx.config.dataset.name))
        details = {
            "points": points,
            "fits": fits,
            "plot": plot,
            "fit": "log loss = l_inf + a * C^(-exponent), "
            "C = training FLOPs = 3 x forward FLOPs/example x examples; least squares",
            "wall_seconds": round(time.perf_counter() - started, 3),
        }
        return TaskOutput(metrics, details=details)

    @staticmethod
    def _point(ctx: RunContext, index: int, name: str) -> dict[str, Any]:
        cfg = preset_config(ctx.config, name)
        model = ctx.build_model(cfg)
        outcome = train(
            model,
            ctx.data,
            cfg.train,
            cfg.seed,
            ctx.device,
            on_train_metrics=_prefixed(ctx, name),
            on_validation=_prefixed(ctx, name),
        )
        progress = cfg.train.progress
        test = evaluate(
            model,
            ctx.data.split("test"),
            cfg.train.eval_batch_size,
            ctx.device,
            progress,
            f"test {name}",
        )
        point = {
            "preset": name,
            "backbone": cfg.model.name,
            "config_hash": cfg.config_hash(),
            "test_auc": test["auc"],
            "test_logloss": test["logloss"],
            "params": sum(p.numel() for p in model.backbone.parameters()),
            "embedding_bytes": model.embedding.memory().parameters,
            "flops_per_example": model.flops_per_example(),
            "examples": outcome.examples,
            "training_flops": training_flops(model, outcome.examples),
            "train_seconds": round(outcome.seconds, 3),
            **outcome.convergence(),  # stopped_early, still_improving, best_step, validations
        }
        ctx.log_metrics(
            {
                f"points/{k}": float(point[k])
                for k in (
                    "test_auc",
                    "test_logloss",
                    "params",
                    "flops_per_example",
                    "training_flops",
                )
            },
            index,
        )
        return point


def _prefixed(ctx: RunContext, name: str) -> Callable[[dict[str, float], int], None]:
    def log(metrics: dict[str, float], step: int) -> None:
        ctx.log_metrics({f"{name}/{k}": v for k, v in metrics.items()}, step)

    return log


def scaling_figure(points: list[dict[str, Any]], fits: dict[str, dict[str, float]], dataset: str):
    """Test log loss against training FLOPs, log-log, one colour per backbone (the suite's
    palette), fits dashed with their exponent and R² or why the gate rejects them."""
    import pandas as pd
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FormatStrFormatter

    from suite.figures import SCALING_LAW, color, fit_rejection, label

    frame = pd.DataFrame(points).sort_values("training_flops", kind="stable")
    backbones = list(dict.fromkeys(p["backbone"] for p in points))
    fig = Figure(figsize=(7, 4.8))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for backbone in backbones:
        rows = frame[frame.backbone == backbone]
        ax.plot(
            rows["training_flops"],
            rows["test_logloss"],
            "-o",
            color=color(backbone),
            label=label(backbone),
        )
        fit = fits.get(backbone)
        if fit is None or not np.isfinite(fit["exponent"]):
            continue
        xs = np.geomspace(rows["training_flops"].min(), rows["training_flops"].max(), 50)
        text = f"{label(backbone)} fit: b = {fit['exponent']:.3g}, R² = {fit['r2']:.2f}"
        reason = fit_rejection(int(fit["points"]), fit["r2"])
        ax.plot(
            xs,
            fit["l_inf"] + fit["a"] * xs ** (-fit["exponent"]),
            ls="--",
            lw=1,
            color=color(backbone),
            label=f"{text}, {reason}" if reason else text,
        )
    for row in frame.itertuples():
        ax.annotate(
            row.preset,
            (row.training_flops, row.test_logloss),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=7,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%.3g"))
    ax.set_xlabel("training compute $C$ (FLOPs, log scale)")
    ax.set_ylabel("test log loss (log scale)")
    names = ", ".join(label(b) for b in backbones)
    ax.set_title(
        f"Scaling: test log loss vs training FLOPs ({names}) on {dataset}\n"
        f"dashed: fitted {SCALING_LAW}",
        fontsize=11,
    )
    ax.legend(fontsize=7)
    return fig


def draw_scaling_plot(
    points: list[dict[str, Any]], fits: dict[str, dict[str, float]], path: Path, dataset: str
) -> Path:
    """:func:`scaling_figure` written by :func:`suite.figures.save_figure` as ``path``
    (PNG at 300 dpi, with PDF and SVG beside it); returns the PNG."""
    from suite.figures import save_figure

    return save_figure(scaling_figure(points, fits, dataset), path.with_suffix(".png"))[0]
