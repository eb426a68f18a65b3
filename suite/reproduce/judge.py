"""Judging a paper's claims on its runs' per-seed figures, with the test-set (DeLong) noise
of AUC pairs from the runs' predictions or the stored noise."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

import numpy as np

from suite.reproduce.claims import (
    NOT_TESTABLE,
    ClaimOutcome,
    NoiseLookup,
    PairNoise,
    SeedFigures,
    evaluate,
    evaluate_scaling,
    merge_noise,
    pair_noise,
    shared_of,
)
from suite.reproduce.outcome import PaperOutcome, SeededRun
from suite.reproduce.plan import ReproductionPlan
from suite.reproduce.spec import Claim, ReproductionSpec
from suite.reproduce.store import NoiseKey
from suite.stats import auc_components

COMPONENTS_KEPT = 100
"""Jobs whose DeLong components a :class:`NoiseBook` keeps (8 bytes a test row each: 800
MB at 1M rows), about one curve budget's methods over ten seeds."""


class NoiseBook:
    """The DeLong noise of AUC pairs by config hashes and seed: computed from the runs'
    kept predictions where they are here (``predictions``), merged over the stored entries
    (:func:`~suite.reproduce.claims.merge_noise`); every pair asked for keeps its entries
    in :attr:`entries` (to be stored), and each answer carries the ``shared`` variance of
    the pair's seeds (:func:`~suite.reproduce.claims.shared_of`)."""

    def __init__(self, stored: dict[NoiseKey, PairNoise], predictions: bool) -> None:
        self.stored = stored
        self.predictions = predictions
        self.entries: dict[NoiseKey, PairNoise] = {}
        self._merged: dict[tuple[str, str, tuple[int, ...]], dict[int, PairNoise]] = {}
        self._components: OrderedDict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = (
            OrderedDict()
        )

    def components(
        self, config_hash: str, seed: int, labels: np.ndarray, logits: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """DeLong's structural components of one job's predictions (``labels, logits
        [N]``), kept for the :data:`COMPONENTS_KEPT` jobs used last: a run takes part in
        many pairs (a curve's method in one per other method at its budget)."""
        key = (config_hash, seed)
        if key in self._components:
            self._components.move_to_end(key)
            return self._components[key]
        v10, v01 = auc_components(labels, logits[None])
        self._components[key] = found = (v10[0], v01[0])
        if len(self._components) > COMPONENTS_KEPT:
            self._components.popitem(last=False)
        return found

    def stored_entry(self, hashes: tuple[str, str], seed: int) -> PairNoise | None:
        """The stored entry of a pair under one seed, in either order: the noise of
        ``AUC(a) - AUC(b)`` is that of ``AUC(b) - AUC(a)`` (variance, covariances and the
        two-sided p alike), so a claim that turned its sides round finds it."""
        found = self.stored.get((*hashes, seed))
        if found is None and hashes[1]:
            found = self.stored.get((hashes[1], hashes[0], seed))
        return found

    def lookup(self, runs: dict[str, SeededRun]) -> NoiseLookup:
        """A :data:`NoiseLookup` over one paper's runs (run id -> record)."""

        def kept(run_id: str, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
            return runs[run_id].test_predictions(seed) if self.predictions else None

        seeds = sorted({s for rec in runs.values() for s in rec.seeds})

        def components(
            run_id: str, seed: int, labels: np.ndarray, logits: np.ndarray
        ) -> tuple[np.ndarray, np.ndarray]:
            return self.components(runs[run_id].config.config_hash(), seed, labels, logits)

        def entries_of(left: str, right: str) -> dict[int, PairNoise]:
            hashes = (
                runs[left].config.config_hash(),
                runs[right].config.config_hash() if right else "",
            )
            key = (*hashes, tuple(seeds))
            if key not in self._merged:
                computed = None
                if self.predictions:
                    computed = pair_noise(kept, left, right, seeds, components)
                found = {}
                for seed in seeds:
                    new = (computed or {}).get(seed)
                    entry = merge_noise(self.stored_entry(hashes, seed), new)
                    if entry is not None:
                        found[seed] = self.entries[(*hashes, seed)] = entry
                self._merged[key] = found
            return self._merged[key]

        def lookup(left: str, right: str, seed: int) -> PairNoise | None:
            found = entries_of(left, right)
            if seed not in found:
                return None
            shared, pairs = shared_of(found, seeds)
            return replace(found[seed], shared=shared, shared_pairs=pairs)

        return lookup


def paper_runs(
    plan: ReproductionPlan, spec: ReproductionSpec, records: dict[str, SeededRun]
) -> dict[str, SeededRun]:
    """The records of the runs the paper's selected claims need, by run id."""
    return {
        run_id: records[plan.where[(spec.paper, run_id)]]
        for run_id in plan.needed[spec.paper]
        if (spec.paper, run_id) in plan.where  # a curve point a method cannot reach
    }


def keep_noise(
    plan: ReproductionPlan,
    spec: ReproductionSpec,
    records: dict[str, SeededRun],
    book: NoiseBook,
) -> None:
    """Put the noise of every pair the paper's report uses
    (:meth:`~suite.reproduce.plan.ReproductionPlan.noise_run_pairs`) into ``book.entries``,
    for each seed whose runs are here, whether or not the claims can be judged yet."""
    runs = paper_runs(plan, spec, records)
    noise = book.lookup(runs)
    for left, right in plan.noise_run_pairs(spec):
        if left in runs and (not right or right in runs):
            noise(left, right, -1)


def judge(
    plan: ReproductionPlan,
    spec: ReproductionSpec,
    records: dict[str, SeededRun],
    book: NoiseBook | None = None,
) -> PaperOutcome:
    """The paper's claims judged on its runs' per-seed figures (the test-set noise of AUC
    figures from ``book``; from the runs' predictions when it is None)."""
    runs = paper_runs(plan, spec, records)
    figures: SeedFigures = {rid: rec.per_seed for rid, rec in runs.items()}
    noise = (book or NoiseBook({}, predictions=True)).lookup(runs)
    families = {f: list(ms) for f, ms in spec.profiles[plan.profile].families.items()}
    claims, fits, cache = [], {}, {}
    for claim in plan.claims[spec.paper]:
        if claim.families():
            outcome, found = evaluate_scaling(claim, families, figures, cache)
            fits.update(found)
            claims.append(fit_on_improving(outcome, families, runs))
        else:
            outcome = evaluate(claim, figures, noise)
            claims.append(replace(outcome, timing=is_timing(claim, runs)))
    unreachable = {
        run: why for (paper, run), why in plan.unreachable.items() if paper == spec.paper
    }
    return PaperOutcome(spec, plan.profile, runs, claims, fits, noise, unreachable)


def fit_on_improving(
    outcome: ClaimOutcome, families: dict[str, list[str]], runs: dict[str, SeededRun]
) -> ClaimOutcome:
    """A scaling claim whose fit rests on runs still improving when they stopped reads
    ``not testable at this scale``: their figures are not the sizes' converged losses a
    scaling law fits."""
    members = [f"{f}/{m}" for f in outcome.claim.families() for m in families.get(f, [])]
    rising = [m for m in members if m in runs and still_rising(runs[m])]
    if not rising or outcome.verdict == "not measurable":
        return outcome
    why = (
        f"fit on runs still improving when they stopped ({len(rising)} of {len(members)} "
        "sizes' validation AUC still rising): not the converged losses a scaling law fits"
    )
    return replace(outcome, verdict=NOT_TESTABLE, note=f"{why}; {outcome.note}")


def still_rising(rec: SeededRun) -> bool:
    """Whether any seed of the run was still improving when it stopped."""
    return any(bool(r.details.get("still_improving")) for r in rec.results.values())


def is_timing(claim: Claim, runs: dict[str, SeededRun]) -> bool:
    """Whether a claim rests on a machine-dependent figure (a ``measured`` metric: a
    timing, a throughput, an allocator peak), whose verdict may differ between reruns."""
    for ref in claim.references():
        run, metric = ref.split(".", 1)
        if runs[run].metric_kind(metric) == "measured":
            return True
    return False
