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
    # the Kaggle-shaped regime sets both (None: scale by vocab_scale, one zipf for all)
    cardinalities: tuple[int, ...] | None = None
    zipf_per_feature: tuple[float, ...] | None = None


def scaled_cardinalities(real: list[int], scale: float, keep_below: int) -> list[int]:
    """Keep small vocabularies; scale large ones by ``scale``, never below ``keep_below``."""
    return [n if n <= keep_below else max(keep_below, math.ceil(n * scale)) for n in real]


def kaggle_cardinalities(
    real: list[int], train_rows: int, examples_per_row: float, floor: int = 2
) -> list[int]:
    """Every table scaled by one factor so that ``train_rows / sum(rows)`` is
    ``examples_per_row`` (to within one row per table), each table kept between
    ``min(real, floor)`` rows and its real size.

    Below about ``examples_per_row * floor * len(real)`` training rows the floors win and
    the ratio comes out lower.
    """
    target = train_rows / examples_per_row

    def sizes(scale: float) -> list[int]:
        return [min(n, max(min(n, floor), math.ceil(n * scale))) for n in real]

    lo, hi = 0.0, 1.0
    for _ in range(64):  # the smallest scale whose total reaches the target
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(sizes(mid)) < target else (lo, mid)
    return sizes(hi)


def zipf_distinct(n: int, s: float, rows: int) -> float:
    """Expected distinct ids among ``rows`` draws from Zipf(``s``) over ``n`` ids."""
    probs = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    probs /= probs.sum()
    return float((-np.expm1(rows * np.log1p(-probs))).sum())


def fit_zipf(n: int, rows: int, distinct: int, top_share: float, iters: int = 24) -> float:
    """The Zipf exponent over ``n`` ids that explains a sample of ``rows`` draws.

    Matches the sample's ``distinct`` ids when some ids went unseen (``distinct < n``),
    else (every id seen: the count says only that ``s`` is small) its most frequent id's
    share ``top_share``. Bisection on ``[0, 8]``.
    """
    lo, hi = 0.0, 8.0
    for _ in range(iters):
        mid = (lo + hi) / 2
        if distinct < n:
            flatter = zipf_distinct(n, mid, rows) > distinct
        else:
            flatter = 1.0 / float((np.arange(1, n + 1, dtype=np.float64) ** -mid).sum()) < top_share
        lo, hi = (mid, hi) if flatter else (lo, mid)
    return (lo + hi) / 2


def draw_like_a_sample(
    real: list[int], exponents: list[float], rows: int, seed: int
) -> tuple[list[int], np.ndarray]:
    """``rows`` draws from each feature's Zipf over its REAL vocabulary, ids then re-counted
    as ``prepare`` counts a small raw sample (the ids seen, plus ids 0 and 1).

    The check of a fitted tail against a real sample of the same rows: a Kaggle-shaped
    regime at those rows has far fewer embedding rows than the sample's own vocabulary.

    Returns:
        cardinalities (seen ids + 2 per feature) and sparse ``[rows, F]`` int64.
    """
    rng = np.random.default_rng(seed)
    columns, cards = [], []
    for n, s in zip(real, exponents, strict=True):
        seen, ids = np.unique(_zipf_ids(rng, n, rows, s), return_inverse=True)
        columns.append(ids + 2)
        cards.append(int(seen.shape[0]) + 2)
    return cards, np.stack(columns, axis=1).astype(np.int64)


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


def generation_bytes(rows: int, num_sparse: int, num_dense: int) -> int:
    """Bytes :func:`generate` needs at least for ``rows`` rows: the arrays it returns
    (sparse int64, dense float32, label float32, probability float64), before any of its
    temporaries."""
    return rows * (8 * num_sparse + 4 * num_dense + 4 + 8)


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
    cards = (
        list(settings.cardinalities)
        if settings.cardinalities is not None
        else scaled_cardinalities(
            profile.real_cardinalities, settings.vocab_scale, settings.keep_below
        )
    )
    n_rows, n_sparse, n_dense = settings.rows, len(cards), len(profile.dense_names)
    k = 8
    exponents = settings.zipf_per_feature or (settings.zipf,) * n_sparse
    sparse = np.stack(
        [_zipf_ids(rng, n, n_rows, s) for n, s in zip(cards, exponents, strict=True)], axis=1
    )

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
