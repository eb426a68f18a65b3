"""Judging claims on per-seed figures: intervals, paired differences, three verdicts.

Every run of a profile runs under the same seeds, so the figures of two runs pair by seed.
A comparative claim is judged on the CI of the paired differences, a threshold claim on
the CI of the mean, a scaling claim on bootstrap CIs of fitted curves (``suite.stats``).
A comparison of two runs' test AUCs also gets DeLong's test on each seed's test set (the
two runs' predictions on the same examples), shown beside the verdict it does not change.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from suite.reproduce.spec import Claim, Operand
from suite.stats import (
    LEVEL,
    Interval,
    ScalingFit,
    Verdict,
    bootstrap_ci,
    bootstrap_indices,
    delong_test,
    fit_scaling,
    mean_ci,
    verdict,
)

SeedFigures = dict[str, dict[int, dict[str, float]]]
"""Measured metrics by run id and seed: ``figures["qr_4"][3]["test_auc"]``."""

DIRECTION = {
    "greater": "greater",
    "at_least": "greater",
    "less": "less",
    "at_most": "less",
    "within": "within",
}
BOOTSTRAP_RESAMPLES = 1000
COMPUTE_METRIC = "training_flops"
AUC_METRIC = "test_auc"

Predictions = Callable[[str, int], tuple[np.ndarray, np.ndarray] | None]
"""``predictions(run, seed)``: that run's test ``(labels [N], logits [N])`` under that seed,
or None if the run kept none."""


@dataclass(frozen=True)
class ClaimOutcome:
    """A claim, the intervals it was judged on, and its verdict.

    ``left``/``right``: mean and CI of each side over seeds (for scaling claims, the
    families' fitted figure); ``right`` is ``None`` and ``target`` set for a threshold.
    ``difference``: CI of the paired differences ``left - right`` (``None`` for a threshold).
    """

    claim: Claim
    verdict: Verdict
    left: Interval
    right: Interval | None
    difference: Interval | None
    p_value: float
    target: float | None = None
    note: str = ""
    delong: dict[int, float] = field(default_factory=dict)
    """DeLong p-value of ``AUC(left) == AUC(right)`` on each seed's test set, by seed
    (comparisons of two runs' test AUCs only)."""
    timing: bool = False
    """The claim rests on a machine-dependent figure (a metric of kind ``measured``)."""


def _nan_interval(n: int = 0) -> Interval:
    return Interval(math.nan, math.nan, math.nan, n)


def common_seeds(figures: SeedFigures, runs: list[str]) -> list[int]:
    """Seeds every one of ``runs`` has, sorted (the pairing of the claim's values)."""
    sets = [set(figures.get(r, {})) for r in runs]
    return sorted(set.intersection(*sets)) if sets else []


def resolve(operand: Operand, figures: SeedFigures, seeds: list[int]) -> np.ndarray:
    """The values ``[len(seeds)]`` an operand stands for, seed by seed (NaN where missing)."""
    if isinstance(operand, int | float):
        return np.full(len(seeds), float(operand))
    if isinstance(operand, str):
        run, metric = operand.split(".", 1)
        per_seed = figures.get(run, {})
        return np.array(
            [float(per_seed.get(s, {}).get(metric, math.nan)) for s in seeds], dtype=np.float64
        )
    ((kind, (a, b)),) = operand.items()
    x, y = resolve(a, figures, seeds), resolve(b, figures, seeds)
    if kind == "ratio":
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(y != 0, x / y, math.nan)
    return x - y


def _interval(values: np.ndarray, method: str) -> Interval:
    return (
        bootstrap_ci(values, resamples=BOOTSTRAP_RESAMPLES)
        if method == "bootstrap"
        else mean_ci(values)
    )


def _t_p_value(values: np.ndarray, target: float) -> float:
    from scipy import stats

    if len(values) < 2:
        return math.nan
    if float(values.std(ddof=1)) == 0.0:
        return 0.0 if float(values.mean()) != target else 1.0
    return float(stats.ttest_1samp(values, target).pvalue)


def auc_runs(claim: Claim) -> tuple[str, str] | None:
    """The two runs a claim compares by their test AUCs (``a.test_auc`` against
    ``b.test_auc``), or None for any other claim."""
    if not claim.comparative or not (isinstance(claim.left, str) and isinstance(claim.right, str)):
        return None
    (left, left_metric), (right, right_metric) = (
        side.split(".", 1) for side in (claim.left, claim.right)
    )
    return (left, right) if left_metric == right_metric == AUC_METRIC else None


def delong_per_seed(
    claim: Claim, predictions: Predictions, seeds: list[int]
) -> tuple[dict[int, float], str]:
    """DeLong's p-value of the claim's two test AUCs under each seed, and a note where a
    seed's predictions are missing or the two runs were tested on different examples."""
    runs = auc_runs(claim)
    if runs is None:
        return {}, ""
    found: dict[int, float] = {}
    for seed in seeds:
        left, right = (predictions(run, seed) for run in runs)
        if left is None or right is None:
            return {}, f"DeLong: no test predictions kept for seed {seed}"
        if left[0].shape != right[0].shape or not np.array_equal(left[0], right[0]):
            return {}, f"DeLong: the two runs' test sets differ (seed {seed})"
        found[seed] = delong_test(left[0], left[1], right[1]).p_value
    return found, ""


def evaluate(
    claim: Claim, figures: SeedFigures, predictions: Predictions | None = None
) -> ClaimOutcome:
    """Judge a comparative or threshold claim on per-seed figures; with ``predictions``, a
    comparison of test AUCs also gets DeLong's test on each paired seed."""
    runs = sorted({ref.split(".", 1)[0] for ref in claim.references()})
    seeds = common_seeds(figures, runs)
    left = resolve(claim.left, figures, seeds)
    direction = DIRECTION[claim.kind]
    if claim.comparative:
        right = resolve(claim.right, figures, seeds)
        if np.isnan(left).any() or np.isnan(right).any() or len(seeds) < 2:
            return _unmeasured(claim, seeds, "a figure is missing or fewer than two seeds")
        diff = left - right
        difference = _interval(diff, claim.ci)
        delong, note = delong_per_seed(claim, predictions, seeds) if predictions else ({}, "")
        return ClaimOutcome(
            claim,
            verdict(difference, direction, claim.margin),  # type: ignore[arg-type]
            _interval(left, claim.ci),
            _interval(right, claim.ci),
            difference,
            _t_p_value(diff, 0.0),
            note=note,
            delong=delong,
        )
    target = float(claim.right)  # type: ignore[arg-type]
    if np.isnan(left).any() or len(seeds) < 2:
        return _unmeasured(claim, seeds, "a figure is missing or fewer than two seeds", target)
    mean = _interval(left, claim.ci)
    return ClaimOutcome(
        claim,
        verdict(mean, direction, claim.margin, target),  # type: ignore[arg-type]
        mean,
        None,
        None,
        _t_p_value(left, target),
        target,
    )


def _unmeasured(
    claim: Claim, seeds: list[int], note: str, target: float | None = None
) -> ClaimOutcome:
    return ClaimOutcome(
        claim, "not measurable", _nan_interval(len(seeds)), None, None, math.nan, target, note
    )


# --- scaling claims ---------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyPoints:
    """A family's points: compute ``[P]`` and the metric ``[P, S]`` under paired seeds."""

    members: list[str]
    compute: np.ndarray
    values: np.ndarray


def family_points(
    family: str, members: list[str], figures: SeedFigures, metric: str, seeds: list[int]
) -> FamilyPoints:
    runs = [f"{family}/{m}" for m in members]
    compute = np.array(
        [np.mean(resolve(f"{r}.{COMPUTE_METRIC}", figures, seeds)) for r in runs], dtype=np.float64
    )
    values = np.vstack([resolve(f"{r}.{metric}", figures, seeds) for r in runs])
    return FamilyPoints(members, compute, values)


def fit_family(points: FamilyPoints, seed: int = 0) -> ScalingFit:
    """``metric = L_inf + a C^-b`` with a bootstrap over seeds and points (seeded plan, so
    two families with as many points and seeds are resampled alike)."""
    plan = bootstrap_indices(len(points.compute), points.values.shape[1], BOOTSTRAP_RESAMPLES, seed)
    return fit_scaling(points.compute, points.values, plan=plan)


def _fit_note(name: str, fit: ScalingFit) -> str:
    f = fit.fit
    return (
        f"{name}: R²={f.r2:.2f} on {f.points} points, {fit.failed:.0%} of bootstrap fits failed"
        if not math.isnan(f.r2)
        else f"{name}: no fit on {f.points} points"
    )


def _bootstrap_p(draws: np.ndarray) -> float:
    """Two-sided bootstrap p-value of ``draws`` centring on zero."""
    draws = draws[np.isfinite(draws)]
    if len(draws) == 0:
        return math.nan
    return float(min(1.0, 2 * min((draws <= 0).mean(), (draws >= 0).mean())))


def _percentile(centre: float, draws: np.ndarray, n: int) -> Interval:
    """Percentile interval of bootstrap ``draws`` over ``n`` seeds."""
    draws = draws[np.isfinite(draws)]
    if len(draws) < 2:
        return _nan_interval(n)
    low, high = np.quantile(draws, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return Interval(centre, float(low), float(high), n)


def evaluate_scaling(
    claim: Claim,
    families: dict[str, list[str]],
    figures: SeedFigures,
    cache: dict[tuple[str, str], ScalingFit] | None = None,
) -> tuple[ClaimOutcome, dict[str, ScalingFit]]:
    """Judge an ``exponent_greater`` or ``less_at_compute`` claim; also return the fits
    (``cache``, keyed by family and metric, saves refitting a family several claims share)."""
    names = claim.families()
    runs = [f"{f}/{m}" for f in names for m in families[f]]
    seeds = common_seeds(figures, runs)
    points = {f: family_points(f, families[f], figures, claim.metric, seeds) for f in names}
    if len(seeds) < 2 or any(np.isnan(p.values).any() for p in points.values()):
        return _unmeasured(claim, seeds, "a figure is missing or fewer than two seeds"), {}
    cache = {} if cache is None else cache
    fits = {}
    for f in names:
        if (f, claim.metric) not in cache:
            cache[(f, claim.metric)] = fit_family(points[f])
        fits[f] = cache[(f, claim.metric)]
    left, right = (fits[f] for f in names)
    note = "; ".join(_fit_note(f, fits[f]) for f in names)
    if not (left.measurable and right.measurable):
        outcome = ClaimOutcome(
            claim, "not measurable", left.exponent, right.exponent, None, math.nan, None,
            "fit fails the quality gate (" + note + ")",
        )  # fmt: skip
        return outcome, fits
    paired = len(left.replicates) == len(right.replicates)
    if claim.kind == "exponent_greater":
        draws = left.replicates[:, 2] - right.replicates[:, 2] if paired else np.array([])
        difference = _percentile(left.fit.b - right.fit.b, draws, len(seeds))
        lo, hi = left.exponent, right.exponent
        result: Verdict = (
            "holds" if lo.low > hi.high else "does not hold" if lo.high < hi.low else "inconclusive"
        )
        return ClaimOutcome(
            claim, result, lo, hi, difference, _bootstrap_p(draws), None, note
        ), fits
    at = float(min(points[names[0]].compute.max(), points[names[1]].compute.max()))
    left_at, right_at = left.predict_interval(at), right.predict_interval(at)
    draws = _predictions(left.replicates, at) - _predictions(right.replicates, at) if paired else []
    difference = _percentile(left_at.mean - right_at.mean, np.asarray(draws), len(seeds))
    result = verdict(difference, "less", claim.margin)
    note = f"at C = {at:.3g} FLOPs; " + note
    return (
        ClaimOutcome(claim, result, left_at, right_at, difference, _bootstrap_p(np.asarray(draws)), None, note),
        fits,
    )  # fmt: skip


def _predictions(replicates: np.ndarray, compute: float) -> np.ndarray:
    return replicates[:, 0] + replicates[:, 1] * compute ** (-replicates[:, 2])


def describe(claim: Claim) -> str:
    """The comparison in words and symbols, e.g. ``qr_4.test_auc - hash_4.test_auc > 0.001``."""

    def name(operand: Operand) -> str:
        if isinstance(operand, dict):
            ((kind, (a, b)),) = operand.items()
            return f"{a} / {b}" if kind == "ratio" else f"({a} - {b})"
        return str(operand)

    left, right, m = name(claim.left), name(claim.right), claim.margin
    if claim.kind == "exponent_greater":
        return f"CI of b({left}) above CI of b({right}), {claim.metric} = L∞ + a·C^-b"
    if claim.kind == "less_at_compute":
        return f"fitted {claim.metric}: {left} < {right} - {m:g} at matched compute"
    if claim.comparative:
        diff = f"{left} - {right}"
        return {
            "greater": f"{diff} > {m:g}",
            "at_least": f"{diff} >= {m:g}",
            "less": f"{diff} < -{m:g}",
            "at_most": f"{diff} <= {m:g}",
            "within": f"|{diff}| <= {m:g}",
        }[claim.kind]
    return {
        "greater": f"{left} > {right}" + (f" + {m:g}" if m else ""),
        "at_least": f"{left} >= {right}",
        "less": f"{left} < {right}" + (f" - {m:g}" if m else ""),
        "at_most": f"{left} <= {right}",
        "within": f"|{left} - {right}| <= {m:g}",
    }[claim.kind]
