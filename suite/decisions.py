"""Deciding a claim with all its noise: seed spread plus test-set sampling, TOST, Holm, power.

A claim compares a figure with a bound (a margin around zero for a paired difference, a
target for a threshold). Its noise has two parts:

- **seed spread**: the sample variance ``s^2`` of the per-seed values over ``n`` seeds;
- **test-set sampling**: every seed scores the same test rows, so the part of the test
  set's sampling error that the seeds' models share does not shrink with ``n``. DeLong's
  covariance of the AUCs of every seed's runs on the one test set measures it: ``v``, the
  mean covariance between two different seeds' figures (the part each seed has alone is
  already in ``s^2``, measured on this test set).

So ``SE^2 = s^2/n + v`` (the law of total variance over test sets and seeds), with
Welch-Satterthwaite degrees of freedom ``(s^2/n + v)^2 (n-1) / (s^2/n)^2`` (``v`` comes
from the whole test set and carries no degrees of freedom of its own).

Tests, at ``ALPHA = 0.05`` one-sided:

- ``greater``/``less`` (superiority by a margin): one-sided t tests of ``H0: d <= m`` and of
  ``H0: d >= m``; ``holds`` when the first rejects, ``does not hold`` when the second does.
- ``within`` (equivalence, ``|d| <= m``): TOST, the two one-sided tests of ``d <= -m`` and
  ``d >= m`` (Schuirmann 1987), which is the 90% interval lying inside ``[-m, m]``;
  ``does not hold`` when the 90% interval lies wholly outside it.

An undecided claim gets its power at the present ``n`` and the ``n`` (seeds, and test rows
where seeds alone cannot do it) that 80% power needs, planned at the observed effect.
Multiplicity: Holm's step-down adjustment over a report's empirical claims.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

import numpy as np

from suite.stats import Interval

ALPHA = 0.05
"""One-sided level of every test (TOST's 90% interval; superiority's 95% one-sided bound)."""
INTERVAL_LEVEL = 1 - 2 * ALPHA
"""The level of every interval a comparison shows (90%): the two one-sided tests' interval."""
POWER = 0.8
MAX_SEEDS = 1000

Direction = Literal["greater", "less", "within"]
Decision = Literal["holds", "does not hold", "undecided", "not measurable"]
Verdict = Literal["holds", "does not hold", "inconclusive", "not measurable"]
"""What :func:`interval_verdict` finds (an interval alone decides nothing it cannot show)."""


@dataclass(frozen=True)
class Noise:
    """The noise of a mean over seeds: per-seed spread and a shared test-set variance.

    ``seed_var``: sample variance of the per-seed values (ddof=1); ``test_var``: the
    test-set variance the seeds share (:func:`shared_test_variance`; 0 where the figure has
    no test-set sampling); ``test_rows``: rows of the test set it was measured on.
    """

    n: int
    seed_var: float
    test_var: float = 0.0
    test_rows: int = 0

    def variance(self, n: int | None = None, test_scale: float = 1.0) -> float:
        """Variance of the mean at ``n`` seeds, the test variance scaled by ``test_scale``
        (test rows now / test rows then)."""
        k = self.n if n is None else n
        return self.seed_var / k + self.test_var * test_scale

    def dof(self, n: int | None = None, test_scale: float = 1.0) -> float:
        """Welch-Satterthwaite degrees of freedom of :meth:`variance`."""
        k = self.n if n is None else n
        seed_part = self.seed_var / k
        if seed_part <= 0:
            return math.inf
        return self.variance(k, test_scale) ** 2 * (k - 1) / seed_part**2


def noise_of(values: Sequence[float], test_var: float = 0.0, rows: int = 0) -> Noise:
    """The :class:`Noise` of per-seed ``values [n]`` with a shared test-set ``test_var``."""
    x = np.asarray(values, dtype=np.float64)
    seed_var = float(x.var(ddof=1)) if len(x) >= 2 else math.nan
    return Noise(len(x), seed_var, test_var, rows)


def seed_covariance(cov: np.ndarray, seeds: int, paired: bool) -> np.ndarray:
    """Test-set covariance ``[n, n]`` of the seeds' figures.

    ``cov``: DeLong's AUC covariance of ``[left seed 0..n-1, right seed 0..n-1]`` (``[2n,
    2n]``, ``paired``: the figure is ``AUC(left) - AUC(right)``) or of ``[seed 0..n-1]``
    (``[n, n]``: one AUC).
    """
    n = seeds
    if not paired:
        return cov[:n, :n].copy()
    a, b, ab = cov[:n, :n], cov[n:, n:], cov[:n, n:]
    return a + b - ab - ab.T


