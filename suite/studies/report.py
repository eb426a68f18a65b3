"""A study's summary: the trials table, the Pareto front, its plot and the best configs.

Written under ``results/studies/<name>/``:

- ``trials.csv``: one row per trial (state, method, feasibility, Pareto membership,
  every metric of the task's result, the sampled params as dotted keys, config hash,
  MLflow run id);
- ``pareto.csv`` and ``pareto.png`` (also ``.pdf``, ``.svg``): validation AUC against embedding bytes, one colour
  per method, the non-dominated feasible trials joined by a line (the Pareto front over
  the objectives in a multi-objective study; over AUC and bytes in a single-objective
  one, where it shows what the memory budget costs);
- ``best-<k>.yaml``: the best feasible trials' full resolved run configs
  (``RunConfig.to_yaml()``), which ``suite run --config best-1.yaml`` runs as is.
  Multi-objective: the Pareto-optimal trials in order of the first objective;
  single-objective: the top trials by the objective.

Infeasible trials (a constraint violated) stay COMPLETE in Optuna, with their violations
in the user attr ``suite:constraints``; they are never Pareto-optimal nor best.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from suite.fileio import write_text_atomic
from suite.studies.spec import METHOD_PARAM, StudySpec
from suite.studies.worker import (
    CONSTRAINTS_ATTR,
    ERROR_ATTR,
    HASH_ATTR,
    METRICS_ATTR,
    RUN_ATTR,
    SURPLUS_ATTR,
)

PLOT_Y, PLOT_X = "val_auc", "embedding_bytes"


@dataclass
class StudySummary:
    """Counts, the Pareto front, the best trials and the files written."""

    name: str
    counts: dict[str, int]
    pareto: list[int]
    best: list[int]
    files: list[Path] = field(default_factory=list)
    best_configs: list[Path] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


def trial_method(spec: StudySpec, trial: FrozenTrial) -> str:
    if METHOD_PARAM in trial.params and spec.space.multi_method:
        return str(trial.params[METHOD_PARAM])
    if spec.space.methods:
        return next(iter(spec.space.methods))
    return spec.base.embedding.name


def feasible(trial: FrozenTrial) -> bool:
    violations = trial.user_attrs.get(CONSTRAINTS_ATTR) or []
    return all(v <= 0 for v in violations)


def completed(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    return [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get(METRICS_ATTR)]


def pareto_front(
    trials: Sequence[FrozenTrial], metrics: Sequence[tuple[str, str]]
) -> list[FrozenTrial]:
    """The feasible complete trials no other one dominates on ``metrics`` ((name, direction)
    pairs), in trial-number order."""
    pool = [t for t in completed(trials) if feasible(t)]

    def key(t: FrozenTrial) -> list[float]:
        m = t.user_attrs[METRICS_ATTR]
        return [-m[name] if direction == "maximize" else m[name] for name, direction in metrics]

    points = [(t, key(t)) for t in pool]
    front = []
    for t, p in points:
        dominated = any(
            all(a <= b for a, b in zip(q, p, strict=True))
            and any(a < b for a, b in zip(q, p, strict=True))
            for _, q in points
        )
        if not dominated:
            front.append(t)
    return sorted(front, key=lambda t: t.number)


def best_trials(spec: StudySpec, trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """Best feasible trials first; duplicates of one config (a re-queued trial) once."""
    first = spec.objectives[0]
    sign = -1.0 if first.direction == "maximize" else 1.0
    if spec.multi_objective:
        pool = pareto_front(trials, [(o.metric, o.direction) for o in spec.objectives])
    else:
        pool = [t for t in completed(trials) if feasible(t)]
    ranked = sorted(pool, key=lambda t: (sign * t.user_attrs[METRICS_ATTR][first.metric], t.number))
    seen: set[str] = set()
    out = []
    for t in ranked:
        digest = t.user_attrs.get(HASH_ATTR, str(t.number))
        if digest not in seen:
            seen.add(digest)
            out.append(t)
    return out


def trials_table(spec: StudySpec, trials: Sequence[FrozenTrial], pareto: set[int]) -> Any:
    """A pandas DataFrame, one row per trial (surplus trials, never run, left out)."""
    import pandas as pd

    objective_names = [o.metric for o in spec.objectives]
    rows = []
    for t in trials:
        if t.user_attrs.get(SURPLUS_ATTR):
            continue
        metrics = t.user_attrs.get(METRICS_ATTR) or {}
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "method": trial_method(spec, t),
            "feasible": feasible(t) if metrics else None,
            "pareto": t.number in pareto,
        }
        for name in objective_names:
            row[name] = metrics.get(name)
        for name in sorted(metrics):
            if name not in objective_names:
                row[name] = metrics[name]
        for key, value in spec.space.overrides_from_params(t.params).items() if t.params else []:
            if key != "embedding.name":
                row[key] = value
        row["config_hash"] = t.user_attrs.get(HASH_ATTR)
        row["mlflow_run_id"] = t.user_attrs.get(RUN_ATTR)
        row["retry_of"] = t.system_attrs.get("failed_trial")
        row["duration_s"] = t.duration.total_seconds() if t.duration else None
        row["error"] = t.user_attrs.get(ERROR_ATTR)
        rows.append(row)
    return pd.DataFrame(rows)


def plot_front(spec: StudySpec, table: Any, out: Path) -> list[Path]:
    """:func:`front_figure` of the complete trials, written by
    ``suite.figures.save_figure`` (PNG at 300 dpi, PDF, SVG); ``[]`` without any."""
    if table.empty or PLOT_X not in table or PLOT_Y not in table:
        return []
    done = table[table["state"] == "COMPLETE"].dropna(subset=[PLOT_X, PLOT_Y])
    if done.empty:
        return []
    from suite.figures import save_figure

    return save_figure(front_figure(spec, done), out)


def front_figure(spec: StudySpec, done: Any) -> Any:
    """Validation AUC against embedding memory in MiB, one colour per method (the suite's
    palette), the Pareto front highlighted, a memory limit dashed; the axis is logarithmic
    only when the memory spans more than a factor of 10; the legend sits outside the axes.

    ``done``: the trials table's complete rows. Returns the Figure.
    """
    import seaborn as sns
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    from suite.figures import MIB, color, label

    methods = sorted(done["method"].unique())
    names = {m: label(m) for m in methods}
    done = done.assign(
        feasible=done["feasible"].map({True: "feasible", False: "infeasible"}),
        method=done["method"].map(names),
        MiB=done[PLOT_X] / MIB,
    )
    styles = {}
    if (done["feasible"] == "infeasible").any():
        styles = {
            "style": "feasible",
            "style_order": ["feasible", "infeasible"],
            "markers": {"feasible": "o", "infeasible": "X"},
        }
    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    sns.scatterplot(
        data=done,
        x="MiB",
        y=PLOT_Y,
        hue="method",
        hue_order=[names[m] for m in methods],
        palette={names[m]: color(m) for m in methods},
        s=50,
        alpha=0.85,
        ax=ax,
        **styles,
    )
    front = done[done["pareto"]].sort_values("MiB")
    if not front.empty:
        ax.step(
            front["MiB"], front[PLOT_Y], where="post", color="black", lw=1.2, label="Pareto front"
        )
        ax.scatter(
            front["MiB"], front[PLOT_Y], facecolors="none", edgecolors="black", s=110, lw=1.2
        )
    for c in spec.constraints:
        if c.metric == PLOT_X and c.max is not None:
            limit = c.max / MIB
            ax.axvline(limit, color="grey", ls="--", lw=1, label=f"memory limit {limit:.3g} MiB")
    if done["MiB"].max() > 10 * max(done["MiB"].min(), 1.0 / MIB):
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("embedding memory (MiB)")
    ax.set_ylabel("validation AUC")
    ax.set_title(
        f"Validation AUC vs embedding memory: study {spec.name} ({len(done)} complete trials)"
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    return fig


def _write_text(path: Path, text: str) -> Path:
    return write_text_atomic(path, text, "--out")


def export_config(spec: StudySpec, trial: FrozenTrial, path: Path) -> Path:
    """The trial's full resolved run config, re-runnable with ``suite run --config``."""
    config = spec.trial_config(spec.space.overrides_from_params(trial.params))
    metrics = trial.user_attrs.get(METRICS_ATTR) or {}
    figures = ", ".join(
        f"{o.metric}={metrics[o.metric]:.6g}" for o in spec.objectives if o.metric in metrics
    )
    header = (
        f"# study {spec.name}, trial {trial.number}: {figures}\n"
        f"# config hash {config.config_hash()}; run it with: suite run --config {path.name}\n"
    )
    return _write_text(path, header + config.to_yaml())


