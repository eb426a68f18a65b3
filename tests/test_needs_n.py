"""How far an undecided claim's "needs n" can be trusted (issue 67, item 4).

A seeded calibration simulation on claims shaped like the standard report's underpowered
ones (``results/standard/REPORT.md``: estimate, seeds' SE and test-set SE at n=10 seeds):
every draw is one reproduction, ten per-seed paired differences ``effect + u + e_s`` with a
test-set shift ``u ~ N(0, v)`` that all seeds share and the seeds' own ``e_s ~ N(0,
sigma^2)``; ``v`` is known, as DeLong's covariance over a million test rows nearly is. The
true ``n`` is :func:`plan` at the true effect and noise. Among the draws the test leaves
undecided (the ones that print a "needs n"):

- the point figure (``plan`` at the observed effect) lands within 2x of the true ``n`` only
  28-45% of the time (the reviewer found 27-42%): it cannot stand alone;
- the 90% interval of ``n`` (the ``n`` over the effect's 90% interval) covers the true ``n``
  93-100% of the time: nominally at least 90%, since it covers whenever the effect's
  interval covers the effect, and more in practice, since an undecided claim's interval
  always reaches the bound, so it only ever misses on the low side.

The chance to decide at the point ``n`` is checked against brute force: draw the effect
from its t distribution around the report's estimate, run ``n`` fresh seeds, decide.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pytest

from suite.decisions import (
    MAX_SEEDS,
    Direction,
    Noise,
    Plan,
    decide,
    effect_interval,
    expected_power,
    plan,
    power,
    power_array,
    seeds_for_power,
    seeds_range,
)

SEEDS = 10
"""The standard profile's seeds: the n the report's verdicts rest on."""
DRAWS = 4000
NOMINAL = 0.90
TOLERANCE = 0.025
"""About three binomial standard errors of a coverage near 90% over ~2,000 undecided draws."""


@dataclass(frozen=True)
class Shape:
    """A claim as the report shows it: estimate, the SE's parts at ``SEEDS`` seeds, bound."""

    effect: float
    seeds_se: float
    test_se: float
    direction: Direction
    bound: float

    @property
    def noise(self) -> Noise:
        return Noise(SEEDS, self.seeds_se**2 * SEEDS, self.test_se**2, 1_000_000)


SHAPES = {
    # qr_4.test_auc - hash_4.test_auc > 0.001: 0.0023, SE 8.025e-04 (seeds 7.802e-04,
    # test set 1.880e-04), "needs n=28"
    "qr_4": Shape(0.0023, 7.802e-4, 1.880e-4, "greater", 0.001),
    # |dhe_4.test_auc - full.test_auc| <= 0.001: 0.0033, SE 0.0014 (test set 1.678e-04)
    "dhe_4": Shape(0.0033, 0.00139, 1.678e-4, "within", 0.001),
    # |ttrec_16.test_auc - full.test_auc| <= 0.001: -4.653e-04, SE 7.750e-04 (seeds
    # 7.655e-04, test set 1.206e-04), "needs n=186"
    "ttrec_16": Shape(-4.653e-4, 7.655e-4, 1.206e-4, "within", 0.001),
}


