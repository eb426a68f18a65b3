"""Judging a paper's claims on its runs' per-seed figures, with the test-set (DeLong) noise
of AUC pairs from the runs' predictions or the stored noise."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from suite.reproduce.claims import (
    NoiseLookup,
    PairNoise,
    SeedFigures,
    evaluate,
    evaluate_scaling,
    noise_from_predictions,
)
from suite.reproduce.outcome import PaperOutcome, RunRecord
from suite.reproduce.plan import needed_runs, selected_claims
from suite.reproduce.spec import Claim, ReproductionSpec
from suite.reproduce.store import NoiseKey


class NoiseBook:
    """The DeLong noise of AUC pairs by config hashes and seed: computed from the runs'
    kept predictions where they are here (``predictions``), else read from the stored
    entries; every entry asked for is kept in :attr:`entries` (to be stored)."""

    def __init__(self, stored: dict[NoiseKey, PairNoise], predictions: bool) -> None:
        self.stored = stored
        self.predictions = predictions
        self.entries: dict[NoiseKey, PairNoise] = {}

    def lookup(self, runs: dict[str, RunRecord]) -> NoiseLookup:
        """A :data:`NoiseLookup` over one paper's runs (run id -> record)."""

        def kept(run_id: str, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
            return runs[run_id].test_predictions(seed) if self.predictions else None

        seeds = sorted({s for rec in runs.values() for s in rec.seeds})
        computed = noise_from_predictions(kept, seeds)

        def lookup(left: str, right: str, seed: int) -> PairNoise | None:
            key = (
                runs[left].config.config_hash(),
                runs[right].config.config_hash() if right else "",
                seed,
            )
            found = computed(left, right, seed) or self.stored.get(key)
            if found is not None:
                self.entries[key] = found
            return found

        return lookup


def judge(
    spec: ReproductionSpec,
    profile: str,
    claim_ids: list[str] | None,
    records: dict[str, RunRecord],
    where: dict[tuple[str, str], str],
    book: NoiseBook | None = None,
) -> PaperOutcome:
    """The paper's claims judged on its runs' per-seed figures (the test-set noise of AUC
    figures from ``book``; from the runs' predictions when it is None)."""
    runs = {
        run_id: records[where[(spec.paper, run_id)]]
        for run_id in needed_runs(spec, profile, claim_ids)
        if (spec.paper, run_id) in where  # a curve point a method cannot reach is not planned
    }
    figures: SeedFigures = {rid: rec.per_seed for rid, rec in runs.items()}
    noise = (book or NoiseBook({}, predictions=True)).lookup(runs)
    families = {f: list(ms) for f, ms in spec.profiles[profile].families.items()}
    claims, fits, cache = [], {}, {}
    for claim in selected_claims(spec, profile, claim_ids):
        if claim.families():
            outcome, found = evaluate_scaling(claim, families, figures, cache)
            fits.update(found)
            claims.append(outcome)
        else:
            outcome = evaluate(claim, figures, noise)
            claims.append(replace(outcome, timing=is_timing(claim, runs)))
    return PaperOutcome(spec, profile, runs, claims, fits)


def is_timing(claim: Claim, runs: dict[str, RunRecord]) -> bool:
    """Whether a claim rests on a machine-dependent figure (a ``measured`` metric: a
    timing, a throughput, an allocator peak), whose verdict may differ between reruns."""
    for ref in claim.references():
        run, metric = ref.split(".", 1)
        if runs[run].metric_kind(metric) == "measured":
            return True
    return False
