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
where seeds alone cannot do it) that 80% power needs, planned at the observed effect, with
that figure's uncertainty beside it (:class:`Plan`):

- **the 90% interval of n**: the ``n`` that 80% power needs at every effect in the
  effect's 90% interval, from the smallest (the end far from the bound; for ``within``
  also 0, where equivalence is easiest) to the largest (the end near the bound). It
  covers the ``n`` the true effect needs whenever the interval covers the true effect, so
  at least 90% of the time. An undecided claim's interval always reaches its bound (that
  is what undecided means), and at the bound no ``n`` decides, so its upper end is
  unbounded: ``needs n≈27 [90% CI 7–∞]`` (a low end under today's ``n``: an effect that
  far from the bound would have needed fewer seeds than were run, this run being unlucky).
  Simulated on claims shaped like the standard report's (``tests/test_needs_n.py``), the
  point figure lands within 2x of the true ``n`` only 28-45% of the time, while this
  interval covers it 93-100% of the time.
- **the chance to decide at the point n**: the power at that ``n`` averaged over the
  effect's uncertainty (its t distribution around the estimate; "assurance"), which is
  what running to the printed ``n`` buys when the effect is not known: below the 80%
  planned at the observed effect (about 2 in 3 for the standard report's claims), since
  the effect may lie nearer the bound than observed. An average over the effects the data
  allow, not the power at the true one (which no run knows).

Multiplicity: Holm's step-down adjustment over a report's empirical claims.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Literal

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from suite.stats import Interval

ALPHA = 0.05
"""One-sided level of every test (TOST's 90% interval; superiority's 95% one-sided bound)."""
INTERVAL_LEVEL = 1 - 2 * ALPHA
"""The level of every interval a comparison shows (90%): the two one-sided tests' interval."""
POWER = 0.8
MAX_SEEDS = 1000

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
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
    k = noise.n if n is None else n
    found = power_array(effect, noise.seed_var, noise.test_var, k, direction, bound, test_scale)
    return float(found)


def power_array(
    effect: ArrayLike,
    seed_var: ArrayLike,
    test_var: ArrayLike,
    n: ArrayLike,
    direction: Direction,
    bound: float,
    test_scale: float = 1.0,
) -> FloatArray:
    """:func:`power` elementwise over broadcast arrays of ``effect``, seed variance ``s^2``,
    shared test variance ``v`` and seeds ``n`` (NaN where ``n < 2``; 1 where the variance is
    not positive)."""
    from scipy import stats

    e, sv, tv, k = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.float64) for a in (effect, seed_var, test_var, n))
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        seed_part = sv / k
        var = seed_part + tv * test_scale
        se = np.sqrt(var)
        dof = np.where(seed_part > 0, var**2 * (k - 1) / seed_part**2, np.inf)
        crit = stats.t.ppf(1 - ALPHA, dof)  # the normal quantile at infinite dof
        if direction in ("greater", "less"):
            found = stats.norm.cdf(np.abs(e - bound) / se - crit)
        else:
            outside = stats.norm.cdf((np.abs(e) - bound) / se - crit)
            upper = stats.norm.cdf((bound - e) / se - crit)
            lower = stats.norm.cdf((bound + e) / se - crit)
            inside = np.maximum(0.0, upper + lower - 1.0)
            found = np.where(np.abs(e) >= bound, outside, inside)
    found = np.where(var > 0, found, 1.0)
    return np.asarray(np.where(k < 2, math.nan, found), dtype=np.float64)


def seeds_for_power(
    effect: ArrayLike,
    seed_var: ArrayLike,
    test_var: ArrayLike,
    direction: Direction,
    bound: float,
    test_scale: float = 1.0,
) -> FloatArray:
    """Elementwise, the smallest ``n`` in ``[2, MAX_SEEDS]`` whose :func:`power_array` is at
    least ``POWER``; ``inf`` where ``MAX_SEEDS`` seeds fall short (power grows with ``n``, so
    a bisection, all elements at once)."""
    e, sv, tv = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.float64) for a in (effect, seed_var, test_var))
    )

    def enough(k: FloatArray) -> BoolArray:
        return power_array(e, sv, tv, k, direction, bound, test_scale) >= POWER

    low, high = np.ones(e.shape), np.full(e.shape, float(MAX_SEEDS))
    reached = enough(high)
    while np.any(high - low > 1):
        mid = np.floor((low + high) / 2)
        ok = enough(mid)
        low, high = np.where(ok, low, mid), np.where(ok, mid, high)
    return np.where(reached, high, math.inf)


