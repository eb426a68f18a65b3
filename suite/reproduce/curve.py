"""Every compression method at the same memory: AUC against total bytes, ranked per budget.

A spec's ``curve`` (``suite.reproduce.spec``) runs each method at ``1/b`` of its reference
run's total embedding bytes (``embedding_total_bytes``: parameters, index, utilities and
sparse optimizer state), the options chosen by the method's own ``options_at_budget``
(``suite.embeddings.budget``) on the run's data and under its sparse optimizer. The report's curve section has:

- one plot per dataset: test AUC (mean, 95% CI) against total bytes, log x, a colour per
  method (``suite.figures``), the reference as a dashed line;
- a table per budget: mean test AUC [95% CI: seed spread plus the test set's shared DeLong
  variance], rank, and how each method stands against the best at that budget by the
  suite's decisions (``suite.decisions``) on the paired per-seed differences ``best - m``:
  ``below the best`` when ``best - m > 0.001`` holds, ``equivalent to the best`` when
  TOST puts ``|best - m| <= 0.001``, ``indistinguishable`` when neither does (both p's
  Holm-adjusted over the dataset's table); the methods chosen and their bytes; the train
  step cost against the reference's, ``reference samples/s / method samples/s`` per seed,
  both measured in the same reproduction on the same machine, marked when the two
  trained in different sittings (the ratio then carries the machine's drift too);
- a "which method when" paragraph generated from the table.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from suite.config import deep_merge, validate_config
from suite.decisions import ALPHA, Noise, decide, holm, noise_of, t_quantile
from suite.embeddings.budget import BudgetUnreachable, options_at_budget
from suite.reproduce.outcome import WALL_GAP_S
from suite.reproduce.spec import BUDGET_KEY, Curve

MARGIN = 0.001
"""The field's practical AUC difference."""
LINE = {"fmt": "-o", "capsize": 3, "markersize": 4, "lw": 1.4}
"""How a method's line is drawn on the curve."""
TestVariance = Callable[[str, str], tuple[float, int]]
"""``(left, right) -> (shared test variance, test rows)`` of ``AUC(left) - AUC(right)``
(``right == ""``: of ``AUC(left)``); ``(0, 0)`` where unknown."""


def with_budget_options(data: dict[str, Any], what: str) -> dict[str, Any]:
    """A curve run's config data with its method's options at its budget, chosen on the
    cardinalities of its dataset (prepared now if need be). Raises
    :class:`BudgetUnreachable` where the method cannot come down to the budget."""
    from suite.data.source import get_prepared

    rest = {k: v for k, v in data.items() if k != BUDGET_KEY}
    config = validate_config(rest, what)
    cards = tuple(get_prepared(config.dataset, progress=False).schema.cardinalities)
    dim = int(config.embedding.typed_options().dim)
    optimizer = config.train.sparse_optimizer
    options = _options(config.embedding.name, float(data[BUDGET_KEY]), dim, cards, optimizer)
    return deep_merge(rest, {"embedding": {"options": options}})


@functools.lru_cache(maxsize=256)
def _options(
    name: str, fraction: float, dim: int, cards: tuple[int, ...], optimizer: str
) -> dict[str, Any]:
    return options_at_budget(name, fraction, dim, list(cards), optimizer)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- ranking


@dataclass(frozen=True)
class Standing:
    """One method at one budget: its AUC and how it stands against the best there."""

    method: str
    budget: int
    auc: float
    low: float
    high: float
    rank: int = 0
    verdict: str = ""
    p_below: float = math.nan
    p_equivalent: float = math.nan


def auc_interval(values: list[float], test_var: float, rows: int) -> tuple[float, float, float]:
    """Mean of per-seed ``values [n]`` and its 95% interval, the test set's shared
    variance ``test_var`` added to the seed spread (``suite.decisions``)."""
    noise = noise_of(values, test_var, rows)
    mean = float(np.mean(values)) if values else math.nan
    if noise.n < 2:
        return mean, math.nan, math.nan
    half = t_quantile(0.975, noise.dof()) * math.sqrt(noise.variance())
    return mean, mean - half, mean + half