def simulated_runs(shape: Shape, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``DRAWS`` reproductions of ``SEEDS`` seeds: their mean ``[DRAWS]`` and the seeds'
    sample variance ``[DRAWS]`` (the shared test-set shift cancels out of the latter)."""
    sigma = shape.seeds_se * math.sqrt(SEEDS)
    shared = rng.normal(0.0, shape.test_se, (DRAWS, 1))
    values = shape.effect + shared + rng.normal(0.0, sigma, (DRAWS, SEEDS))
    return values.mean(axis=1), values.var(axis=1, ddof=1)


@pytest.fixture(scope="module")
def calibration() -> dict[str, dict[str, float]]:
    """Per shape: the true n, and over the undecided draws the share of point figures within
    2x of it and the share of 90% intervals covering it, all at today's test rows (a draw
    whose plan turns to more test rows counts as a point figure not within 2x)."""
    rng = np.random.default_rng(20240667)
    found: dict[str, dict[str, float]] = {}
    for name, shape in SHAPES.items():
        true_n = plan(shape.effect, shape.noise, shape.direction, shape.bound).seeds
        assert true_n is not None and SEEDS < true_n < MAX_SEEDS
        estimate, seed_var = simulated_runs(shape, rng)
        test_var = shape.test_se**2
        args = (seed_var, test_var, SEEDS, shape.direction, shape.bound)
        ranged = seeds_range(estimate, *args)
        point = seeds_for_power(estimate, seed_var, test_var, shape.direction, shape.bound)
        undecided = ranged.reaches_bound
        for i in range(12):  # the vectorized figures are the ones plan() prints
            noise = Noise(SEEDS, float(seed_var[i]), test_var, 1_000_000)
            test = decide(float(estimate[i]), noise, shape.direction, shape.bound)
            assert (test.decision == "undecided") == bool(undecided[i])
            one = plan(float(estimate[i]), noise, shape.direction, shape.bound)
            assert (one.seeds or math.inf) == point[i]
            if undecided[i] and one.seeds is not None:  # else it plans more test rows
                assert (one.seeds_low, one.seeds_high) == (int(ranged.low[i]), None)
        covered = (ranged.low <= true_n) & (true_n <= ranged.high)
        near = (point >= true_n / 2) & (point <= 2 * true_n)
        found[name] = {
            "true_n": float(true_n),
            "undecided": float(undecided.mean()),
            "point_within_2x": float(near[undecided].mean()),
            "interval_covers": float(covered[undecided].mean()),
            "median_low": float(np.median(ranged.low[undecided])),
        }
    return found


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_point_figure_alone_is_often_far_from_the_true_n(calibration, name) -> None:
    """The reviewer's finding: the printed n lands within 2x of the true n only 27-42% of
    the time (measured here: qr_4 0.40, dhe_4 0.45, ttrec_16 0.28)."""
    found = calibration[name]
    assert found["undecided"] > 0.4  # enough undecided draws to judge
    assert 0.2 <= found["point_within_2x"] <= 0.5


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_90_percent_interval_of_n_covers_the_true_n(calibration, name) -> None:
    """Nominal: at least 90% (it covers whenever the effect's 90% interval covers the true
    effect; the seeds' variance is estimated, hence the tolerance). Measured: qr_4 1.00,
    dhe_4 0.93, ttrec_16 1.00, conservative because the upper end of an undecided claim's
    interval is always unbounded, so it misses on the low side alone (under 5%)."""
    found = calibration[name]
    assert found["interval_covers"] >= NOMINAL - TOLERANCE
    assert 2 <= found["median_low"] < found["true_n"]  # the lower end is not a trivial 2


def _decided_share(shape: Shape, n: int, draws: int, rng: np.random.Generator) -> float:
    """Brute force of :func:`expected_power`: the effect drawn from its t distribution around
    the report's estimate, ``n`` fresh seeds run (seed variance and test variance as
    measured), the claim decided as :func:`decide` does (the 90% interval clear of the
    bound, for ``within`` wholly inside or wholly outside the margin)."""
    low, high, se, dof = (float(x) for x in effect_interval(shape.effect, *_noise(shape)))
    effects = shape.effect + se * rng.standard_t(dof, draws)
    sigma = shape.seeds_se * math.sqrt(SEEDS)
    values = (effects + rng.normal(0.0, shape.test_se, draws))[:, None]
    values = values + rng.normal(0.0, sigma, (draws, n))
    lo, hi, _, _ = effect_interval(
        values.mean(axis=1), values.var(axis=1, ddof=1), shape.test_se**2, n
    )
    m = shape.bound
    if shape.direction == "within":
        decided = ((-m <= lo) & (hi <= m)) | (hi < -m) | (lo > m)
    else:
        decided = (lo > m) | (hi < m)
    return float(decided.mean())


def _noise(shape: Shape) -> tuple[float, float, int]:
    return shape.seeds_se**2 * SEEDS, shape.test_se**2, SEEDS


@pytest.mark.parametrize("name", list(SHAPES))
def test_running_to_the_point_n_decides_less_often_than_80_percent(name) -> None:
    """Planned at the observed effect, the point n has 80% power only if the effect is as
    observed; averaged over its uncertainty it decides about 2 times in 3 (the reviewer:
    62%), and the plan says so."""
    shape = SHAPES[name]
    found = plan(shape.effect, shape.noise, shape.direction, shape.bound)
    assert found.seeds is not None
    brute = _decided_share(shape, found.seeds, 4000, np.random.default_rng(67))
    assert found.decide_chance == pytest.approx(brute, abs=0.04)
    assert 0.55 < found.decide_chance < 0.75
    assert f"{found.decide_chance:.0%} to decide at n={found.seeds}" in found.text()


# --- the text forms ----------------------------------------------------------------------


def test_an_undecided_claim_reads_its_n_with_an_unbounded_interval_and_its_chance() -> None:
    """The 90% interval of an undecided claim holds the bound, where no n decides: ∞."""
    shape = SHAPES["qr_4"]
    found = plan(shape.effect, shape.noise, shape.direction, shape.bound)
    assert found.text() == "needs n≈27 [90% CI 7–∞], 69% to decide at n=27"
    assert found.reaches_bound and found.seeds_high is None
    assert found.seeds_low is not None and found.seeds_low < found.seeds  # type: ignore[operator]


def test_a_claim_far_from_its_bound_reads_a_closed_interval() -> None:
    found = plan(0.01, Noise(10, 0.002**2 * 10), "greater", 0.001)
    assert found.text() == "needs n≈5 [90% CI 4–11], 80% to decide at n=5"
    assert not found.reaches_bound
    assert found.seeds_low <= found.seeds <= found.seeds_high  # type: ignore[operator]


def test_an_interval_ending_near_the_bound_reads_beyond_the_largest_n() -> None:
    """The effect's interval clears the bound by a hair: its near end needs more than
    ``MAX_SEEDS`` seeds, yet some n would still decide there."""
    found = plan(0.0032, Noise(10, 0.0012**2 * 10), "greater", 0.001)
    assert found.text() == f"needs n≈20 [90% CI 7–{MAX_SEEDS}+], 69% to decide at n=20"
    assert not found.reaches_bound and found.seeds_high is None


def test_equivalence_inside_the_margin_takes_its_easiest_n_at_zero() -> None:
    """``within``: equivalence is easiest to show at 0, so where the effect's interval spans
    0 inside the margin, the interval's low end is the n at 0, below both ends'."""
    noise = Noise(10, 0.0004**2 * 10)
    found = seeds_range(0.0001, noise.seed_var, 0.0, 10, "within", 0.0015)
    at_zero = seeds_for_power(0.0, noise.seed_var, 0.0, "within", 0.0015)
    low, high = effect_interval(0.0001, noise.seed_var, 0.0, 10)[:2]
    ends = seeds_for_power(np.array([low, high]), noise.seed_var, 0.0, "within", 0.0015)
    assert float(found.low) == float(at_zero) < ends.min()
    assert float(found.high) == ends.max() and not bool(found.reaches_bound)


def test_seeds_alone_cannot_do_it_so_the_interval_stands_at_the_planned_test_rows() -> None:
    noise = Noise(5, 0.0005**2, test_var=0.0008**2, test_rows=20_000)
    found = plan(0.0015, noise, "greater", 0.001)
    text = found.text()
    assert found.seeds is None and found.test_rows is not None
    assert text.startswith(f"needs n≈{found.seeds_with_rows} and {found.test_rows:,} test rows")
    assert re.search(r"\[90% CI \d+–∞\], \d+% to decide at n=\d+$", text)


def test_a_plan_without_an_interval_reads_as_before() -> None:
    assert Plan(0.3, 26).text() == "needs n=26"
    assert Plan(0.1, None, 40_000, 12).text() == "needs n=12 and 40,000 test rows"
    assert Plan(0.0, None).text() == f"needs n>{MAX_SEEDS}"
    assert Plan(0.0, None, seeds_low=40, reaches_bound=True).text() == (
        f"needs n>{MAX_SEEDS} [90% CI 40–∞]"
    )


def test_the_vectorized_power_is_the_scalar_one() -> None:
    cases: list[tuple[float, Noise, Direction, float]] = [
        (0.0025, Noise(5, 0.002**2), "greater", 0.001),
        (0.0003, Noise(5, 0.0009**2), "within", 0.001),
        (0.0033, Noise(10, 0.0044**2, 0.0002**2, 10**6), "within", 0.001),
        (-0.002, Noise(8, 0.001**2, 0.0001**2, 10**6), "less", -0.001),
    ]
    for effect, noise, direction, bound in cases:
        for n in (2, 5, 17, 400):
            scalar = power(effect, noise, direction, bound, n)
            array = power_array(effect, noise.seed_var, noise.test_var, n, direction, bound)
            assert float(array) == pytest.approx(scalar, rel=1e-12, abs=1e-15)
        point = plan(effect, noise, direction, bound).seeds
        vector = seeds_for_power(effect, noise.seed_var, noise.test_var, direction, bound)
        assert float(vector) == (point if point is not None else math.inf)
    assert math.isnan(power(0.002, Noise(1, 0.0), "greater", 0.001))


def test_the_chance_to_decide_grows_with_n_and_stays_below_certainty() -> None:
    shape = SHAPES["ttrec_16"]
    s2, v, k = _noise(shape)
    chances = expected_power(
        shape.effect, s2, v, k, np.array([20, 186, 1000]), shape.direction, shape.bound
    )
    assert np.all(np.diff(chances) > 0) and chances[-1] < 1.0