def effect_interval(
    estimate: ArrayLike, seed_var: ArrayLike, test_var: ArrayLike, n: ArrayLike
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """The ``INTERVAL_LEVEL`` (90%) t interval of the effect, elementwise, as
    :func:`decide` draws it: ``(low, high, se, dof)``."""
    from scipy import stats

    e, sv, tv, k = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.float64) for a in (estimate, seed_var, test_var, n))
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        seed_part = sv / k
        var = seed_part + tv
        se = np.sqrt(var)
        dof = np.where(seed_part > 0, var**2 * (k - 1) / seed_part**2, np.inf)
        half = stats.t.ppf(1 - ALPHA, dof) * se
    return e - half, e + half, se, dof


@dataclass(frozen=True)
class SeedsRange:
    """The ``n`` 80% power needs over the effect's 90% interval, elementwise.

    ``low``: the smallest (``inf`` where no effect in the interval is reached by
    ``MAX_SEEDS``); ``high``: the largest (``inf`` where the interval reaches the bound or
    it lies beyond ``MAX_SEEDS``); ``reaches_bound``: the interval holds the bound, where no
    ``n`` decides (for a claim :func:`decide` leaves undecided, always).
    """

    low: FloatArray
    high: FloatArray
    reaches_bound: BoolArray


def seeds_range(
    estimate: ArrayLike,
    seed_var: ArrayLike,
    test_var: ArrayLike,
    n: ArrayLike,
    direction: Direction,
    bound: float,
    test_scale: float = 1.0,
) -> SeedsRange:
    """:class:`SeedsRange` of effects ``estimate`` measured with seed variance ``s^2`` and
    shared test variance ``v`` over ``n`` seeds, the seeds planned at ``test_scale`` (test
    rows then / test rows now).

    ``n(effect)`` falls with the effect's distance from the bound (for ``within``: from the
    nearer end of the margin, inside fastest at 0), so over an interval it is smallest at an
    end or at 0 and largest at an end, or unbounded where the interval holds the bound.
    """
    e, sv, tv, k = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.float64) for a in (estimate, seed_var, test_var, n))
    )
    low, high = effect_interval(e, sv, tv, k)[:2]
    needs = partial(
        seeds_for_power,
        seed_var=sv,
        test_var=tv,
        direction=direction,
        bound=bound,
        test_scale=test_scale,
    )
    at_low, at_high = needs(low), needs(high)
    smallest = np.minimum(at_low, at_high)
    reaches = (low <= bound) & (bound <= high)
    if direction == "within":
        across_zero = (low < 0) & (high > 0)
        smallest = np.where(across_zero, np.minimum(smallest, needs(np.zeros(e.shape))), smallest)
        reaches |= (low <= -bound) & (-bound <= high)
    largest = np.where(reaches, math.inf, np.maximum(at_low, at_high))
    return SeedsRange(smallest, largest, reaches)


def expected_power(
    estimate: ArrayLike,
    seed_var: ArrayLike,
    test_var: ArrayLike,
    n_now: ArrayLike,
    n: ArrayLike,
    direction: Direction,
    bound: float,
    test_scale: float = 1.0,
    points: int = 128,
) -> FloatArray:
    """Elementwise, the chance that ``n`` seeds (at ``test_scale``) decide the claim: the
    power at ``n`` averaged over the effect's uncertainty, the effect drawn from its t
    distribution around ``estimate`` (today's SE and degrees of freedom over ``n_now``
    seeds; "assurance", the power the planned ``n`` buys when the effect is not known).
    A midpoint rule over ``points`` quantiles."""
    from scipy import stats

    e, sv, tv, k, m = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.float64) for a in (estimate, seed_var, test_var, n_now, n))
    )
    _, _, se, dof = effect_interval(e, sv, tv, k)
    q = (np.arange(points) + 0.5) / points
    effects = e[..., None] + se[..., None] * stats.t.ppf(q, dof[..., None])
    at = power_array(
        effects, sv[..., None], tv[..., None], m[..., None], direction, bound, test_scale
    )
    return np.asarray(at.mean(axis=-1), dtype=np.float64)


