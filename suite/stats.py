"""Statistics for comparisons: confidence intervals over seeds, paired differences,
DeLong, scaling fits. Verdicts are decided in :mod:`suite.decisions`.

One small module used by multi-seed runs, reproductions, the leaderboard and ``compare``.
Every comparison rests on several seeds: a single value has no interval (``n < 2`` gives
NaN bounds), so no verdict can rest on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A mean and its confidence interval over ``n`` values (NaN bounds when ``n < 2``)."""

    mean: float
    low: float
    high: float
    n: int
    level: float = LEVEL

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def __str__(self) -> str:
        if math.isnan(self.low):
            return f"{self.mean:.4g} (n={self.n})"
        return f"{self.mean:.4g} ± {self.half_width:.2g} (n={self.n})"


def _values(values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"expected a 1-D sequence of values, got shape {array.shape}")
    return array


def mean_ci(values: Sequence[float] | np.ndarray, level: float = LEVEL) -> Interval:
    """Mean of ``values [n]`` with a Student-t confidence interval (sample std, ddof=1)."""
    from scipy import stats

    x = _values(values)
    n = len(x)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, level)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n, level)
    sem = float(x.std(ddof=1)) / math.sqrt(n)
    if sem == 0.0:
        return Interval(mean, mean, mean, n, level)
    t = float(stats.t.ppf(0.5 + level / 2, df=n - 1))
    return Interval(mean, mean - t * sem, mean + t * sem, n, level)


def paired_differences(left: Sequence[float], right: Sequence[float]) -> np.ndarray:
    """``left[i] - right[i]`` for values paired by seed; both ``[n]``."""
    a, b = _values(left), _values(right)
    if a.shape != b.shape:
        raise ValueError(f"paired values need equal counts, got {len(a)} and {len(b)}")
    return a - b


def paired_ci(left: Sequence[float], right: Sequence[float], level: float = LEVEL) -> Interval:
    """Mean paired difference ``left - right`` over seeds with its t interval."""
    return mean_ci(paired_differences(left, right), level)


def paired_p_value(left: Sequence[float], right: Sequence[float]) -> float:
    """Two-sided paired t-test p-value for ``mean(left - right) == 0`` (NaN when n < 2)."""
    from scipy import stats

    d = paired_differences(left, right)
    if len(d) < 2:
        return math.nan
    if float(d.std(ddof=1)) == 0.0:
        return 0.0 if float(d.mean()) != 0.0 else 1.0
    return float(stats.ttest_1samp(d, 0.0).pvalue)


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    level: float = LEVEL,
    resamples: int = 10_000,
    seed: int = 0,
    statistic: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Interval:
    """Percentile bootstrap interval of ``statistic`` (default the mean) of ``values [n]``.

    For skewed figures (ratios of bytes, losses near a floor) where a t interval's symmetry
    is wrong. Seeded: the same values give the same interval. ``statistic`` maps a
    ``[resamples, n]`` array to ``[resamples]``.
    """
    x = _values(values)
    n = len(x)
    stat = statistic or (lambda a: a.mean(axis=-1))
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, level)
    centre = float(stat(x[None, :])[0])
    if n < 2:
        return Interval(centre, math.nan, math.nan, n, level)
    rng = np.random.default_rng(seed)
    draws = stat(x[rng.integers(0, n, size=(resamples, n))])
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return Interval(centre, float(low), float(high), n, level)


def paired_bootstrap_ci(
    left: Sequence[float], right: Sequence[float], level: float = LEVEL, seed: int = 0
) -> Interval:
    """Bootstrap interval of the mean paired difference ``left - right`` (resampling seeds)."""
    return bootstrap_ci(paired_differences(left, right), level, seed=seed)


# --- DeLong's test for two correlated AUCs (Sun & Xu 2014's O(n log n) midrank form) ---


def midranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x [n]`` with ties sharing their average rank; O(n log n)."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ordered = x[order]
    boundaries = np.flatnonzero(np.diff(ordered)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [len(x)]])
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


@dataclass(frozen=True)
class DeLongResult:
    """Two AUCs on one test set, their difference ``auc_a - auc_b`` and DeLong's test."""

    auc_a: float
    auc_b: float
    difference: Interval
    variance: float
    z: float
    p_value: float


def auc_components(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeLong's structural components (placement values) of one scorer.

    Args:
        labels: ``[N]`` in {0, 1}.
        scores: ``[k, N]`` scores of ``k`` scorers on the same examples.

    Returns:
        ``v10 [k, m]`` over the ``m`` positives and ``v01 [k, n]`` over the ``n``
        negatives; the AUC of scorer ``i`` is ``v10[i].mean() == v01[i].mean()``.
    """
    y = np.asarray(labels).astype(bool).ravel()
    s = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    pos, neg = s[:, y], s[:, ~y]
    m, n = pos.shape[1], neg.shape[1]
    if m == 0 or n == 0:
        raise ValueError("DeLong's test needs both positive and negative examples")
    v10 = np.empty((s.shape[0], m))
    v01 = np.empty((s.shape[0], n))
    for i in range(s.shape[0]):
        tx, ty = midranks(pos[i]), midranks(neg[i])
        tz = midranks(np.concatenate([pos[i], neg[i]]))
        # placement of each positive among the negatives, and of each negative among positives
        v10[i] = (tz[:m] - tx) / n
        v01[i] = 1.0 - (tz[m:] - ty) / m
    return v10, v01


def delong_test(
    labels: Sequence[float],
    scores_a: Sequence[float],
    scores_b: Sequence[float],
    level: float = LEVEL,
) -> DeLongResult:
    """DeLong et al. (1988) test of ``AUC(a) == AUC(b)`` for two scorers of one test set.

    ``labels, scores_a, scores_b``: ``[N]``. Variance from the structural components'
    covariance, ``S10/m + S01/n``; two-sided normal p-value and interval of the difference.
    """
    from scipy import stats

    aucs, cov, rows = _auc_moments(labels, np.vstack([scores_a, scores_b]))
    variance = float(cov[0, 0] + cov[1, 1] - 2 * cov[0, 1])
    diff = float(aucs[0] - aucs[1])
    if variance <= 0:
        z = 0.0 if diff == 0 else math.copysign(math.inf, diff)
        p = 1.0 if diff == 0 else 0.0
        interval = Interval(diff, diff, diff, rows, level)
    else:
        sd = math.sqrt(variance)
        z = diff / sd
        p = float(2 * stats.norm.sf(abs(z)))
        q = float(stats.norm.ppf(0.5 + level / 2))
        interval = Interval(diff, diff - q * sd, diff + q * sd, rows, level)
    return DeLongResult(float(aucs[0]), float(aucs[1]), interval, variance, z, p)


def auc_covariance(labels: Sequence[float], scores: np.ndarray) -> np.ndarray:
    """DeLong's covariance ``[k, k]`` of the AUCs of ``k`` scorers ``scores [k, N]`` on one
    test set ``labels [N]``: ``S10/m + S01/n`` over the structural components."""
    return _auc_moments(labels, scores)[1]


def _auc_moments(labels: Sequence[float], scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``(aucs [k], DeLong covariance [k, k], test rows)`` of ``scores [k, N]``."""
    v10, v01 = auc_components(np.asarray(labels), scores)
    return v10.mean(axis=1), components_covariance(v10, v01), v10.shape[1] + v01.shape[1]


def components_covariance(v10: np.ndarray, v01: np.ndarray) -> np.ndarray:
    """DeLong's covariance ``[k, k]`` from ``k`` scorers' structural components
    ``v10 [k, m]``, ``v01 [k, n]`` (:func:`auc_components`): ``S10/m + S01/n``."""
    return np.atleast_2d(np.cov(v10) / v10.shape[1] + np.cov(v01) / v01.shape[1])


# --- Scaling laws: L = L_inf + a * C^-b, with a bootstrap over seeds and points ---

MIN_FIT_POINTS = 4
MIN_R2 = 0.8


@dataclass(frozen=True)
class PowerLawFit:
    """``loss = l_inf + a * C^(-b)`` fitted to points; ``r2`` in the loss's own scale."""

    l_inf: float
    a: float
    b: float
    r2: float
    points: int
    converged: bool

    def predict(self, compute: np.ndarray | float) -> np.ndarray:
        return self.l_inf + self.a * np.asarray(compute, dtype=np.float64) ** (-self.b)

    @property
    def usable(self) -> bool:
        """The fit-quality gate: converged, enough points, and ``R^2 >= MIN_R2``."""
        return self.converged and self.points >= MIN_FIT_POINTS and self.r2 >= MIN_R2


def _profile_fit(x: np.ndarray, y: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    """For each exponent in ``b [G]``, the least-squares ``(l_inf, a)`` of ``y = l_inf + a
    x^-b`` with ``0 <= l_inf <= min(y)`` (the model is linear in them), and its SSE."""
    z = x[None, :] ** (-b[:, None])  # [G, P]
    zm, ym = z.mean(axis=1), y.mean()
    zc = z - zm[:, None]
    var = (zc**2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(var > 0, (zc * (y - ym)).sum(axis=1) / var, 0.0)
    level = ym - a * zm
    clipped = np.clip(level, 0.0, float(y.min()))
    refit = clipped != level
    with np.errstate(divide="ignore", invalid="ignore"):
        a_clip = ((z * (y[None, :] - clipped[:, None])).sum(axis=1)) / (z**2).sum(axis=1)
    a = np.where(refit, a_clip, a)
    sse = ((y[None, :] - clipped[:, None] - a[:, None] * z) ** 2).sum(axis=1)
    return clipped, a, sse


B_GRID = np.concatenate([np.linspace(-2.0, -1e-3, 200), np.linspace(1e-3, 3.0, 600)])


def fit_saturating_power_law(
    compute: Sequence[float] | np.ndarray, loss: Sequence[float] | np.ndarray
) -> PowerLawFit:
    """Least squares of ``loss = l_inf + a C^-b`` with ``0 <= l_inf <= min(loss)``.

    ``compute, loss``: ``[P]``. Variable projection: ``(l_inf, a)`` are solved exactly for
    each ``b`` on a grid, then on a 100x finer grid around the best. Compute is
    scaled by its geometric mean for conditioning; ``a`` is reported for the unscaled
    ``C``. Fewer than three distinct compute values give ``converged=False``.
    """
    c, y = _values(compute), _values(loss)
    points = len(np.unique(c))
    if points < 3 or np.any(c <= 0) or len(c) != len(y):
        return PowerLawFit(math.nan, math.nan, math.nan, math.nan, points, False)
    scale = float(np.exp(np.log(c).mean()))
    x = c / scale
    _, _, sse = _profile_fit(x, y, B_GRID)
    best = int(np.argmin(sse))
    fine = np.linspace(B_GRID[max(best - 1, 0)], B_GRID[min(best + 1, len(B_GRID) - 1)], 201)
    _, _, fine_sse = _profile_fit(x, y, fine)
    b = float(fine[int(np.argmin(fine_sse))])
    level, a, sse_b = (v[0] for v in _profile_fit(x, y, np.array([b])))
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(sse_b) / total if total > 0 else math.nan
    a_unscaled = float(a) * scale**b
    # an exponent on the search's edge is no optimum: the data ask for a step, not a law
    inside = B_GRID[0] < b < B_GRID[-1]
    ok = bool(np.isfinite(r2) and np.isfinite(a_unscaled) and inside)
    return PowerLawFit(float(level), a_unscaled, b, r2, points, ok)


@dataclass(frozen=True)
class ScalingFit:
    """A power-law fit over ``[points, seeds]`` losses and bootstrap intervals of its figures."""

    fit: PowerLawFit
    exponent: Interval
    replicates: np.ndarray
    """``[R, 3]`` bootstrap replicates of ``(l_inf, a, b)``, one per plan entry (NaN where
    the fit failed)."""
    failed: float
    """Share of bootstrap replicates whose fit did not converge."""

    @property
    def measurable(self) -> bool:
        return self.fit.usable and not math.isnan(self.exponent.low) and self.failed <= 0.2

    def predict_interval(self, compute: float, level: float = LEVEL) -> Interval:
        preds = self.replicates[:, 0] + self.replicates[:, 1] * compute ** (-self.replicates[:, 2])
        preds = preds[np.isfinite(preds)]
        return _percentiles(float(self.fit.predict(compute)), preds, level, self.exponent.n)


def _percentiles(centre: float, draws: np.ndarray, level: float, n: int) -> Interval:
    """Percentile interval of bootstrap ``draws``; ``n`` is the sample size (seeds)."""
    if len(draws) < 2:
        return Interval(centre, math.nan, math.nan, n, level)
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return Interval(centre, float(low), float(high), n, level)


def bootstrap_indices(points: int, seeds: int, resamples: int, seed: int) -> list[tuple]:
    """Paired resampling plan: per replicate, seed columns ``[seeds]`` and point rows
    ``[points]`` drawn with replacement. The same ``seed`` gives the same plan, so two
    backbones with the same seeds and point count are resampled alike (paired)."""
    rng = np.random.default_rng(seed)
    return [
        (rng.integers(0, seeds, size=seeds), rng.integers(0, points, size=points))
        for _ in range(resamples)
    ]


def fit_scaling(
    compute: Sequence[float],
    losses: np.ndarray,
    resamples: int = 500,
    seed: int = 0,
    level: float = LEVEL,
    plan: list[tuple] | None = None,
) -> ScalingFit:
    """Fit ``L = L_inf + a C^-b`` to the seed means and bootstrap over seeds and points.

    Args:
        compute: ``[P]`` training compute of each point.
        losses: ``[P, S]`` loss of each point under each of ``S`` paired seeds.
    """
    c = _values(compute)
    y = np.asarray(losses, dtype=np.float64)
    if y.ndim != 2 or y.shape[0] != len(c):
        raise ValueError(f"losses must be [points, seeds] = [{len(c)}, S], got {y.shape}")
    fit = fit_saturating_power_law(c, y.mean(axis=1))
    plan = plan or bootstrap_indices(len(c), y.shape[1], resamples, seed)
    reps, failed = [], 0
    for seed_cols, rows in plan:
        means = y[:, seed_cols].mean(axis=1)[rows]
        f = fit_saturating_power_law(c[rows], means)
        if f.converged:
            reps.append((f.l_inf, f.a, f.b))
        else:  # kept as NaN so that replicate i of two families used plan entry i (paired)
            reps.append((math.nan, math.nan, math.nan))
            failed += 1
    replicates = np.asarray(reps, dtype=np.float64).reshape(-1, 3)
    ok = np.isfinite(replicates[:, 2])
    exponent = _percentiles(fit.b, replicates[ok, 2], level, y.shape[1])
    return ScalingFit(fit, exponent, replicates, failed / max(len(plan), 1))


def format_p(p: float) -> str:
    """A p-value with its relation: ``p=0.032``; ``p<0.001`` and ``p>0.999`` where three
    decimals would round it to 0 or 1; ``p n/a`` for no value."""
    if not math.isfinite(p):
        return "p n/a"
    if p < 0.001:
        return "p<0.001"
    if p > 0.999:
        return "p>0.999"
    return f"p={p:.3f}"
