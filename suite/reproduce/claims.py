"""Judging claims on per-seed figures: paired differences with all their noise, verdicts.

Every run of a profile runs under the same seeds, so the figures of two runs pair by seed.
A comparative claim is tested on the paired differences, a threshold claim on the values
minus the target (``suite.decisions``: one-sided tests at 5%, TOST for equivalence); a
figure resting on test AUCs adds the test set's DeLong variance to the seeds' spread. A
claim no test decides is ``underpowered``, with the seeds (and test rows) it needs. A
scaling claim is judged on bootstrap CIs of fitted curves (``suite.stats``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from suite.decisions import (
    ALPHA,
    INTERVAL_LEVEL,
    Noise,
    Plan,
    Test,
    decide,
    interval_verdict,
    noise_of,
    plan,
    seed_covariance,
)
from suite.reproduce.spec import ALLTOALL_METRICS, MODELLED_ALLTOALL, SCALING, Claim, Operand
from suite.stats import (
    LEVEL,
    Interval,
    ScalingFit,
    auc_components,
    bootstrap_ci,
    bootstrap_indices,
    components_covariance,
    fit_scaling,
    mean_ci,
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

UNDERPOWERED = "underpowered"
NOT_TESTABLE = "not testable at this scale"
DECIDED = ("holds", "does not hold")
AFTER_HOLM = "undecided after Holm"
"""A verdict one test decides but Holm's correction over the report's claims does not."""


@dataclass(frozen=True)
class PairNoise:
    """Test-set sampling noise of one seed's AUC figure, ``AUC(left) - AUC(right)`` (or
    ``AUC(left)`` alone where there is no right run), from DeLong's covariance on the one
    test set: this seed's ``variance``, its DeLong ``p_value`` of equal AUCs (NaN for one
    AUC), the test ``rows``, the ``covariances`` of this seed's figure with the other seeds'
    figures whose predictions were judged together with it (seed -> covariance), and the
    ``shared`` variance the seeds' figures have in common with the number of seed pairs it
    rests on (``shared_pairs``; :func:`shared_of`).

    As stored, ``shared`` is NaN except in entries written before the covariances were kept
    (all seeds judged at once: their mean off-diagonal covariance, clipped at 0)."""

    variance: float
    p_value: float
    rows: int
    shared: float = math.nan
    covariances: dict[int, float] = field(default_factory=dict)
    shared_pairs: int = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "variance": self.variance,
            "p_value": self.p_value,
            "rows": self.rows,
        }
        if not math.isnan(self.shared):
            out["shared"] = self.shared
        if self.covariances:
            out["covariances"] = {str(s): c for s, c in sorted(self.covariances.items())}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PairNoise:
        shared = data.get("shared")
        return cls(
            float(data["variance"]),
            math.nan if data["p_value"] is None else float(data["p_value"]),
            int(data["rows"]),
            math.nan if shared is None else float(shared),
            {int(s): float(c) for s, c in (data.get("covariances") or {}).items()},
        )


def merge_noise(stored: PairNoise | None, new: PairNoise | None) -> PairNoise | None:
    """One seed's entry as stored after it was measured again (``new``, as computed): the
    new figures, the covariances of both (the new ones where both have a seed), and a
    stored all-seeds ``shared`` (version 1) kept for the pairs not measured again."""
    if new is None:
        return stored
    covariances = {**(stored.covariances if stored else {}), **new.covariances}
    shared = stored.shared if stored else math.nan
    return replace(new, shared=shared, covariances=covariances, shared_pairs=0)


def shared_of(entries: dict[int, PairNoise], seeds: list[int]) -> tuple[float, int]:
    """The test-set variance the figures of ``seeds`` share, and the seed pairs it rests on.

    The mean covariance of two different seeds' figures, over the pairs whose predictions
    were judged together (an old entry's all-seeds ``shared`` stands for its pairs), clipped
    at 0: the seeds are exchangeable, so a subset of pairs estimates the same mean. With one
    seed, its whole variance; with no pair judged together, the mean per-seed variance (an
    upper bound of a mean covariance), with 0 pairs."""
    values = []
    for i, a in enumerate(seeds):
        for b in seeds[i + 1 :]:
            ea, eb = entries.get(a), entries.get(b)
            if ea is None or eb is None:
                continue
            found = ea.covariances.get(b, eb.covariances.get(a))
            if found is None and not (math.isnan(ea.shared) or math.isnan(eb.shared)):
                found = (ea.shared + eb.shared) / 2
            if found is not None:
                values.append(found)
    if values:
        return max(0.0, float(np.mean(values))), len(values)
    variances = [entries[s].variance for s in seeds if s in entries]
    return (float(np.mean(variances)) if variances else math.nan), 0


NoiseLookup = Callable[[str, str, int], PairNoise | None]
"""``noise(left run, right run, seed)``; ``right == ""`` asks for one AUC's noise."""


def noise_from_predictions(predictions: Predictions, seeds: list[int]) -> NoiseLookup:
    """A :data:`NoiseLookup` computed from the runs' kept test predictions under ``seeds``
    (those of them with predictions, judged together for the covariance between seeds),
    cached; None for a seed whose predictions are missing or where the runs scored
    different examples."""
    cache: dict[tuple[str, str], dict[int, PairNoise] | None] = {}

    def lookup(left: str, right: str, seed: int) -> PairNoise | None:
        if (left, right) not in cache:
            cache[(left, right)] = pair_noise(predictions, left, right, seeds)
        found = cache[(left, right)]
        return None if found is None else found.get(seed)

    return lookup


Components = Callable[[str, int, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""``components(run, seed, labels [N], logits [N])``: DeLong's ``(v10 [m], v01 [n])`` of that
run's predictions (``suite.stats.auc_components``), possibly cached."""


def pair_noise(
    predictions: Predictions,
    left: str,
    right: str,
    seeds: list[int],
    components: Components | None = None,
) -> dict[int, PairNoise] | None:
    """Each seed's :class:`PairNoise` of ``AUC(left) - AUC(right)`` (``AUC(left)`` where
    ``right`` is empty), for the seeds of ``seeds`` whose predictions of both runs are here;
    None where no seed has them all or the runs of one seed scored different examples.
    Seeds that share one test set are judged together (the covariances between them,
    ``shared`` from all their pairs). Seeds that each scored their own test set (a draw per
    seed: each seed generates its own sample) are independent: each seed is judged alone
    and its covariance with every other seed of ``seeds`` is 0, so the shared variance is
    0 and the seeds' spread carries the test sets' noise. A mix of the two is None.
    ``components``: where each run's structural components come from (default: computed
    here)."""
    runs = [left, right] if right else [left]
    found = {seed: [predictions(run, seed) for run in runs] for seed in seeds}
    present = [seed for seed in seeds if all(f is not None for f in found[seed])]
    if not present:
        return None
    kept = {seed: [f for f in found[seed] if f is not None] for seed in present}
    labels = {seed: kept[seed][0][0] for seed in present}
    if any(not _same(f[0], labels[seed]) for seed in present for f in kept[seed]):
        return None
    first = labels[present[0]]
    if all(_same(labels[seed], first) for seed in present):
        entries = _judged_together(runs, present, kept, components)
    elif all(
        not _same(labels[a], labels[b]) for i, a in enumerate(present) for b in present[i + 1 :]
    ):
        entries = {}
        for seed in present:
            alone = _judged_together(runs, [seed], kept, components)[seed]
            others = {s: 0.0 for s in seeds if s != seed}
            entries[seed] = replace(alone, covariances=others)
    else:
        return None
    shared, pairs = shared_of(entries, present)
    return {s: replace(e, shared=shared, shared_pairs=pairs) for s, e in entries.items()}


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


def _judged_together(
    runs: list[str],
    seeds: list[int],
    kept: dict[int, list[tuple[np.ndarray, np.ndarray]]],
    components: Components | None,
) -> dict[int, PairNoise]:
    """The :class:`PairNoise` of each of ``seeds``, whose runs all scored one test set
    (``kept[seed]``: each run's ``(labels [N], logits [N])``), with the covariances between
    them (``shared`` left to the caller)."""
    order = [(run, seed) for run in runs for seed in seeds]
    labels = kept[seeds[0]][0][0]
    of = components or (lambda run, seed, y, x: tuple(c[0] for c in auc_components(y, x[None])))
    parts = [of(run, seed, labels, kept[seed][runs.index(run)][1]) for run, seed in order]
    v10, v01 = np.vstack([p[0] for p in parts]), np.vstack([p[1] for p in parts])
    d = seed_covariance(components_covariance(v10, v01), len(seeds), paired=len(runs) == 2)
    aucs = v10.mean(axis=1)
    n = len(seeds)
    entries = {}
    for i, seed in enumerate(seeds):
        p = _normal_p(aucs[i] - aucs[n + i], d[i, i]) if len(runs) == 2 else math.nan
        others = {s: float(d[i, j]) for j, s in enumerate(seeds) if j != i}
        entries[seed] = PairNoise(float(d[i, i]), p, len(labels), covariances=others)
    return entries


def _normal_p(difference: float, variance: float) -> float:
    from scipy import stats

    if variance <= 0:
        return 1.0 if difference == 0 else 0.0
    return float(2 * stats.norm.sf(abs(difference) / math.sqrt(variance)))


@dataclass(frozen=True)
class ClaimOutcome:
    """A claim, the intervals it was judged on, and its verdict.

    ``left``/``right``: mean and CI of each side over seeds (for scaling claims, the
    families' fitted figure); ``right`` is ``None`` and ``target`` set for a threshold.
    ``difference``: CI of the paired differences ``left - right`` (``None`` for a threshold).
    """

    claim: Claim
    verdict: str
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
    test: Test | None = None
    """The one-sided tests that decided it (``suite.decisions``)."""
    noise: Noise | None = None
    """Seed spread and test-set variance of the tested figure."""
    plan: Plan | None = None
    """For an underpowered claim: its power now and the seeds (test rows) it needs."""
    shifted: Interval | None = None
    """For a threshold claim: the 90% interval of ``value - target``."""
    holm_p: float = math.nan
    """The deciding p after Holm's correction over the report's empirical claims."""
    unconverged: tuple[str, ...] = ()
    """Runs the claim rests on whose validation AUC was still rising when they stopped."""

    @property
    def adjusted(self) -> str:
        """The verdict after Holm's correction over the report's family: a decided verdict
        whose Holm p is not below ``ALPHA`` reads :data:`AFTER_HOLM` (the unadjusted one
        is :attr:`verdict`; a claim outside the family, with no Holm p, keeps it)."""
        if self.verdict in DECIDED and not math.isnan(self.holm_p) and self.holm_p >= ALPHA:
            return AFTER_HOLM
        return self.verdict

    @property
    def label(self) -> str:
        """The Holm-decided verdict as the report prints it (:attr:`adjusted`)."""
        return self._label(self.adjusted)

    @property
    def unadjusted_label(self) -> str:
        """The verdict before Holm's correction, as the report prints it."""
        return self._label(self.verdict)

    def _label(self, text: str) -> str:
        if text == UNDERPOWERED and self.plan is not None:
            text = f"{UNDERPOWERED} ({self.plan.text()})"
        return f"{text} †" if self.unconverged else text


def _nan_interval(n: int = 0) -> Interval:
    return Interval(math.nan, math.nan, math.nan, n)


def common_seeds(figures: SeedFigures, runs: list[str]) -> list[int]:
    """Seeds every one of ``runs`` has, sorted (the pairing of the claim's values)."""
    sets = [set(figures.get(r, {})) for r in runs]
    return sorted(set.intersection(*sets)) if sets else []


def modelled_alltoall_speedup(
    figures: SeedFigures, run: str, link_gb_per_s: float, seeds: list[int]
) -> np.ndarray:
    """``[len(seeds)]``: how much faster the run's all-to-all payload crosses a link of
    ``link_gb_per_s`` GB/s through its codec than raw: ``(raw / L) / (codec s + wire / L)``,
    from the run's ``comm_raw_bytes``, ``comm_wire_bytes`` and ``comm_codec_seconds`` (the
    codec's own encode and decode time as measured where the run trained). A model of the
    exchange alone: compute overlapping it and the collective's latency are left out."""
    raw, wire, codec = (resolve(f"{run}.{m}", figures, seeds) for m in ALLTOALL_METRICS)
    link = link_gb_per_s * 1e9
    return (raw / link) / (codec + wire / link)


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
    if kind == MODELLED_ALLTOALL:
        return modelled_alltoall_speedup(figures, a, float(b), seeds)
    x, y = resolve(a, figures, seeds), resolve(b, figures, seeds)
    if kind == "ratio":
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(y != 0, x / y, math.nan)
    return x - y


def _interval(values: np.ndarray, method: str) -> Interval:
    return (
        bootstrap_ci(values, INTERVAL_LEVEL, resamples=BOOTSTRAP_RESAMPLES)
        if method == "bootstrap"
        else mean_ci(values, INTERVAL_LEVEL)
    )


def auc_runs(claim: Claim) -> tuple[str, str] | None:
    """The runs whose test AUCs a claim rests on: ``(a, b)`` for ``a.test_auc`` against
    ``b.test_auc`` or for ``{diff: [a.test_auc, b.test_auc]}`` against a number (the same
    paired difference, shifted), ``(a, "")`` for ``a.test_auc`` against a number; None
    otherwise."""
    if claim.kind in SCALING:
        return None
    if isinstance(claim.left, dict) and list(claim.left) == ["diff"] and not claim.comparative:
        refs = [ref.split(".", 1) for ref in claim.left["diff"]]
        if all(metric == AUC_METRIC for _, metric in refs):
            return (refs[0][0], refs[1][0])
        return None
    if not isinstance(claim.left, str):
        return None
    left, left_metric = claim.left.split(".", 1)
    if left_metric != AUC_METRIC:
        return None
    if not claim.comparative:
        return (left, "")
    if not isinstance(claim.right, str):
        return None
    right, right_metric = claim.right.split(".", 1)
    return (left, right) if right_metric == AUC_METRIC else None


def claim_test_noise(
    claim: Claim, noise: NoiseLookup | None, seeds: list[int]
) -> tuple[list[PairNoise], str]:
    """Each seed's test-set noise of the claim's AUC figure (empty when the claim rests on
    no test AUC), and a note where some seed's noise is missing."""
    runs = auc_runs(claim)
    if runs is None:
        return [], ""
    if noise is None:
        return [], "no test predictions: test-set noise left out"
    found = [noise(runs[0], runs[1], seed) for seed in seeds]
    if any(f is None for f in found):
        return [], "test predictions missing or on different examples: test-set noise left out"
    return [f for f in found if f is not None], ""


def shared_note(pairs: int, seeds: int) -> str:
    """The report's note where the test set's shared variance rests on fewer than all
    ``seeds * (seeds - 1) / 2`` seed pairs (:func:`shared_of`); empty where it rests on all."""
    total = seeds * (seeds - 1) // 2
    if pairs >= total:
        return ""
    if pairs == 0:
        return (
            "no two seeds' test predictions were judged together: the test set's shared "
            "variance is bounded by the mean per-seed variance"
        )
    return (
        f"the test set's shared variance rests on {pairs} of {total} seed pairs (the seeds "
        "trained in different sittings were not judged together)"
    )


def bound_of(claim: Claim, direction: str) -> float:
    """The bound the claim's figure ``d`` (a paired difference, or a value minus its target)
    is tested against: ``margin``, or ``-margin`` for ``less``; for a non-inferiority claim
    the loss it tolerates, ``-margin`` (``+margin`` for ``less``: lower is better)."""
    sign = -1.0 if direction == "less" else 1.0
    if claim.form == "non_inferiority":
        sign = -sign
    return sign * claim.margin


def evaluate(claim: Claim, figures: SeedFigures, noise: NoiseLookup | None = None) -> ClaimOutcome:
    """Judge a comparative or threshold claim on per-seed figures. A figure resting on test
    AUCs adds the test set's DeLong variance (from ``noise``) to the seeds' spread."""
    runs = sorted({ref.split(".", 1)[0] for ref in claim.references()})
    seeds = common_seeds(figures, runs)
    left = resolve(claim.left, figures, seeds)
    direction = DIRECTION[claim.kind]
    comparative = claim.comparative
    right = resolve(claim.right, figures, seeds) if comparative else None
    target = None if comparative else float(claim.right)  # type: ignore[arg-type]
    if np.isnan(left).any() or (right is not None and np.isnan(right).any()) or len(seeds) < 2:
        return _unmeasured(claim, seeds, "a figure is missing or fewer than two seeds", target)
    values = left - (right if right is not None else target)
    small = too_small(claim, figures, seeds)
    if small:
        return replace(_unmeasured(claim, seeds, small, target), verdict=NOT_TESTABLE)
    if claim.basis == "structural":
        return _structural(claim, values, left, right, target)
    pairs, note = claim_test_noise(claim, noise, seeds)
    if pairs and not note:
        note = shared_note(pairs[0].shared_pairs, len(seeds))
    found = noise_of(values, pairs[0].shared, pairs[0].rows) if pairs else noise_of(values)
    bound = bound_of(claim, direction)
    test = decide(float(values.mean()), found, direction, bound)  # type: ignore[arg-type]
    verdict_, plan_ = judged(claim, test, found, direction, bound)
    difference = Interval(test.estimate, test.low, test.high, len(seeds), 1 - 2 * ALPHA)
    if claim.ci == "bootstrap" and not pairs:
        difference = bootstrap_ci(values, level=1 - 2 * ALPHA, resamples=BOOTSTRAP_RESAMPLES)
        verdict_ = _interval_verdict(difference, direction, bound, verdict_)
    return ClaimOutcome(
        claim,
        verdict_,
        _interval(left, claim.ci),
        _interval(right, claim.ci) if right is not None else None,
        difference if comparative else None,
        test.p,
        target,
        note=note,
        delong={s: p.p_value for s, p in zip(seeds, pairs, strict=False) if comparative},
        test=test,
        noise=found,
        plan=plan_,
        shifted=None if comparative else difference,
    )


def too_small(claim: Claim, figures: SeedFigures, seeds: list[int]) -> str:
    """Why the claim's object is too small here to mean what the paper means (its
    ``testable_if`` figure below its floor, as a mean over ``seeds``), or ""."""
    gate = claim.testable_if
    if gate is None:
        return ""
    value = float(np.nanmean(resolve(gate.figure, figures, seeds)))
    if value >= gate.at_least:
        return ""
    return f"{gate.figure} is {value:,.6g} here, below {gate.at_least:,.6g}: {gate.why}"


def _structural(
    claim: Claim,
    values: np.ndarray,
    left: np.ndarray,
    right: np.ndarray | None,
    target: float | None,
) -> ClaimOutcome:
    """A structural claim (its figure set by the configuration) judged on the figure's mean
    over seeds as an exact value: no seed statistics, the seeds' spread in the note where
    the figure differs between seeds."""
    direction = DIRECTION[claim.kind]
    mean = float(values.mean())
    exact = noise_of([mean, mean])
    test = decide(mean, exact, direction, bound_of(claim, direction))  # type: ignore[arg-type]
    spread = float(values.max() - values.min())
    note = (
        f"structural: judged on the mean over {len(values)} seeds as exact (the figure ranges "
        f"{spread:.3g} over seeds)"
        if spread > 0
        else ""
    )
    n = len(values)

    def exact_interval(x: np.ndarray) -> Interval:
        m = float(x.mean())
        return Interval(m, m, m, n)

    return ClaimOutcome(
        claim,
        test.decision if test.decision != "undecided" else UNDERPOWERED,
        exact_interval(left),
        exact_interval(right) if right is not None else None,
        exact_interval(values) if right is not None else None,
        test.p,
        target,
        note=note,
        test=test,
        shifted=None if right is not None else exact_interval(values),
    )


def judged(
    claim: Claim, test: Test, found: Noise, direction: str, bound: float
) -> tuple[str, Plan | None]:
    """The verdict's words and, for an undecided claim, what deciding it would need: the
    seeds for 80% power at the observed effect with their 90% interval over the effect's
    interval and the chance that the point figure decides (:class:`~suite.decisions.Plan`;
    the label reads ``underpowered (needs n≈27 [90% CI 7–∞], 69% to decide at n=27)``)."""
    if test.decision in ("holds", "does not hold", "not measurable"):
        return test.decision, None
    p = plan(test.estimate, found, direction, bound)  # type: ignore[arg-type]
    return UNDERPOWERED, p


def _interval_verdict(ci: Interval, direction: str, bound: float, fallback: str) -> str:
    """A bootstrap claim's verdict from where its 90% interval lies (one-sided 5% tests)
    against the signed ``bound`` (:func:`bound_of`); ``fallback`` where it decides nothing."""
    within = direction == "within"
    found = interval_verdict(
        ci,
        direction,
        margin=bound if within else 0.0,
        target=0.0 if within else bound,  # type: ignore[arg-type]
    )
    return fallback if found == "inconclusive" else found


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


def _one_sided_p(draws: np.ndarray) -> float:
    """One-sided bootstrap p of ``draws`` on the side their centre lies (the side a
    verdict could reach at ``ALPHA`` from their 90% interval)."""
    draws = draws[np.isfinite(draws)]
    if len(draws) == 0:
        return math.nan
    return float(min((draws <= 0).mean(), (draws >= 0).mean()))


def _percentile(centre: float, draws: np.ndarray, n: int, level: float = LEVEL) -> Interval:
    """Percentile interval (``level``) of bootstrap ``draws`` over ``n`` seeds."""
    draws = draws[np.isfinite(draws)]
    if len(draws) < 2:
        return _nan_interval(n)
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return Interval(centre, float(low), float(high), n, level)


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
            claim, NOT_TESTABLE, left.exponent, right.exponent, None, math.nan, None,
            "fit fails the quality gate (" + note + ")",
        )  # fmt: skip
        return outcome, fits
    paired = len(left.replicates) == len(right.replicates)
    if claim.kind == "exponent_greater":
        # the paired bootstrap difference of the exponents, one-sided at ALPHA (its 90%
        # interval), not two 95% intervals apart (about alpha 0.006)
        draws = left.replicates[:, 2] - right.replicates[:, 2] if paired else np.array([])
        difference = _percentile(left.fit.b - right.fit.b, draws, len(seeds), 1 - 2 * ALPHA)
        result: str = interval_verdict(difference, "greater", 0.0)
        result = UNDERPOWERED if result == "inconclusive" else result
        return ClaimOutcome(
            claim, result, left.exponent, right.exponent, difference, _one_sided_p(draws), None,
            note,
        ), fits  # fmt: skip
    at = float(min(points[names[0]].compute.max(), points[names[1]].compute.max()))
    left_at, right_at = left.predict_interval(at), right.predict_interval(at)
    draws = _predictions(left.replicates, at) - _predictions(right.replicates, at) if paired else []
    difference = _percentile(
        left_at.mean - right_at.mean, np.asarray(draws), len(seeds), 1 - 2 * ALPHA
    )
    result = interval_verdict(difference, "less", claim.margin)
    result = UNDERPOWERED if result == "inconclusive" else result
    note = f"at C = {at:.3g} FLOPs; " + note
    return (
        ClaimOutcome(claim, result, left_at, right_at, difference, _one_sided_p(np.asarray(draws)), None, note),
        fits,
    )  # fmt: skip


def _predictions(replicates: np.ndarray, compute: float) -> np.ndarray:
    return replicates[:, 0] + replicates[:, 1] * compute ** (-replicates[:, 2])


def describe(claim: Claim) -> str:
    """The comparison in words and symbols, e.g. ``qr_4.test_auc - hash_4.test_auc > 0.001``."""

    def name(operand: Operand) -> str:
        if isinstance(operand, dict):
            ((kind, (a, b)),) = operand.items()
            if kind == MODELLED_ALLTOALL:
                return f"modelled all-to-all speed-up of {a} at {b} GB/s"
            return f"{a} / {b}" if kind == "ratio" else f"({a} - {b})"
        return str(operand)

    left, right, m = name(claim.left), name(claim.right), claim.margin
    if claim.form == "non_inferiority":
        d = f"{left} - {right}"
        return f"{d} > -{m:g}" if claim.kind == "greater" else f"{d} < {m:g}"
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
