"""Every compression method at the same memory: AUC against total bytes, ranked per budget.

This module ranks the measured curve (:func:`curve_data`); its points' options are planned
in :mod:`suite.reproduce.plan` (:func:`~suite.reproduce.plan.with_budget_options`), its
figure is :func:`suite.reproduce.plots.curve_figure` and its section of the report
:func:`suite.reproduce.report.curve_section`.

A spec's ``curve`` (``suite.reproduce.spec``) runs each method at ``1/b`` of its reference
run's total embedding bytes (``embedding_total_bytes``: parameters, index, utilities and
sparse optimizer state), the options chosen by the method's own ``options_at_budget``
(``suite.embeddings.budget``) on the run's data and under its sparse optimizer. The report's curve section has:

- one plot per dataset: test AUC (mean, 90% CI) against total bytes, log x, a colour per
  method (``suite.figures``), the reference as a dashed line;
- a table per budget: mean test AUC [90% CI: seed spread plus the test set's shared DeLong
  variance], rank, and how each method stands against the best at that budget:
  ``below the best`` when the method is shown more than 0.001 below the best (a
  selection-aware test, :func:`below_best_p`: the best is picked from the same data, so
  every other method may be the one it falls short of), ``equivalent to the best`` when
  TOST (``suite.decisions``) puts ``|best - m| <= 0.001`` on the paired per-seed
  differences, ``indistinguishable`` when neither holds (family-wise 5% over the dataset's
  table for each of the two verdicts); the methods chosen and their bytes; the train
  step cost against the reference's, ``reference samples/s / method samples/s`` per seed,
  both measured in the same reproduction on the same machine, marked when the two
  trained in different sittings (the ratio then carries the machine's drift too);
- a "which method when" paragraph generated from the table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from suite.decisions import ALPHA, INTERVAL_LEVEL, Noise, decide, holm, noise_of, t_quantile
from suite.reproduce.outcome import PaperOutcome, SeededRun, stretch_of
from suite.reproduce.spec import Curve

MARGIN = 0.001
"""The field's practical AUC difference."""
TestVariance = Callable[[str, str], tuple[float, int]]
"""``(left, right) -> (shared test variance, test rows)`` of ``AUC(left) - AUC(right)``
(``right == ""``: of ``AUC(left)``); ``(0, 0)`` where unknown."""


# ------------------------------------------------------------------------------- ranking


@dataclass(frozen=True)
class Standing:
    """One method at one budget: its AUC and how it stands against the best there.

    ``auc``, ``low``, ``high``: mean test AUC over seeds and its 90% interval; ``rank``: 1
    for the best (highest mean); ``p_below``: the selection-aware p of "more than
    :data:`MARGIN` below the best" (:func:`below_best_p`; from :func:`rank_budget` over the
    budget's methods, from :func:`rank_curve` also Bonferroni over the table's budgets; NaN
    for the best and where not measurable); ``p_equivalent``: TOST's p of ``|best - m| <=
    MARGIN`` (raw from :func:`rank_budget`, Holm over the table from :func:`rank_curve`).
    """

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
    """Mean of per-seed ``values [n]`` and its 90% interval (``INTERVAL_LEVEL``), the test set's shared
    variance ``test_var`` added to the seed spread (``suite.decisions``)."""
    noise = noise_of(values, test_var, rows)
    mean = float(np.mean(values)) if values else math.nan
    if noise.n < 2:
        return mean, math.nan, math.nan
    half = t_quantile(0.5 + INTERVAL_LEVEL / 2, noise.dof()) * math.sqrt(noise.variance())
    return mean, mean - half, mean + half


