"""Evaluating claims against measured figures."""

from __future__ import annotations

import math
from dataclasses import dataclass

from suite.reproduce.spec import Claim, Operand

Figures = dict[str, dict[str, float]]
"""Measured metrics by run id: ``figures["qr"]["test_auc"]``."""


@dataclass(frozen=True)
class ClaimOutcome:
    """A claim with the figures it compared and whether it holds."""

    claim: Claim
    left: float
    right: float
    holds: bool | None  # None: a figure is missing or not a number

    @property
    def verdict(self) -> str:
        return {True: "holds", False: "does not hold", None: "not measured"}[self.holds]


def resolve(operand: Operand, figures: Figures) -> float:
    """The number an operand stands for (NaN when a figure is missing)."""
    if isinstance(operand, int | float):
        return float(operand)
    if isinstance(operand, str):
        run, metric = operand.split(".", 1)
        return float(figures.get(run, {}).get(metric, math.nan))
    ((kind, (a, b)),) = operand.items()
    x, y = resolve(a, figures), resolve(b, figures)
    if kind == "ratio":
        return x / y if y else math.nan
    return x - y


def evaluate(claim: Claim, figures: Figures) -> ClaimOutcome:
    left, right = resolve(claim.left, figures), resolve(claim.right, figures)
    if math.isnan(left) or math.isnan(right):
        return ClaimOutcome(claim, left, right, None)
    holds = {
        "less": left < right - claim.margin,
        "greater": left > right + claim.margin,
        "within": abs(left - right) <= claim.tolerance,
        "at_most": left <= right,
        "at_least": left >= right,
    }[claim.kind]
    return ClaimOutcome(claim, left, right, bool(holds))


def describe(claim: Claim) -> str:
    """The comparison in symbols, e.g. ``qr.test_logloss < hash.test_logloss``."""

    def name(operand: Operand) -> str:
        if isinstance(operand, dict):
            ((kind, (a, b)),) = operand.items()
            return f"{a} / {b}" if kind == "ratio" else f"{a} - {b}"
        return str(operand)

    left, right = name(claim.left), name(claim.right)
    return {
        "less": f"{left} < {right}" + (f" - {claim.margin:g}" if claim.margin else ""),
        "greater": f"{left} > {right}" + (f" + {claim.margin:g}" if claim.margin else ""),
        "within": f"|{left} - {right}| <= {claim.tolerance:g}",
        "at_most": f"{left} <= {right}",
        "at_least": f"{left} >= {right}",
    }[claim.kind]
