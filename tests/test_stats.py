"""suite.stats against independent computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from suite.decisions import interval_verdict
from suite.stats import mean_ci, paired_ci, paired_p_value


def test_mean_ci_matches_a_t_interval_computed_by_hand() -> None:
    x = [0.751, 0.754, 0.749, 0.756, 0.752]
    ci = mean_ci(x)
    sem = np.std(x, ddof=1) / math.sqrt(5)
    t = 2.7764451051977987  # t_{0.975, 4} from tables
    assert ci.mean == pytest.approx(np.mean(x))
    assert ci.low == pytest.approx(np.mean(x) - t * sem, rel=1e-9)
    assert ci.high == pytest.approx(np.mean(x) + t * sem, rel=1e-9)
    assert ci.n == 5


def test_one_value_has_no_interval_and_no_verdict() -> None:
    ci = mean_ci([0.75])
    assert math.isnan(ci.low) and interval_verdict(ci, "greater") == "not measurable"


def test_paired_test_matches_scipy() -> None:
    a = [0.70, 0.72, 0.71, 0.69, 0.73]
    b = [0.69, 0.70, 0.71, 0.68, 0.70]
    assert paired_p_value(a, b) == pytest.approx(sps.ttest_rel(a, b).pvalue)
    assert paired_ci(a, b).mean == pytest.approx(np.mean(np.subtract(a, b)))


@pytest.mark.parametrize(
    ("low", "high", "direction", "margin", "expected"),
    [
        (0.002, 0.004, "greater", 0.001, "holds"),
        (-0.004, -0.002, "greater", 0.001, "does not hold"),
        (0.0005, 0.004, "greater", 0.001, "inconclusive"),
        (-0.004, -0.002, "less", 0.001, "holds"),
        (-0.0005, 0.0005, "within", 0.001, "holds"),
        (0.002, 0.003, "within", 0.001, "does not hold"),
        (0.0005, 0.003, "within", 0.001, "inconclusive"),
    ],
)
def test_three_verdicts(low: float, high: float, direction, margin: float, expected: str) -> None:
    from suite.stats import Interval

    assert interval_verdict(Interval((low + high) / 2, low, high, 5), direction, margin) == expected


# --- bootstrap -------------------------------------------------------------------------


def test_bootstrap_matches_a_brute_force_bootstrap_and_is_seeded() -> None:
    from suite.stats import bootstrap_ci

    x = np.array([0.1, 0.2, 0.15, 0.9, 0.12, 0.18, 0.11])  # skewed: one large value
    ci = bootstrap_ci(x, resamples=4000, seed=3)
    rng = np.random.default_rng(3)
    means = [x[rng.integers(0, len(x), size=len(x))].mean() for _ in range(4000)]
    assert ci.low == pytest.approx(np.quantile(means, 0.025))
    assert ci.high == pytest.approx(np.quantile(means, 0.975))
    assert ci.mean == pytest.approx(x.mean())
    assert bootstrap_ci(x, resamples=4000, seed=3) == ci
    # skewed data: the interval is not symmetric about the mean, unlike the t interval
    assert (ci.high - ci.mean) > 1.3 * (ci.mean - ci.low)


# --- DeLong ----------------------------------------------------------------------------


def _placements_brute_force(labels: np.ndarray, scores: np.ndarray):
    """DeLong et al. (1988)'s definition, O(m n): psi(x, y) = 1, 1/2, 0 for x >, =, < y."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    return psi.mean(axis=1), psi.mean(axis=0)


def test_delong_components_equal_the_definition_and_sklearn_auc() -> None:
    from sklearn.metrics import roc_auc_score

    from suite.stats import auc_components

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 300)
    scores = np.round(labels * 0.8 + rng.normal(size=300), 1)  # rounded: many ties
    v10, v01 = auc_components(labels, scores[None, :])
    bf10, bf01 = _placements_brute_force(labels, scores)
    np.testing.assert_allclose(v10[0], bf10)
    np.testing.assert_allclose(v01[0], bf01)
    assert v10[0].mean() == pytest.approx(roc_auc_score(labels, scores))


def test_delong_worked_example_by_hand() -> None:
    """Three positives, three negatives, computed by hand from DeLong's definitions.

    a: positives 0.9, 0.8, 0.4; negatives 0.7, 0.3, 0.2 -> V10 = (1, 1, 2/3), V01 = (2/3, 1, 1),
       AUC = 8/9.  b: positives 0.9, 0.5, 0.3; negatives 0.6, 0.4, 0.1 ->
       V10 = (1, 2/3, 1/3), V01 = (1/3, 2/3, 1), AUC = 2/3.
    S10 = covariance of the V10 rows (ddof 1): S10_aa = 1/27, S10_bb = 1/9, S10_ab = 1/18;
    S01 the same by symmetry. var(a - b) = (S10_aa + S10_bb - 2 S10_ab)/m +
    (S01_aa + S01_bb - 2 S01_ab)/n = (1/27)/3 + (1/27)/3 = 2/81.
    """
    from suite.stats import delong_test

    labels = [1, 1, 1, 0, 0, 0]
    a = [0.9, 0.8, 0.4, 0.7, 0.3, 0.2]
    b = [0.9, 0.5, 0.3, 0.6, 0.4, 0.1]
    result = delong_test(labels, a, b)
    assert result.auc_a == pytest.approx(8 / 9)
    assert result.auc_b == pytest.approx(2 / 3)
    assert result.variance == pytest.approx(2 / 81)
    z = (8 / 9 - 2 / 3) / math.sqrt(2 / 81)
    assert result.z == pytest.approx(z)
    assert result.p_value == pytest.approx(2 * sps.norm.sf(z))