def shared_test_variance(cov: np.ndarray, seeds: int, paired: bool) -> tuple[np.ndarray, float]:
    """Per-seed test-set variance ``[n]`` of a figure and the part the seeds share.

    ``cov`` as in :func:`seed_covariance`. The shared part is the mean covariance of two
    different seeds' figures, clipped at 0; with one seed it is that seed's whole variance.
    """
    n = seeds
    d = seed_covariance(cov, seeds, paired)
    per_seed = np.diag(d).copy()
    if n < 2:
        return per_seed, float(per_seed[0])
    off = d[~np.eye(n, dtype=bool)]
    return per_seed, max(0.0, float(off.mean()))


def t_quantile(q: float, dof: float) -> float:
    from scipy import stats

    return float(stats.norm.ppf(q)) if math.isinf(dof) else float(stats.t.ppf(q, dof))


def t_sf(x: float, dof: float) -> float:
    from scipy import stats

    return float(stats.norm.sf(x)) if math.isinf(dof) else float(stats.t.sf(x, dof))


@dataclass(frozen=True)
class Test:
    """A claim's decision on a mean ``estimate`` with standard error ``se``.

    ``low``/``high``: the ``1 - 2 ALPHA`` (90%) interval the one-sided tests amount to;
    ``p_holds``: p of the null that the claim is false; ``p_fails``: p of the null that it
    holds (small when the data show it does not).
    """

    estimate: float
    se: float
    dof: float
    low: float
    high: float
    p_holds: float
    p_fails: float
    decision: Decision

    @property
    def p(self) -> float:
        """The p of the test that decides (or would decide) the claim."""
        return min(self.p_holds, self.p_fails)


def decide(estimate: float, noise: Noise, direction: Direction, bound: float) -> Test:
    """Test ``estimate`` against ``bound`` (``greater``: ``d > bound``; ``less``: ``d <
    bound``; ``within``: ``|d| <= bound``, TOST) at one-sided ``ALPHA``."""
    nan = math.nan
    test_set_only = noise.n == 1 and noise.seed_var == 0.0 and noise.test_var > 0
    if (noise.n < 2 and not test_set_only) or math.isnan(noise.seed_var) or math.isnan(estimate):
        return Test(estimate, nan, nan, nan, nan, nan, nan, "not measurable")
    var = noise.variance()
    se, dof = math.sqrt(var), noise.dof()
    if se == 0.0:  # exact figures: the estimate is the value
        sign = {"greater": estimate > bound, "less": estimate < bound}
        ok = sign.get(direction, abs(estimate) <= bound)
        p_h, p_f = (0.0, 1.0) if ok else (1.0, 0.0)
        return Test(estimate, 0.0, dof, estimate, estimate, p_h, p_f, _decision(p_h, p_f))
    half = t_quantile(1 - ALPHA, dof) * se
    low, high = estimate - half, estimate + half
    if direction == "greater":
        p_h, p_f = t_sf((estimate - bound) / se, dof), t_sf((bound - estimate) / se, dof)
    elif direction == "less":
        p_h, p_f = t_sf((bound - estimate) / se, dof), t_sf((estimate - bound) / se, dof)
    else:
        p_h = max(t_sf((estimate + bound) / se, dof), t_sf((bound - estimate) / se, dof))
        p_f = t_sf((abs(estimate) - bound) / se, dof)
    return Test(estimate, se, dof, low, high, p_h, p_f, _decision(p_h, p_f))


def _decision(p_holds: float, p_fails: float) -> Decision:
    if p_holds < ALPHA:
        return "holds"
    if p_fails < ALPHA:
        return "does not hold"
    return "undecided"


# --- power ------------------------------------------------------------------------------


