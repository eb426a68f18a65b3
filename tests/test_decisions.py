"""suite.decisions against worked examples and brute-force simulations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from suite.decisions import Noise, decide, holm, noise_of, plan, power, shared_test_variance
from suite.stats import auc_components, auc_covariance

T_95_9 = 1.8331129326536335  # t_{0.95, 9} from tables


def test_tost_matches_a_worked_example() -> None:
    """Ten paired differences, mean 0.0002, SD 0.0008, margin 0.001: the two one-sided
    t statistics are (0.0012, 0.0008) / SE with 9 degrees of freedom; p_TOST is the larger
    one-sided p, and the 90% interval lies inside the margin, so equivalence holds."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal(10)
    d = 0.0002 + 0.0008 * (z - z.mean()) / z.std(ddof=1)
    se = 0.0008 / math.sqrt(10)
    test = decide(float(d.mean()), noise_of(d), "within", 0.001)
    assert test.se == pytest.approx(se, rel=1e-12)
    assert test.dof == pytest.approx(9)
    p_lower = sps.t.sf((0.0002 + 0.001) / se, 9)  # H0: d <= -0.001
    p_upper = sps.t.sf((0.001 - 0.0002) / se, 9)  # H0: d >= +0.001
    assert test.p_holds == pytest.approx(max(p_lower, p_upper), rel=1e-9)
    assert test.p_holds == pytest.approx(0.00575, abs=1e-5)  # t = 3.162, 9 df
    assert (test.low, test.high) == pytest.approx((0.0002 - T_95_9 * se, 0.0002 + T_95_9 * se))
    assert test.decision == "holds"


def test_tost_uses_the_90_percent_interval_not_the_95() -> None:
    """A difference whose 95% interval pokes out of the margin but whose 90% interval does
    not is equivalent by TOST at 5% (the rule the field uses)."""
    se = 0.0004
    est = 0.001 - 1.9 * se  # 1.833 < 1.9 < 2.262 (t_{0.975, 9})
    test = decide(est, Noise(10, se**2 * 10), "within", 0.001)
    assert test.decision == "holds"
    assert est + sps.t.ppf(0.975, 9) * se > 0.001


def test_non_equivalence_and_superiority_directions() -> None:
    far = decide(0.004, Noise(10, 1e-6 * 10), "within", 0.001)
    assert far.decision == "does not hold"
    better = decide(0.004, Noise(10, 1e-6 * 10), "greater", 0.001)
    worse = decide(-0.004, Noise(10, 1e-6 * 10), "greater", 0.001)
    assert (better.decision, worse.decision) == ("holds", "does not hold")
    less = decide(-0.004, Noise(10, 1e-6 * 10), "less", -0.001)
    assert less.decision == "holds"
    assert decide(0.0011, Noise(5, 1e-4), "greater", 0.001).decision == "undecided"


def test_test_set_variance_widens_the_interval_and_is_not_divided_by_seeds() -> None:
    seeds_only = decide(0.002, Noise(5, 1e-7), "greater", 0.001)
    with_test = decide(0.002, Noise(5, 1e-7, test_var=0.0008**2), "greater", 0.001)
    assert seeds_only.decision == "holds"
    assert with_test.decision == "undecided"
    assert with_test.se == pytest.approx(math.sqrt(1e-7 / 5 + 0.0008**2))


def _simulated_means(rng, replicates: int, seeds: int, rows: int, shared: float):
    """Per replicate: a fresh test set and fresh seeds; returns the mean paired AUC
    difference over seeds, the estimated variance s^2/n + shared DeLong covariance, and
    the seeds' part s^2/n alone."""
    means, estimates, seed_only = [], [], []
    for _ in range(replicates):
        y = rng.random(rows) < 0.3
        x = rng.standard_normal(rows) + 0.9 * y
        common = rng.standard_normal(rows)  # the methods' shared blind spots on this test set
        left, right = [], []
        for _ in range(seeds):
            own_a, own_b = rng.standard_normal((2, rows)) * math.sqrt(1 - shared)
            left.append(
                x + 0.8 * (math.sqrt(shared) * common + own_a) * (1 + 0.02 * rng.standard_normal())
            )
            right.append(
                x + 1.0 * (math.sqrt(shared) * common + own_b) * (1 + 0.02 * rng.standard_normal())
            )
        scores = np.vstack(left + right)
        aucs = auc_components(y, scores)[0].mean(axis=1)
        diffs = aucs[:seeds] - aucs[seeds:]
        _, test_var = shared_test_variance(auc_covariance(y, scores), seeds, paired=True)
        means.append(diffs.mean())
        estimates.append(noise_of(diffs, test_var).variance())
        seed_only.append(diffs.var(ddof=1) / seeds)
    return np.asarray(means), np.asarray(estimates), np.asarray(seed_only)