def test_delong_agrees_with_a_bootstrap_of_the_same_auc_difference() -> None:
    from sklearn.metrics import roc_auc_score

    from suite.stats import delong_test

    rng = np.random.default_rng(1)
    n = 1500
    labels = rng.integers(0, 2, n)
    signal = rng.normal(size=n)
    a = labels * 1.0 + signal + 0.5 * rng.normal(size=n)
    b = labels * 0.9 + signal + 0.5 * rng.normal(size=n)  # correlated with a
    result = delong_test(labels, a, b)
    assert result.auc_a == pytest.approx(roc_auc_score(labels, a))
    diffs = []
    for _ in range(600):
        i = rng.integers(0, n, n)
        diffs.append(roc_auc_score(labels[i], a[i]) - roc_auc_score(labels[i], b[i]))
    sd = float(np.std(diffs, ddof=1))
    assert math.sqrt(result.variance) == pytest.approx(sd, rel=0.15)
    low, high = np.quantile(diffs, [0.025, 0.975])
    assert result.difference.low == pytest.approx(low, abs=0.25 * sd)
    assert result.difference.high == pytest.approx(high, abs=0.25 * sd)


def test_delong_p_value_agrees_with_a_bootstrap_p_value() -> None:
    """A small AUC difference (p well inside (0, 1)): DeLong's two-sided p matches the
    percentile bootstrap's (twice the share of resampled differences beyond zero)."""
    from scipy.stats import rankdata

    from suite.stats import delong_test

    def auc(y: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Mann-Whitney AUC of each row of ``s [R, n]`` against ``y [R, n]``."""
        ranks = rankdata(s, axis=1)
        m = y.sum(axis=1)
        return ((ranks * y).sum(axis=1) - m * (m + 1) / 2) / (m * (y.shape[1] - m))

    rng = np.random.default_rng(4)
    n = 1200
    labels = rng.integers(0, 2, n)
    signal = rng.normal(size=n)
    a = labels * 0.8 + signal + 0.6 * rng.normal(size=n)
    b = labels * 0.75 + signal + 0.6 * rng.normal(size=n)
    result = delong_test(labels, a, b)
    assert 0.02 < result.p_value < 0.8
    i = rng.integers(0, n, size=(2000, n))
    diffs = auc(labels[i], a[i]) - auc(labels[i], b[i])
    boot_p = 2 * min((diffs <= 0).mean(), (diffs >= 0).mean())
    assert result.p_value == pytest.approx(boot_p, abs=0.06)


def test_delong_is_fast_enough_for_a_criteo_test_split() -> None:
    """O(n log n): a million examples in well under the time an O(n^2) pass would need."""
    import time

    from suite.stats import delong_test

    rng = np.random.default_rng(2)
    n = 1_000_000
    labels = rng.integers(0, 2, n)
    a = labels + rng.normal(size=n)
    started = time.perf_counter()
    delong_test(labels, a, a + 0.1 * rng.normal(size=n))
    assert time.perf_counter() - started < 20


# --- scaling fits ----------------------------------------------------------------------


def test_saturating_power_law_recovers_its_parameters() -> None:
    from suite.stats import fit_saturating_power_law

    c = np.geomspace(1e9, 1e12, 6)
    fit = fit_saturating_power_law(c, 0.44 + 3.0 * c**-0.1)
    assert fit.b == pytest.approx(0.1, rel=1e-3)
    assert fit.l_inf == pytest.approx(0.44, abs=1e-4)
    assert fit.a == pytest.approx(3.0, rel=1e-2)
    assert fit.r2 == pytest.approx(1.0) and fit.usable


def test_scaling_exponent_interval_covers_the_truth_and_gates_bad_fits() -> None:
    from suite.stats import fit_scaling

    rng = np.random.default_rng(0)
    c = np.geomspace(1e9, 1e12, 6)
    truth = 0.44 + 3.0 * c**-0.1
    losses = truth[:, None] + rng.normal(0, 0.0005, size=(6, 5))
    fit = fit_scaling(c, losses, resamples=300)
    assert fit.measurable
    assert fit.exponent.low < 0.1 < fit.exponent.high
    # flat noise: no power law to fit, so no measurable exponent
    flat = 0.47 + rng.normal(0, 0.002, size=(6, 5))
    assert not fit_scaling(c, flat, resamples=100).measurable