def power(
    effect: float,
    noise: Noise,
    direction: Direction,
    bound: float,
    n: int | None = None,
    test_scale: float = 1.0,
) -> float:
    """Probability that :func:`decide` reaches a verdict (either way) at ``n`` seeds when
    the true value is ``effect`` (normal approximation with the t critical value).

    For ``within`` it is TOST's power to show equivalence when ``|effect| < bound``, and the
    power to show non-equivalence otherwise.
    """
    from scipy import stats

    k = noise.n if n is None else n
    var = noise.variance(k, test_scale)
    if k < 2 or not var > 0:
        return math.nan if k < 2 else 1.0
    se = math.sqrt(var)
    crit = t_quantile(1 - ALPHA, noise.dof(k, test_scale))
    if direction in ("greater", "less"):
        distance = abs(effect - bound) / se
        return float(stats.norm.cdf(distance - crit))
    if abs(effect) >= bound:
        return float(stats.norm.cdf((abs(effect) - bound) / se - crit))
    upper = stats.norm.cdf((bound - effect) / se - crit)
    lower = stats.norm.cdf((bound + effect) / se - crit)
    return float(max(0.0, upper + lower - 1.0))


@dataclass(frozen=True)
class Plan:
    """What 80% power needs at the planning effect: ``seeds`` at today's test rows (None
    where no number of seeds reaches it), or else ``test_rows`` at ``seeds_with_rows``."""

    power_now: float
    seeds: int | None
    test_rows: int | None = None
    seeds_with_rows: int | None = None

    def text(self) -> str:
        if self.seeds is not None:
            return f"needs n={self.seeds}"
        if self.test_rows is not None:
            return f"needs n={self.seeds_with_rows} and {self.test_rows:,} test rows"
        return f"needs n>{MAX_SEEDS}"


def plan(effect: float, noise: Noise, direction: Direction, bound: float) -> Plan:
    """Seeds (and, where seeds cannot, test rows) for ``POWER`` at the observed ``effect``."""
    now = power(effect, noise, direction, bound)
    seeds = _smallest_n(lambda k: power(effect, noise, direction, bound, k))
    if seeds is not None or noise.test_var <= 0 or noise.test_rows <= 0:
        return Plan(now, seeds)
    for factor in (2, 4, 8, 16, 32, 64, 128):
        scale = 1.0 / factor
        found = _smallest_n(partial(power, effect, noise, direction, bound, test_scale=scale))
        if found is not None:
            return Plan(now, None, noise.test_rows * factor, found)
    return Plan(now, None)


def _smallest_n(power_at: Callable[[int], float]) -> int | None:
    """Smallest ``n`` in ``[2, MAX_SEEDS]`` with ``power_at(n) >= POWER`` (power grows with
    ``n``, so a doubling search then bisection)."""
    if not power_at(MAX_SEEDS) >= POWER:
        return None
    low, high = 1, 2
    while not power_at(high) >= POWER:
        low, high = high, min(high * 2, MAX_SEEDS)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if power_at(mid) >= POWER else (mid, high)
    return high


def minimum_detectable(noise: Noise, direction: Direction) -> float:
    """The smallest distance from the bound that is found with ``POWER`` at the present
    ``n`` (for ``within``: how far inside the margin the true value must lie)."""
    from scipy import stats

    var = noise.variance()
    if noise.n < 2 or math.isnan(var):
        return math.nan
    crit = t_quantile(1 - ALPHA, noise.dof())
    z = float(stats.norm.ppf(POWER if direction != "within" else (1 + POWER) / 2))
    return (crit + z) * math.sqrt(var)


# --- multiplicity -----------------------------------------------------------------------


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the order given; NaN stays NaN and
    does not count towards the number of tests."""
    p = np.asarray(p_values, dtype=np.float64)
    valid = np.flatnonzero(~np.isnan(p))
    adjusted = np.full(len(p), math.nan)
    order = valid[np.argsort(p[valid], kind="mergesort")]
    m, running = len(order), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p[index])))
        adjusted[index] = running
    return adjusted.tolist()


# --- two methods compared (``suite compare``, the leaderboard's "vs #1") -----------------


@dataclass(frozen=True)
class Comparison:
    """How ``A`` compares with ``B`` on one metric by the rule above.

    ``label``: ``A better`` / ``B better`` (by more than the margin, one-sided at 5%),
    ``same within margin`` (TOST), ``underpowered (needs n=...)`` or ``not measurable``.
    ``test``: the test on ``A - B`` that decided (the superiority test when none did).
    """

    label: str
    test: Test
    plan: Plan | None = None


def compare_paired(
    differences: Sequence[float],
    higher_is_better: bool,
    margin: float,
    test_var: float = 0.0,
    test_rows: int = 0,
) -> Comparison:
    """Compare two methods on per-seed paired ``differences [n]`` (``A - B``), the
    test set's shared variance ``test_var`` added (0 for figures without test sampling)."""
    noise = noise_of(differences, test_var, test_rows)
    estimate = float(np.mean(differences)) if len(differences) else math.nan
    return _compare(estimate, noise, higher_is_better, margin)


