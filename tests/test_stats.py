"""suite.stats against independent computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from suite.stats import mean_ci, paired_ci, paired_p_value, verdict


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
    assert math.isnan(ci.low) and verdict(ci, "greater") == "not measurable"


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

    assert verdict(Interval((low + high) / 2, low, high, 5), direction, margin) == expected