def rival_p(
    values: ArrayLike, test_var: ArrayLike | None = None, margin: float = MARGIN
) -> NDArray[np.float64]:
    """One-sided p's of "method ``j`` beats method ``i`` by more than ``margin``" for every
    ordered pair, on the paired differences over the seeds both have.

    ``values [..., k, n]``: per-seed test AUCs of ``k`` methods on ``n`` seeds (NaN: seed
    not run); ``test_var [..., k, k]``: the shared test-set variance of ``AUC(j) - AUC(i)``
    (0 where unknown). Returns ``p [..., k, k]``, ``p[..., j, i]`` the p of ``H0: mu_j -
    mu_i <= margin`` by the suite's paired test (``SE^2 = s^2/n + v``, ``suite.decisions``)
    on the seeds' ``n - 1`` degrees of freedom; NaN on the diagonal and where the pair has
    fewer than two common seeds. ``n - 1`` rather than Welch-Satterthwaite's estimated dof:
    that dof grows when ``s^2`` comes out small, so in the far tail, where the family's
    Bonferroni steps test, it rejects too often (simulated, ``v`` a tenth to a third of
    ``s^2/n``: 1.2x its level at ``p < 0.0025``, 1.4x at ``p < 0.001``), while ``t`` on
    ``n - 1`` stays within its level for every ``v`` (``v`` only thins the tails).
    """
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    k = x.shape[-2]
    d = x[..., :, None, :] - x[..., None, :, :]  # [..., j, i, n]: AUC(j) - AUC(i)
    ok = ~np.isnan(d)
    n = ok.sum(axis=-1)
    v = np.zeros(()) if test_var is None else np.asarray(test_var, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(ok, d, 0.0).sum(axis=-1) / n
        spread = np.where(ok, d - mean[..., None], 0.0)
        seed_var = (spread**2).sum(axis=-1) / (n - 1)
        se = np.sqrt(seed_var / n + v)
        p = stats.t.sf((mean - margin) / se, np.maximum(n - 1, 1))
    p = np.where(se == 0, np.where(mean > margin, 0.0, 1.0), p)  # exact figures, as decide
    return np.where((n < 2) | np.eye(k, dtype=bool), np.nan, p)


def below_best_p(
    values: ArrayLike, test_var: ArrayLike | None = None, margin: float = MARGIN
) -> NDArray[np.float64]:
    """Selection-aware p's ``[..., k]`` of "method ``i`` is more than ``margin`` below the
    best of the ``k``" (``values``, ``test_var`` as in :func:`rival_p`).

    The best is picked from the same data it would be tested against, so a test of each
    method against the observed best is biased: with 3 (5) methods truly tied, Holm over
    those tests calls one of them below the best 12% (15%) of the time, not 5%; with 3 tied
    and 3 exactly ``margin`` below them, one of the six "more than ``margin`` below" 6-7%
    of the time (``tests/test_curve_selection.py``'s budgets). Instead each method's
    hypothesis ``H_i: mu_i >= max_j mu_j - margin`` is tested against every rival: Bonferroni
    over the rivals' :func:`rival_p` (``min(1, (k-1) min_j p[j, i])``), Holm over the ``k``
    methods, the best's own hypothesis counted too. This is the closed test (Marcus, Peritz
    and Gabriel 1976) of those hypotheses with Bonferroni local tests, so the chance of
    calling any method within ``margin`` of the best "below" stays under 5% whatever the
    means and correlations. It is what Hsu's comparisons with the best (Hsu 1996,
    *Multiple Comparisons*, ch. 4) become for this question: MCB's one-sided Dunnett
    critical value guards only against inferring that the true best is not the best, and
    calls one of 3 (5) truly tied methods "not the best" 13% (19%) of the time; sparing
    every tied method needs the range of the ``k`` means, whose exact 95% point (2.34 and
    2.73 standard errors for 3 and 5) this Bonferroni bound exceeds by 2-3%.
    """
    p = rival_p(values, test_var, margin)
    rivals = (~np.isnan(p)).sum(axis=-2)
    least = np.fmin.reduce(p, axis=-2)  # NaN only where no rival is measurable
    single = np.minimum(1.0, rivals * least)
    return np.apply_along_axis(holm, -1, single)


def rank_budget(
    budget: int, aucs: dict[str, dict[int, float]], test_var: TestVariance | None = None
) -> list[Standing]:
    """The methods at one budget, best first: ``aucs`` maps method -> seed -> test AUC.
    ``p_below`` is :func:`below_best_p` over the budget's methods (every pair on its common
    seeds); ``p_equivalent`` the raw TOST p against the best on the paired differences over
    their common seeds (:func:`rank_curve` adjusts both over the table)."""
    var = test_var or (lambda left, right: (0.0, 0))
    rows = []
    for method, per_seed in aucs.items():
        mean, low, high = auc_interval(list(per_seed.values()), *var(method, ""))
        rows.append(Standing(method, budget, mean, low, high))
    rows.sort(key=lambda s: (-s.auc, s.method))
    if not rows:
        return rows
    methods = [s.method for s in rows]
    seeds = sorted({seed for m in methods for seed in aucs[m]})
    values = np.array([[aucs[m].get(seed, math.nan) for seed in seeds] for m in methods])
    shared = np.zeros((len(methods), len(methods)))
    for a, b in combinations(range(len(methods)), 2):
        shared[a, b] = shared[b, a] = var(methods[a], methods[b])[0]
    p_below = below_best_p(values, shared)
    best = rows[0]
    out = [replace(best, rank=1, verdict="best")]
    for rank, row in enumerate(rows[1:], start=2):
        seeds_both = sorted(set(aucs[best.method]) & set(aucs[row.method]))
        diffs = [aucs[best.method][s] - aucs[row.method][s] for s in seeds_both]
        noise: Noise = noise_of(diffs, *var(best.method, row.method))
        estimate = float(np.mean(diffs)) if diffs else math.nan
        same = decide(estimate, noise, "within", MARGIN)
        below = float(p_below[rank - 1])
        out.append(replace(row, rank=rank, p_below=below, p_equivalent=same.p_holds))
    return out


def rank_curve(standings: list[list[Standing]]) -> list[list[Standing]]:
    """Each budget's :func:`rank_budget` rows with verdicts, each verdict's error held at
    5% over the whole table: ``p_below`` times the number of budgets with a comparison
    (Bonferroni: the budgets share the test set and the seeds), ``p_equivalent``
    Holm-adjusted over the table's comparisons."""
    flat = [s for rows in standings for s in rows if s.rank > 1]
    budgets = sum(any(not math.isnan(s.p_below) for s in rows[1:]) for rows in standings)
    same = iter(holm([s.p_equivalent for s in flat]))
    adjusted = {id(s): next(same) for s in flat}
    out = []
    for rows in standings:
        ranked = []
        for s in rows:
            if s.rank == 1:
                ranked.append(s)
                continue
            p_below = s.p_below if math.isnan(s.p_below) else min(1.0, budgets * s.p_below)
            p_same = adjusted[id(s)]
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


def test_variance(outcome: PaperOutcome) -> TestVariance:
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


APART = "‡"
"""Marks a step cost whose method and reference runs trained in different sittings."""


def sittings_apart(outcome: PaperOutcome) -> Callable[[str, str], bool]:
    """``apart(a, b)``: whether runs ``a`` and ``b`` trained some common seed in different
    stretches of work (:func:`~suite.reproduce.outcome.stretch_of`), so that a ratio of
    their rates also carries the machine's drift between the two sittings."""
    keys = [(run_id, seed) for run_id, rec in outcome.runs.items() for seed in rec.results]
    results = [outcome.runs[run_id].results[seed] for run_id, seed in keys]
    stretch = dict(zip(keys, stretch_of(results), strict=True))

    def apart(a: str, b: str) -> bool:
        pairs = [(stretch.get((a, s)), stretch.get((b, s))) for s in outcome.runs[a].results]
        return any(x is not None and y is not None and x != y for x, y in pairs)

    return apart


@dataclass
class CurveData:
    """One spec's curve as measured: per dataset, standings and the absent points."""

    curve: Curve
    dataset: str
    records: dict[tuple[str, int], SeededRun]
    absent: dict[int, dict[str, str]]
    standings: list[list[Standing]]
    reference: SeededRun


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


def curve_data(outcome: PaperOutcome) -> CurveData | None:
    """The curve of a :class:`~suite.reproduce.outcome.PaperOutcome`, ranked; a point it
    lacks is absent with the plan's reason (``not run`` where the plan reaches it)."""
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
            reason = outcome.unreachable.get(run_id, "not run")
            absent.setdefault(budget, {})[method] = reason
    var = test_variance(outcome)
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


def curve_plot_name(paper: str, dataset: str) -> str:
    return f"curve_{paper}_{dataset}"