def rank_budget(
    budget: int, aucs: dict[str, dict[int, float]], test_var: TestVariance | None = None
) -> list[Standing]:
    """The methods at one budget, best first: ``aucs`` maps method -> seed -> test AUC.
    The best (highest mean) is compared with each other method on the paired differences
    over their common seeds; p's are raw here (:func:`rank_curve` Holm-adjusts them)."""
    var = test_var or (lambda left, right: (0.0, 0))
    rows = []
    for method, per_seed in aucs.items():
        mean, low, high = auc_interval(list(per_seed.values()), *var(method, ""))
        rows.append(Standing(method, budget, mean, low, high))
    rows.sort(key=lambda s: (-s.auc, s.method))
    if not rows:
        return rows
    best = rows[0]
    out = [replace(best, rank=1, verdict="best")]
    for rank, row in enumerate(rows[1:], start=2):
        seeds = sorted(set(aucs[best.method]) & set(aucs[row.method]))
        diffs = [aucs[best.method][s] - aucs[row.method][s] for s in seeds]
        shared, test_rows = var(best.method, row.method)
        noise: Noise = noise_of(diffs, shared, test_rows)
        estimate = float(np.mean(diffs)) if diffs else math.nan
        below = decide(estimate, noise, "greater", MARGIN)
        same = decide(estimate, noise, "within", MARGIN)
        out.append(replace(row, rank=rank, p_below=below.p_holds, p_equivalent=same.p_holds))
    return out


def rank_curve(standings: list[list[Standing]]) -> list[list[Standing]]:
    """Each budget's :func:`rank_budget` rows with verdicts, the p's Holm-adjusted over
    the whole table (one family for ``below``, one for ``equivalent``)."""
    flat = [s for rows in standings for s in rows if s.rank > 1]
    below = iter(holm([s.p_below for s in flat]))
    same = iter(holm([s.p_equivalent for s in flat]))
    adjusted = {id(s): (next(below), next(same)) for s in flat}
    out = []
    for rows in standings:
        ranked = []
        for s in rows:
            if s.rank == 1:
                ranked.append(s)
                continue
            p_below, p_same = adjusted[id(s)]
            if p_below < ALPHA:
                verdict = "below the best"
            elif p_same < ALPHA:
                verdict = "equivalent to the best"
            elif math.isnan(p_below):
                verdict = "not measurable"
            else:
                verdict = "indistinguishable"
            ranked.append(replace(s, verdict=verdict, p_below=p_below, p_equivalent=p_same))
        out.append(ranked)
    return out


def ties_with_best(rows: list[Standing]) -> list[str]:
    """The methods one cannot tell from the best at a budget (equivalent or undecided)."""
    return [s.method for s in rows if s.verdict in ("equivalent to the best", "indistinguishable")]


def which_method_when(
    standings: list[list[Standing]], absent: dict[int, dict[str, str]], names: Callable[[str], str]
) -> str:
    """The "which method when" paragraph, generated from the ranked table: the best at
    each budget and who ties with it, the methods absent where they cannot reach, and
    how often each method is best or tied."""
    parts, top = [], {}
    for rows in standings:
        if not rows:
            continue
        best, budget = rows[0], rows[0].budget
        ties = ties_with_best(rows)
        text = f"At 1/{budget} of full's bytes {names(best.method)} is best ({best.auc:.4f})"
        text += (
            f"; {_join([names(m) for m in ties])} cannot be told from it"
            if ties
            else "; every other method is below it by more than 0.001"
        )
        gone = absent.get(budget, {})
        if gone:
            text += f"; {_join([names(m) for m in sorted(gone)])} cannot reach it"
        parts.append(text + ".")
        for method in [best.method, *ties]:
            top[method] = top.get(method, 0) + 1
    if not parts:
        return "No method has figures on the curve yet."
    n = len([rows for rows in standings if rows])
    counts = sorted(top.items(), key=lambda kv: (-kv[1], kv[0]))
    summary = "Best or tied with the best: " + ", ".join(
        f"{names(m)} at {k} of {n} budgets" for m, k in counts
    )
    return " ".join(parts) + " " + summary + "."


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# ------------------------------------------------------------------------------- report


def _test_variance(outcome: Any) -> TestVariance:
    """The DeLong shared variances of the outcome's runs, from the noise its claims were
    judged with (the runs' kept predictions, or the stored noise of a report regenerated
    from stored results); ``(0, 0)`` where there is none."""
    runs, lookup = outcome.runs, outcome.noise
    seeds = sorted({s for rec in runs.values() for s in rec.results})
    curve = outcome.spec.curve
    order = {m: i for i, m in enumerate(curve.methods)} if curve else {}

    def method(run: str) -> int:
        return order.get(run.rsplit("_at_", 1)[0], -1)

    def var(left: str, right: str) -> tuple[float, int]:
        if right and method(left) > method(right):  # stored with the earlier method left
            left, right = right, left
        for seed in seeds:
            known = lookup is not None and left in runs and right in {"", *runs}
            found = lookup(left, right, seed) if known else None
            if found is not None:
                return found.shared, found.rows
        return 0.0, 0

    return var