def test_combined_variance_matches_a_brute_force_simulation() -> None:
    """Redraw the test set and the seeds 300 times: the spread of the mean paired AUC
    difference matches s^2/n + mean DeLong variance when the seeds' models err alike on
    the test rows (as trained networks do), while the seeds' spread alone misses most."""
    rng = np.random.default_rng(7)
    means, estimates, seed_only = _simulated_means(rng, 300, 5, 1500, shared=0.97)
    truth = means.var(ddof=1)
    assert estimates.mean() / truth == pytest.approx(1.0, abs=0.25)
    assert seed_only.mean() / truth < 0.6


def test_combined_variance_holds_when_seeds_err_independently() -> None:
    rng = np.random.default_rng(8)
    means, estimates, _ = _simulated_means(rng, 300, 5, 1500, shared=0.0)
    assert estimates.mean() / means.var(ddof=1) == pytest.approx(1.0, abs=0.25)


def test_shared_part_of_delong_covariance_for_two_seeds_by_hand() -> None:
    """Two seeds, paired: d_i = a_i - b_i, so Cov(d_0, d_1) = C[a0,a1] + C[b0,b1] -
    C[a0,b1] - C[b0,a1]; per-seed variances on the diagonal, the same way."""
    cov = np.array(
        [
            [4.0, 2.0, 1.0, 0.5],
            [2.0, 5.0, 0.25, 1.5],
            [1.0, 0.25, 3.0, 1.0],
            [0.5, 1.5, 1.0, 6.0],
        ]
    )
    per_seed, shared = shared_test_variance(cov, 2, paired=True)
    assert per_seed.tolist() == [4 + 3 - 2 * 1.0, 5 + 6 - 2 * 1.5]
    assert shared == pytest.approx(2.0 + 1.0 - 0.5 - 0.25)


def _simulated_power(effect, noise: Noise, direction, bound, n: int, sims: int, rng) -> float:
    decided = 0
    for _ in range(sims):
        shared = rng.normal(0.0, math.sqrt(noise.test_var)) if noise.test_var else 0.0
        values = effect + shared + rng.normal(0.0, math.sqrt(noise.seed_var), n)
        test = decide(
            float(values.mean()),
            Noise(n, float(values.var(ddof=1)), noise.test_var),
            direction,
            bound,
        )
        decided += test.decision in ("holds", "does not hold")
    return decided / sims


@pytest.mark.parametrize(
    ("effect", "noise", "direction", "bound"),
    [
        (0.0025, Noise(5, 0.002**2), "greater", 0.001),
        (0.0003, Noise(5, 0.0009**2), "within", 0.001),
        (0.0025, Noise(5, 0.0015**2, test_var=0.0003**2, test_rows=20000), "greater", 0.001),
    ],
)
def test_planned_seeds_reach_80_percent_power_in_simulation(
    effect, noise, direction, bound
) -> None:
    found = plan(effect, noise, direction, bound)
    assert found.seeds is not None and found.seeds > noise.n
    rng = np.random.default_rng(3)
    at_n = _simulated_power(effect, noise, direction, bound, found.seeds, 1500, rng)
    below = _simulated_power(effect, noise, direction, bound, max(found.seeds - 3, 3), 1500, rng)
    assert at_n == pytest.approx(0.8, abs=0.06)
    assert below < at_n
    assert power(effect, noise, direction, bound, found.seeds) >= 0.8


def test_seeds_cannot_beat_a_shared_test_set_so_the_plan_asks_for_test_rows() -> None:
    """Test-set noise does not shrink with seeds: where it alone exceeds what the effect
    allows, the plan names more test rows (variance ~ 1/rows) and the seeds beside them."""
    noise = Noise(5, 0.0005**2, test_var=0.0008**2, test_rows=20_000)
    found = plan(0.0015, noise, "greater", 0.001)
    assert found.seeds is None
    assert found.test_rows is not None and found.test_rows > 20_000
    assert found.seeds_with_rows is not None
    scale = 20_000 / found.test_rows
    assert power(0.0015, noise, "greater", 0.001, found.seeds_with_rows, scale) >= 0.8
    assert "test rows" in found.text()


def test_holm_matches_a_worked_example() -> None:
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adjusted = holm([0.2, math.nan, 0.01])
    assert math.isnan(adjusted[1]) and adjusted[0] == pytest.approx(0.2)
    assert adjusted[2] == pytest.approx(0.02)