def _compare(estimate: float, noise: Noise, higher_is_better: bool, margin: float) -> Comparison:
    sign = 1.0 if higher_is_better else -1.0
    better_dir: Direction = "greater" if higher_is_better else "less"
    worse_dir: Direction = "less" if higher_is_better else "greater"
    better = decide(estimate, noise, better_dir, sign * margin)
    if better.decision == "not measurable":
        return Comparison("not measurable", better)
    if better.decision == "holds":
        return Comparison("A better", better)
    worse = decide(estimate, noise, worse_dir, -sign * margin)
    if worse.decision == "holds":
        return Comparison("B better", worse)
    if margin > 0:
        same = decide(estimate, noise, "within", margin)
        if same.decision == "holds":
            return Comparison("same within margin", same)
        if abs(estimate) < margin:
            found = plan(estimate, noise, "within", margin)
            return Comparison(f"underpowered ({found.text()})", same, found)
    bound = sign * margin if sign * estimate > 0 else -sign * margin
    direction = better_dir if sign * estimate > 0 else worse_dir
    found = plan(estimate, noise, direction, bound)
    return Comparison(f"underpowered ({found.text()})", better, found)


def compare_on_test_set(
    difference: float, variance: float, rows: int, higher_is_better: bool, margin: float
) -> Comparison:
    """Compare two runs of one seed each on the same test rows: ``difference`` ``A - B``
    with DeLong's paired variance (normal, as DeLong's test is); only the test set's
    sampling is measured, not the seeds' spread, so the label says "this test set"."""
    noise = Noise(1, 0.0, variance, rows)
    found = _compare(difference, noise, higher_is_better, margin)
    if found.label.startswith(("A better", "B better", "same")):
        label = f"{found.label} on this test set"
    else:  # seeds do not shrink a test set's noise: more test rows (or seeds) would
        label = "undecided on this test set (one seed a side: run --seeds for more)"
    return Comparison(label, found.test)


def unpaired_noise(a: Sequence[float], b: Sequence[float]) -> Noise:
    """The :class:`Noise` of ``mean(a) - mean(b)`` for unpaired samples ``a [n_a], b [n_b]``:
    Welch's variance ``s_a^2/n_a + s_b^2/n_b`` with ``min(n_a, n_b) - 1`` degrees of freedom
    (no fewer than Welch-Satterthwaite's lower bound, so conservative)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    k = min(len(x), len(y))
    if k < 2:
        return Noise(k, math.nan)
    var = float(x.var(ddof=1)) / len(x) + float(y.var(ddof=1)) / len(y)
    return Noise(k, var * k)


def compare_noise(
    estimate: float, noise: Noise, higher_is_better: bool, margin: float
) -> Comparison:
    """:func:`compare_paired` on a given estimate and noise (unpaired samples, say)."""
    return _compare(estimate, noise, higher_is_better, margin)


def seed_comparison(
    mine: Mapping[int, float], theirs: Mapping[int, float], higher_is_better: bool, margin: float
) -> Comparison | None:
    """``mine - theirs`` (two entries' per-seed figures, keyed by seed) by the
    reproductions' rule (:func:`compare_noise`): paired by seed where both
    ran the same seeds, else Welch's unpaired variance; None with fewer than two seeds on
    either side."""
    if len(mine) < 2 or len(theirs) < 2:
        return None
    if set(mine) == set(theirs):
        diffs = [mine[s] - theirs[s] for s in sorted(mine)]
        estimate, noise = sum(diffs) / len(diffs), noise_of(diffs)
    else:
        a, b = list(mine.values()), list(theirs.values())
        estimate, noise = sum(a) / len(a) - sum(b) / len(b), unpaired_noise(a, b)
    return compare_noise(estimate, noise, higher_is_better, margin)


# --- a verdict from an interval alone -------------------------------------------------


def interval_verdict(
    interval: Interval,
    direction: Direction,
    margin: float = 0.0,
    target: float = 0.0,
) -> Verdict:
    """Three-way verdict of a claim from where its interval lies alone (no test: a
    bootstrap or percentile interval, a benchmark's CI).

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