def _chosen(config: Any) -> str:
    """The options a budget chose (those that differ from the method's defaults)."""
    from suite.registry import EMBEDDINGS

    options = config.embedding.typed_options().model_dump()
    defaults = EMBEDDINGS.get(config.embedding.name).Options().model_dump()
    picked = {k: v for k, v in options.items() if k not in ("dim",) and defaults.get(k) != v}
    return ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in picked.items()
    )


APART = "‡"
"""Marks a step cost whose method and reference runs trained in different sittings."""


def sittings_apart(outcome: Any) -> Callable[[str, str], bool]:
    """``apart(a, b)``: whether runs ``a`` and ``b`` trained some common seed in different
    stretches of work (:func:`~suite.reproduce.outcome.stretch_of`), so that a ratio of
    their rates also carries the machine's drift between the two sittings."""
    from suite.reproduce.outcome import stretch_of

    keys = [(run_id, seed) for run_id, rec in outcome.runs.items() for seed in rec.results]
    results = [outcome.runs[run_id].results[seed] for run_id, seed in keys]
    stretch = dict(zip(keys, stretch_of(results), strict=True))

    def apart(a: str, b: str) -> bool:
        pairs = [(stretch.get((a, s)), stretch.get((b, s))) for s in outcome.runs[a].results]
        return any(x is not None and y is not None and x != y for x, y in pairs)

    return apart


def _step_cost(rec: Any, reference: Any) -> str:
    ratios = [
        reference.results[s].metrics["train_samples_per_s"] / r.metrics["train_samples_per_s"]
        for s, r in rec.results.items()
        if s in reference.results and r.metrics.get("train_samples_per_s")
    ]
    if not ratios:
        return "n/a"
    from suite.stats import mean_ci

    ci = mean_ci(ratios)
    if math.isnan(ci.low):
        return f"{ci.mean:.2f}x"
    return f"{ci.mean:.2f}x [{ci.low:.2f}, {ci.high:.2f}]"


@dataclass
class CurveData:
    """One spec's curve as measured: per dataset, standings and the absent points."""

    curve: Curve
    dataset: str
    records: dict[tuple[str, int], Any]
    absent: dict[int, dict[str, str]]
    standings: list[list[Standing]]
    reference: Any


OVER_BUDGET = 0.05
"""How far over its budget a trained point's measured total bytes may be and still be ranked
(a method's options are chosen to fit the budget; a method that prunes during training,
as FIITED does, holds what it has not pruned yet when a short run ends)."""


def over_budget(total: float, full: float, budget: int) -> str | None:
    """Why a point that trained to ``total`` bytes is not at 1/``budget`` of ``full``'s
    bytes (more than :data:`OVER_BUDGET` over), else None."""
    limit = full / budget
    if not total > limit * (1 + OVER_BUDGET):
        return None
    return (
        f"trained to {total:,.0f} bytes ({total / full:.3f} of full), over the budget of "
        f"{limit:,.0f}: not compared at equal memory"
    )


def curve_data(outcome: Any, overrides: dict[str, Any]) -> CurveData | None:
    """The curve of a :class:`~suite.reproduce.outcome.PaperOutcome`, ranked."""
    from suite.reproduce.plan import run_config

    curve = outcome.spec.curve
    if curve is None or curve.reference not in outcome.runs:
        return None
    records, absent = {}, {}
    budgets = outcome.spec.profiles[outcome.profile].budgets or curve.budgets
    full = outcome.runs[curve.reference].metrics.get("embedding_total_bytes", math.nan)
    for method in curve.methods:
        for budget in budgets:
            run_id = curve.run_id(method, budget)
            if run_id in outcome.runs and outcome.runs[run_id].results:
                total = outcome.runs[run_id].metrics.get("embedding_total_bytes", math.nan)
                reason = over_budget(total, full, budget)
                if reason is None:
                    records[(method, budget)] = outcome.runs[run_id]
                else:
                    absent.setdefault(budget, {})[method] = reason
                continue
            try:
                run_config(outcome.spec, outcome.profile, run_id, overrides)
                reason = "not run"
            except BudgetUnreachable as exc:
                reason = str(exc).split(": ", 1)[-1]
            absent.setdefault(budget, {})[method] = reason
    var = _test_variance(outcome)
    per_budget = []
    for budget in budgets:
        aucs = {
            m: {s: r.metrics["test_auc"] for s, r in records[(m, budget)].results.items()}
            for m in curve.methods
            if (m, budget) in records
        }

        def run_var(left: str, right: str, budget: int = budget) -> tuple[float, int]:
            return var(curve.run_id(left, budget), curve.run_id(right, budget) if right else "")

        per_budget.append(rank_budget(budget, aucs, run_var))
    reference = outcome.runs[curve.reference]
    return CurveData(
        curve, reference.config.dataset.name, records, absent, rank_curve(per_budget), reference
    )


