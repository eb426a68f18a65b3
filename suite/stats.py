"""Statistics for comparisons: confidence intervals over seeds, paired differences, verdicts.

One small module used by multi-seed runs, reproductions, the leaderboard and ``compare``.
Every comparison rests on several seeds: a single value has no interval (``n < 2`` gives
NaN bounds), so no verdict can rest on it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

LEVEL = 0.95

Verdict = Literal["holds", "does not hold", "inconclusive", "not measurable"]
Direction = Literal["greater", "less", "within"]


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


def _values(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"expected a 1-D sequence of values, got shape {array.shape}")
    return array


def mean_ci(values: Sequence[float], level: float = LEVEL) -> Interval:
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


def verdict(
    interval: Interval,
    direction: Direction,
    margin: float = 0.0,
    target: float = 0.0,
) -> Verdict:
    """Three-way verdict of a claim on an interval.

    ``greater``: the claim is ``value > target + margin``; ``less``: ``value < target -
    margin``; ``within``: ``|value - target| <= margin``. ``holds`` when the whole
    interval lies on the claimed side, ``does not hold`` when it lies wholly on the
    other side, ``inconclusive`` otherwise; ``not measurable`` without an interval.
    """
    if any(math.isnan(v) for v in (interval.mean, interval.low, interval.high)):
        return "not measurable"
    low, high = interval.low, interval.high
    if direction == "greater":
        bound = target + margin
        return "holds" if low > bound else "does not hold" if high <= bound else "inconclusive"
    if direction == "less":
        bound = target - margin
        return "holds" if high < bound else "does not hold" if low >= bound else "inconclusive"
    lo_bound, hi_bound = target - margin, target + margin
    if lo_bound <= low and high <= hi_bound:
        return "holds"
    if high < lo_bound or low > hi_bound:
        return "does not hold"
    return "inconclusive"
