"""Synthetic CTR data from a hidden teacher with planted feature interactions.

Ids are Zipf-skewed per feature (popular ids get a random, not a small, id); the label is
drawn from ``sigmoid(logit)`` where the teacher's logit sums first-order weights, planted
pairwise latent dot products, planted third-order products and nonlinear dense effects,
and a bias calibrated so the mean click rate matches the real dataset's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class SyntheticProfile:
    """What a synthetic dataset imitates: its features and click rate."""

    sparse_names: list[str]
    real_cardinalities: list[int]
    dense_names: list[str] = field(default_factory=list)
    base_ctr: float = 0.25
    strong_pairs: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class TeacherSettings:
    """Knobs of the generator (the dataset's typed options map onto these)."""

    rows: int
    vocab_scale: float
    keep_below: int
    zipf: float
    pairs: int
    triples: int
    signal: float
    seed: int


def scaled_cardinalities(real: list[int], scale: float, keep_below: int) -> list[int]:
    """Keep small vocabularies; scale large ones by ``scale``, never below ``keep_below``."""
    return [n if n <= keep_below else max(keep_below, math.ceil(n * scale)) for n in real]


def _zipf_ids(rng: np.random.Generator, n: int, rows: int, s: float) -> np.ndarray:
    probs = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    cdf = np.cumsum(probs / probs.sum())
    ranks = np.minimum(np.searchsorted(cdf, rng.random(rows)), n - 1)
    return rng.permutation(n)[ranks]


def _calibrate_bias(logit: np.ndarray, ctr: float) -> float:
    lo, hi = -20.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if (1 / (1 + np.exp(-(logit + mid)))).mean() < ctr:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def generate(
    profile: SyntheticProfile, settings: TeacherSettings
) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Draw ``rows`` examples.

    Returns:
        cardinalities (per sparse feature), dense ``[N, Dd]`` float32 (already
        ``log1p``-transformed, as prepared real data is), sparse ``[N, F]`` int64,
        label ``[N]`` float32 and the teacher's click probability ``[N]`` float64.
    """
    rng = np.random.default_rng(settings.seed)
    cards = scaled_cardinalities(
        profile.real_cardinalities, settings.vocab_scale, settings.keep_below
    )
    n_rows, n_sparse, n_dense = settings.rows, len(cards), len(profile.dense_names)
    k = 8
    sparse = np.stack([_zipf_ids(rng, n, n_rows, settings.zipf) for n in cards], axis=1)

    teacher_rng = np.random.default_rng([settings.seed, 1])
    first = [teacher_rng.normal(0, 0.5, n) for n in cards]
    latent = [teacher_rng.normal(0, 1 / math.sqrt(k), (n, k)) for n in cards]
    scalar = [teacher_rng.normal(0, 1, n) for n in cards]

    logit = np.zeros(n_rows)
    for f in range(n_sparse):
        logit += first[f][sparse[:, f]]
    candidates = [(a, b) for a in range(n_sparse) for b in range(a + 1, n_sparse)]
    chosen = list(profile.strong_pairs)
    picks = teacher_rng.choice(
        len(candidates), size=min(settings.pairs, len(candidates)), replace=False
    )
    chosen += [candidates[i] for i in picks if candidates[i] not in chosen]
    for a, b in chosen:
        weight = 2.0 if (a, b) in profile.strong_pairs else 1.0
        logit += (
            weight * np.einsum("nk,nk->n", latent[a][sparse[:, a]], latent[b][sparse[:, b]]) * 1.5
        )
    for _ in range(settings.triples):
        a, b, c = teacher_rng.choice(n_sparse, size=3, replace=False)
        logit += 0.6 * scalar[a][sparse[:, a]] * scalar[b][sparse[:, b]] * scalar[c][sparse[:, c]]

    dense = np.zeros((n_rows, n_dense), dtype=np.float32)
    if n_dense:
        # heavy-tailed counts whose level depends on a categorical feature's latent
        anchor = teacher_rng.integers(0, n_sparse, n_dense)
        mu = teacher_rng.uniform(0.0, 3.0, n_dense)
        counts = np.floor(
            np.exp(
                mu
                + 0.8 * rng.standard_normal((n_rows, n_dense))
                + 0.5 * np.stack([scalar[a][sparse[:, a]] for a in anchor], axis=1)
            )
        )
        dense = np.log1p(counts).astype(np.float32)
        centred = dense - dense.mean(axis=0)
        weights = teacher_rng.normal(0, 0.6, n_dense)
        logit += np.tanh(centred) @ weights
        f = int(teacher_rng.integers(0, n_sparse))
        logit += 0.8 * centred[:, 0] * scalar[f][sparse[:, f]]

    logit = settings.signal * (logit - logit.mean()) / (logit.std() + 1e-12)
    bias = _calibrate_bias(logit, profile.base_ctr)
    prob = 1 / (1 + np.exp(-(logit + bias)))
    label = (rng.random(n_rows) < prob).astype(np.float32)
    return cards, dense, sparse.astype(np.int64), label, prob