def curve_figure(data: CurveData):  # noqa: ANN201
    """Test AUC (mean, 95% CI) against total embedding bytes (MiB, log), a line per
    method, the reference dashed. Returns the Figure."""
    from suite.figures import MIB, color, label
    from suite.reproduce.plots import _figure, _plain_log_ticks

    fig, ax = _figure()
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
    _plain_log_ticks(ax)
    ax.set_xlabel("total embedding bytes incl. optimizer state (MiB, log scale)")
    ax.set_ylabel("test AUC (mean and 95% CI)")
    ax.set_title(f"Compression methods at equal memory ({data.dataset})")
    ax.legend(fontsize=7, loc="best", title="method", title_fontsize=7)
    return fig


def curve_plot_name(paper: str, dataset: str) -> str:
    return f"curve_{paper}_{dataset}"


def draw_curves(reproduction: Any, out_dir: Path) -> list[str]:
    """Write each spec's curve plot under ``out_dir``; return the PNG names."""
    from suite.figures import save_figure

    names = []
    for outcome in reproduction.papers:
        data = curve_data(outcome, reproduction.overrides)
        if data is None or not any(data.standings):
            continue
        fig = curve_figure(data)
        path = out_dir / curve_plot_name(outcome.spec.paper, data.dataset)
        names.append(save_figure(fig, path)[0].name)
    return names


def curve_section(outcome: Any, overrides: dict[str, Any]) -> list[str]:
    """The report's lines for a spec's curve: plot, ranking table, absences, summary."""
    from suite.figures import label
    from suite.reproduce.report import table

    data = curve_data(outcome, overrides)
    if data is None:
        return []
    full_bytes = data.reference.metrics.get("embedding_total_bytes", math.nan)
    lines = [
        f"### AUC against total bytes ({data.dataset})",
        "",
        f"![curve]({curve_plot_name(outcome.spec.paper, data.dataset)}.png)",
        "",
        f"Budgets 1/b of `{data.curve.reference}`'s total embedding bytes "
        f"({full_bytes:,.0f}); each method's options chosen by its own `options_at_budget`. "
        "vs best: `below the best` when best - method > 0.001 holds, `equivalent to the "
        "best` when TOST puts the difference within +-0.001, `indistinguishable` when "
        "neither test decides (seed spread plus the test set's DeLong variance; both p's "
        "Holm-adjusted over this table). Step cost: reference train samples/s over the "
        "method's, per seed, in this reproduction on this machine [95% CI].",
        "",
    ]
    if _test_variance(outcome)(data.curve.reference, "")[1] == 0:
        lines[-1:-1] = [
            "Test-set noise left out: the runs' test predictions are not here (a report "
            "regenerated from stored results), so the intervals and tests carry the seeds' "
            "spread only.",
            "",
        ]
    apart = sittings_apart(outcome)
    rows = []
    for ranked in data.standings:
        for s in ranked:
            rec = data.records[(s.method, s.budget)]
            total = rec.metrics.get("embedding_total_bytes", math.nan)
            ci = "" if math.isnan(s.low) else f" [{s.low:.4f}, {s.high:.4f}]"
            rows.append(
                {
                    "budget": f"1/{s.budget}",
                    "method": label(s.method),
                    "options": _chosen(rec.config),
                    "total bytes (of full)": f"{total:,.0f} ({total / full_bytes:.3f})",
                    "test AUC [95% CI]": f"{s.auc:.4f}{ci}",
                    "rank": str(s.rank),
                    "vs best (Holm p: > 0.001 below, TOST)": s.verdict
                    + ("" if s.rank == 1 else f" ({s.p_below:.2g}, {s.p_equivalent:.2g})"),
                    "step cost vs full": _step_cost(rec, data.reference)
                    + (
                        f" {APART}"
                        if apart(data.curve.run_id(s.method, s.budget), data.curve.reference)
                        else ""
                    ),
                }
            )
    if rows:
        lines += [table(rows), ""]
    if any(APART in row["step cost vs full"] for row in rows):
        lines += [
            f"{APART} The method's and `{data.curve.reference}`'s runs of a seed trained in "
            "different sittings (stretches of work more than "
            f"{WALL_GAP_S / 60:g} minutes apart), so the ratio carries the machine's drift "
            "between them as well as the step's cost; `benchmarks/bench_curve_steps.py` times "
            "every point of the compression curve side by side with full.",
            "",
        ]
    gone = [
        f"`{m}` at 1/{b}: {why}"
        for b, methods in sorted(data.absent.items())
        for m, why in sorted(methods.items())
    ]
    if gone:
        lines += ["Absent from the curve: " + "; ".join(gone) + ".", ""]
    lines += [
        "**Which method when.** " + which_method_when(data.standings, data.absent, label),
        "",
    ]
    return lines