@dataclass(frozen=True)
class Plan:
    """What 80% power needs at the planning effect: ``seeds`` at today's test rows (None
    where no number of seeds reaches it), or else ``test_rows`` at ``seeds_with_rows``.

    With the point figure's uncertainty (:func:`plan` fills these; a Plan without them
    prints the point alone): ``seeds_low``/``seeds_high``, the ``level`` (90%) interval of
    the seeds needed over the effect's interval, at the plan's test rows (``seeds_low``
    None: even the easiest effect in it needs more than ``MAX_SEEDS``; ``seeds_high`` None:
    unbounded or beyond ``MAX_SEEDS``); ``reaches_bound``: that interval holds the bound, so
    the claim may stay undecided at any ``n``; ``decide_chance``: the chance that running
    to the point ``n`` decides the claim, averaged over the effect's uncertainty
    (:func:`expected_power`).
    """

    power_now: float
    seeds: int | None
    test_rows: int | None = None
    seeds_with_rows: int | None = None
    seeds_low: int | None = None
    seeds_high: int | None = None
    reaches_bound: bool = False
    decide_chance: float = math.nan
    level: float = INTERVAL_LEVEL

    @property
    def planned_seeds(self) -> int | None:
        """The point ``n``: ``seeds``, or ``seeds_with_rows`` where test rows are planned."""
        return self.seeds if self.seeds is not None else self.seeds_with_rows

    def interval_text(self) -> str:
        """``[90% CI 7–∞]`` (the bound inside the effect's interval), ``[90% CI 12–75]``, or
        ``[90% CI 12–1000+]`` (beyond ``MAX_SEEDS``); empty without an interval."""
        if self.seeds_low is None:
            return ""
        high = (
            "∞"
            if self.reaches_bound
            else f"{MAX_SEEDS}+"
            if self.seeds_high is None
            else f"{self.seeds_high}"
        )
        return f"[{self.level:.0%} CI {self.seeds_low}–{high}]"

    def text(self) -> str:
        """``needs n≈27 [90% CI 7–∞], 69% to decide at n=27`` (the interval's upper end ∞:
        the claim may stay undecided at any n); ``needs n=28`` for a Plan without an
        interval; ``and 40,000 test rows`` where seeds alone cannot do it."""
        interval = self.interval_text()
        mark = "≈" if interval else "="
        if self.seeds is not None:
            head = f"needs n{mark}{self.seeds}"
        elif self.test_rows is not None:
            head = f"needs n{mark}{self.seeds_with_rows} and {self.test_rows:,} test rows"
        else:
            head = f"needs n>{MAX_SEEDS}"
        if not interval:
            return head
        if self.planned_seeds is None or math.isnan(self.decide_chance):
            return f"{head} {interval}"
        chance = f"{self.decide_chance:.0%} to decide at n={self.planned_seeds}"
        return f"{head} {interval}, {chance}"


def plan(effect: float, noise: Noise, direction: Direction, bound: float) -> Plan:
    """Seeds (and, where seeds cannot, test rows) for ``POWER`` at the observed ``effect``,
    with the interval of that figure over the effect's 90% interval and the chance that the
    point figure decides (:class:`Plan`)."""
    now = power(effect, noise, direction, bound)
    seeds = _smallest_n(lambda k: power(effect, noise, direction, bound, k))
    if seeds is not None or noise.test_var <= 0 or noise.test_rows <= 0:
        return _with_uncertainty(Plan(now, seeds), effect, noise, direction, bound, 1.0)
    for factor in (2, 4, 8, 16, 32, 64, 128):
        scale = 1.0 / factor
        found = _smallest_n(partial(power, effect, noise, direction, bound, test_scale=scale))
        if found is not None:
            rows = Plan(now, None, noise.test_rows * factor, found)
            return _with_uncertainty(rows, effect, noise, direction, bound, scale)
    return _with_uncertainty(Plan(now, None), effect, noise, direction, bound, 1.0)


def _with_uncertainty(
    point: Plan, effect: float, noise: Noise, direction: Direction, bound: float, scale: float
) -> Plan:
    """``point`` with its :class:`SeedsRange` and the chance the point ``n`` decides, at
    test scale ``scale``; unchanged where the noise cannot give an interval."""
    if noise.n < 2 or not noise.variance() > 0 or math.isnan(effect):
        return point
    found = seeds_range(
        effect, noise.seed_var, noise.test_var, noise.n, direction, bound, test_scale=scale
    )
    low, high = float(found.low), float(found.high)
    chance = math.nan
    if point.planned_seeds is not None:
        chance = float(
            expected_power(
                effect,
                noise.seed_var,
                noise.test_var,
                noise.n,
                point.planned_seeds,
                direction,
                bound,
                test_scale=scale,
            )
        )
    return replace(
        point,
        seeds_low=int(low) if math.isfinite(low) else None,
        seeds_high=int(high) if math.isfinite(high) else None,
        reaches_bound=bool(found.reaches_bound),
        decide_chance=chance,
    )


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
    ``same within margin`` (TOST), ``underpowered (needs n≈...)`` (:meth:`Plan.text`) or
    ``not measurable``.
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