def summarize(spec: StudySpec, study: optuna.Study, out_dir: Path) -> StudySummary:
    """Write the summary files; return what they hold."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trials = study.get_trials(deepcopy=False)
    counts = {state.name.lower(): 0 for state in TrialState}
    for t in trials:
        if not t.user_attrs.get(SURPLUS_ATTR):
            counts[t.state.name.lower()] += 1
    plot_metrics = [(PLOT_Y, "maximize"), (PLOT_X, "minimize")]
    if spec.multi_objective:
        front = pareto_front(trials, [(o.metric, o.direction) for o in spec.objectives])
    else:
        front = pareto_front(trials, plot_metrics)
    pareto = {t.number for t in front}
    table = trials_table(spec, trials, pareto)
    files = [_write_text(out_dir / "trials.csv", table.to_csv(index=False))]
    if not table.empty:
        files.append(
            _write_text(out_dir / "pareto.csv", table[table["pareto"]].to_csv(index=False))
        )
    files.extend(plot_front(spec, table, out_dir / "pareto.png"))
    for old in out_dir.glob("best-*.yaml"):
        old.unlink()
    best = best_trials(spec, trials)[: spec.export.best]
    configs = [export_config(spec, t, out_dir / f"best-{k}.yaml") for k, t in enumerate(best, 1)]
    metrics: dict[str, float] = {
        f"trials_{k}": float(v) for k, v in counts.items() if k != "waiting"
    }
    metrics["pareto_size"] = float(len(front))
    if best:
        top = best[0].user_attrs[METRICS_ATTR]
        for o in spec.objectives:
            metrics[f"best_{o.metric}"] = float(top[o.metric])
    return StudySummary(
        name=spec.name,
        counts=counts,
        pareto=sorted(pareto),
        best=[t.number for t in best],
        files=files,
        best_configs=configs,
        metrics=metrics,
    )
