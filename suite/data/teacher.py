"""Synthetic CTR data from a hidden teacher with planted feature interactions.

Ids are Zipf-skewed per feature (popular ids get a random, not a small, id); the label is
drawn from ``sigmoid(logit)`` where the teacher's logit sums first-order weights, planted
pairwise latent dot products, planted third-order products and nonlinear dense effects,
and a bias calibrated so the mean click rate matches the real dataset's. Every weight is
drawn per id whatever its popularity, so a rare id carries as much signal per occurrence
as a frequent one.

Two ways to draw: :func:`generate` draws the rows i.i.d. over fixed tables; with a
:class:`Drift`, :func:`generate_over_days` draws them over days whose id popularity and
teacher weights drift, test a later day, and the tables hold the ids seen in training (as
``prepare`` counts real data), so test meets ids training never saw. ``draw_seed`` (the
run's seed, under a dataset's ``draw: per_seed``) joins the data's seed in both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

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
    # days, their popularity and weight drift, tables of the ids seen in training
    # (None: one i.i.d. draw, tables of every id; generate_over_days)
    drift: Drift | None = None
    # the run's seed under dataset draw per_seed (None: the data's seed alone draws it)
    draw_seed: int | None = None


@dataclass(frozen=True)
class Drift:
    """Time in the generator (:func:`generate_over_days`): the rows are ``days`` days in
    order, training the first ``days - 1``, validation and test (the last ``later_rows``
    rows) the last. Each later day an id whose popularity rank has Zipf probability ``p``
    is replaced by a new id with probability ``churn / (1 + p / stable_share)`` (ids taking
    much more than ``stable_share`` of their feature's lookups stay, the tail churns at
    about ``churn``), and every teacher weight takes an AR(1) step of correlation
    ``weight_corr``.
    """

    days: int
    later_rows: int
    churn: float
    stable_share: float
    weight_corr: float

    def __post_init__(self) -> None:
        if self.days < 2 or self.later_rows < 1:
            raise ValueError(f"drift needs days >= 2 and later_rows >= 1, got {self}")
        if not (0 <= self.churn <= 1 and 0 <= self.weight_corr <= 1 and self.stable_share > 0):
            raise ValueError(f"drift needs churn, weight_corr in [0, 1], stable_share > 0: {self}")


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


def _zipf_ranks(
    rng: np.random.Generator, n: int, rows: int, s: float
) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` popularity ranks ``[rows]`` (0: the most popular) drawn from Zipf(``s``)
    over ``n`` ids, and the ranks' probabilities ``[n]``."""
    probs = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    probs /= probs.sum()
    ranks = np.minimum(np.searchsorted(np.cumsum(probs), rng.random(rows)), n - 1)
    return ranks.astype(np.int64), probs


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


LATENT_DIM = 8
"""k of the teacher's latent vectors."""


@dataclass(frozen=True)
class Teacher:
    """The hidden teacher: weights per id of every feature and the interactions it plants.

    ``first[f]`` ``[n_f]``, ``latent[f]`` ``[n_f, k]`` and ``scalar[f]`` ``[n_f]`` are drawn
    per id, independently of how popular the id is, so a rare id moves the logit of each row
    it is in as much as a frequent one does. ``pairs``: ``(a, b, weight)`` of the planted
    pairwise latent dot products; ``triples``: features of the third-order products;
    ``anchor`` ``[Dd]``, ``mu`` ``[Dd]``, ``dense_weights`` ``[Dd]`` and ``dense_feature``:
    the dense features' level (a categorical feature's scalar moves it), their effect and
    the feature whose scalar multiplies the first dense feature.
    """

    first: list[np.ndarray]
    latent: list[np.ndarray]
    scalar: list[np.ndarray]
    pairs: list[tuple[int, int, float]]
    triples: list[tuple[int, int, int]]
    anchor: np.ndarray
    mu: np.ndarray
    dense_weights: np.ndarray
    dense_feature: int

    def drifted(self, rng: np.random.Generator, corr: float) -> Teacher:
        """The teacher a day later: every weight an AR(1) step, ``corr * w + sqrt(1 - corr^2)
        * fresh``, fresh drawn as the weight was (so each weight keeps its spread)."""
        keep = math.sqrt(1 - corr**2)
        k = self.latent[0].shape[1] if self.latent else LATENT_DIM
        return replace(
            self,
            first=[corr * w + keep * rng.normal(0, 0.5, w.shape) for w in self.first],
            latent=[
                corr * w + keep * rng.normal(0, 1 / math.sqrt(k), w.shape) for w in self.latent
            ],
            scalar=[corr * w + keep * rng.normal(0, 1, w.shape) for w in self.scalar],
        )


def draw_teacher(
    rng: np.random.Generator, cards: list[int], profile: SyntheticProfile, settings: TeacherSettings
) -> Teacher:
    """The teacher over ``cards[f]`` ids per feature, drawn from ``rng`` in a fixed order."""
    n_sparse, n_dense, k = len(cards), len(profile.dense_names), LATENT_DIM
    first = [rng.normal(0, 0.5, n) for n in cards]
    latent = [rng.normal(0, 1 / math.sqrt(k), (n, k)) for n in cards]
    scalar = [rng.normal(0, 1, n) for n in cards]
    candidates = [(a, b) for a in range(n_sparse) for b in range(a + 1, n_sparse)]
    chosen = list(profile.strong_pairs)
    picks = rng.choice(len(candidates), size=min(settings.pairs, len(candidates)), replace=False)
    chosen += [candidates[i] for i in picks if candidates[i] not in chosen]
    pairs = [(a, b, 2.0 if (a, b) in profile.strong_pairs else 1.0) for a, b in chosen]
    triples: list[tuple[int, int, int]] = []
    for _ in range(settings.triples):
        a, b, c = (int(x) for x in rng.choice(n_sparse, size=3, replace=False))
        triples.append((a, b, c))
    anchor: np.ndarray = np.zeros(0, dtype=np.int64)
    mu: np.ndarray = np.zeros(0)
    dense_weights: np.ndarray = np.zeros(0)
    dense_feature = 0
    if n_dense:
        anchor = rng.integers(0, n_sparse, n_dense)
        mu = rng.uniform(0.0, 3.0, n_dense)
        dense_weights = rng.normal(0, 0.6, n_dense)
        dense_feature = int(rng.integers(0, n_sparse))
    return Teacher(first, latent, scalar, pairs, triples, anchor, mu, dense_weights, dense_feature)


def sparse_logit(teacher: Teacher, sparse: np.ndarray) -> np.ndarray:
    """The teacher's logit from the ids alone, ``[N]`` float64, for ids ``sparse [N, F]``:
    first-order weights, the planted pairs, then the planted triples."""
    logit = np.zeros(sparse.shape[0])
    for f in range(sparse.shape[1]):
        logit += teacher.first[f][sparse[:, f]]
    for a, b, weight in teacher.pairs:
        logit += (
            weight
            * np.einsum(
                "nk,nk->n", teacher.latent[a][sparse[:, a]], teacher.latent[b][sparse[:, b]]
            )
            * 1.5
        )
    for a, b, c in teacher.triples:
        s = teacher.scalar
        logit += 0.6 * s[a][sparse[:, a]] * s[b][sparse[:, b]] * s[c][sparse[:, c]]
    return logit


def dense_scalars(teacher: Teacher, sparse: np.ndarray) -> np.ndarray:
    """The scalars the dense features read, ``[N, Dd + 1]``: each dense feature's anchor's,
    then ``dense_feature``'s (it multiplies the first dense feature in the logit)."""
    if not teacher.mu.size:
        return np.zeros((sparse.shape[0], 0))
    features = [*teacher.anchor.tolist(), teacher.dense_feature]
    return np.stack([teacher.scalar[a][sparse[:, a]] for a in features], axis=1)


def add_dense(
    rng: np.random.Generator, teacher: Teacher, scalars: np.ndarray, logit: np.ndarray
) -> np.ndarray:
    """Heavy-tailed counts whose level moves with a categorical feature's scalar
    (``scalars``: :func:`dense_scalars`, ``[N, Dd + 1]``), ``log1p``-transformed as prepared
    real data is; their nonlinear effect is added to ``logit`` ``[N]`` in place.

    Returns:
        dense ``[N, Dd]`` float32.
    """
    n_rows, n_dense = logit.shape[0], teacher.mu.shape[0]
    if not n_dense:
        return np.zeros((n_rows, 0), dtype=np.float32)
    counts = np.floor(
        np.exp(
            teacher.mu + 0.8 * rng.standard_normal((n_rows, n_dense)) + 0.5 * scalars[:, :n_dense]
        )
    )
    dense = np.log1p(counts).astype(np.float32)
    centred = dense - dense.mean(axis=0)
    logit += np.tanh(centred) @ teacher.dense_weights
    logit += 0.8 * centred[:, 0] * scalars[:, n_dense]
    return dense


def _labels(
    rng: np.random.Generator, logit: np.ndarray, signal: float, ctr: float
) -> tuple[np.ndarray, np.ndarray]:
    """Labels ``[N]`` float32 and click probabilities ``[N]`` float64 from raw ``logit``:
    scaled to std ``signal``, the bias calibrated so the mean probability is ``ctr``."""
    logit = signal * (logit - logit.mean()) / (logit.std() + 1e-12)
    bias = _calibrate_bias(logit, ctr)
    prob = 1 / (1 + np.exp(-(logit + bias)))
    label = (rng.random(logit.shape[0]) < prob).astype(np.float32)
    return label, prob


def _seeds(settings: TeacherSettings) -> tuple[int | list[int], list[int]]:
    """Seeds of the sample's and the teacher's generators: the data's ``seed`` alone (draw
    fixed), or with the run's seed too (draw per seed: ``draw_seed``)."""
    if settings.draw_seed is None:
        return settings.seed, [settings.seed, 1]
    return [settings.seed, 2, settings.draw_seed], [settings.seed, 3, settings.draw_seed]


def generate(
    profile: SyntheticProfile, settings: TeacherSettings
) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Draw ``rows`` examples (over days, the later ones unseen ids and all, with
    ``settings.drift``: :func:`generate_over_days`).

    Returns:
        cardinalities (per sparse feature), dense ``[N, Dd]`` float32 (already
        ``log1p``-transformed, as prepared real data is), sparse ``[N, F]`` int64,
        label ``[N]`` float32 and the teacher's click probability ``[N]`` float64.
    """
    if settings.drift is not None:
        return generate_over_days(profile, settings)
    sample_seed, teacher_seed = _seeds(settings)
    rng = np.random.default_rng(sample_seed)
    cards = (
        list(settings.cardinalities)
        if settings.cardinalities is not None
        else scaled_cardinalities(
            profile.real_cardinalities, settings.vocab_scale, settings.keep_below
        )
    )
    n_rows, n_sparse = settings.rows, len(cards)
    exponents = settings.zipf_per_feature or (settings.zipf,) * n_sparse
    sparse = np.stack(
        [_zipf_ids(rng, n, n_rows, s) for n, s in zip(cards, exponents, strict=True)], axis=1
    )
    teacher = draw_teacher(np.random.default_rng(teacher_seed), cards, profile, settings)
    logit = sparse_logit(teacher, sparse)
    dense = add_dense(rng, teacher, dense_scalars(teacher, sparse), logit)
    label, prob = _labels(rng, logit, settings.signal, profile.base_ctr)
    return cards, dense, sparse.astype(np.int64), label, prob


def days_of_rows(rows: int, train_rows: int, days: int) -> np.ndarray:
    """The day of each of ``rows`` rows in order, ``[rows]`` int64: the first ``train_rows``
    spread evenly over days ``0 .. days-2``, the rest (validation, test) day ``days-1``."""
    day = np.full(rows, days - 1, dtype=np.int64)
    day[:train_rows] = np.arange(train_rows, dtype=np.int64) * (days - 1) // train_rows
    return day


def drifting_ids(
    rng: np.random.Generator, n: int, s: float, day: np.ndarray, drift: Drift
) -> np.ndarray:
    """Ids of one feature over days (``day``: :func:`days_of_rows`, ``[N]``), as indices
    ``[N]`` int64 ``0 .. K-1`` into the ``K`` distinct ids drawn (in no meaningful order).

    Each row draws a popularity rank from Zipf(``s``) over ``n``; which id holds a rank
    drifts: each later day, the id at rank ``r`` is replaced by a new one with probability
    ``churn / (1 + p_r / stable_share)`` (``p_r``: the rank's Zipf probability), so the
    tail churns at about ``churn`` and the frequent ids stay. A replaced id never comes
    back.
    """
    ranks, probs = _zipf_ranks(rng, n, day.shape[0], s)
    held, inverse = np.unique(ranks, return_inverse=True)
    hazard = drift.churn / (1 + probs[held] / drift.stable_share)
    replaced = rng.random((held.shape[0], drift.days - 1)) < hazard[:, None]
    # epoch of rank r on day d: the last day <= d whose replacement it saw (0: none)
    epochs = np.maximum.accumulate(
        np.where(replaced, np.arange(1, drift.days, dtype=np.int64), 0), axis=1
    )
    epochs = np.concatenate([np.zeros((held.shape[0], 1), dtype=np.int64), epochs], axis=1)
    keys = inverse.astype(np.int64) * drift.days + epochs[inverse, day]
    return np.unique(keys, return_inverse=True)[1].astype(np.int64)


def count_like_prepare(ids: np.ndarray, train_rows: int) -> tuple[int, np.ndarray]:
    """Re-number one feature's ids ``[N]`` as ``prepare`` numbers a raw dataset's values
    (``suite.data.vocab``, ``min_count`` 1): ids seen in the first ``train_rows`` rows
    become ``2, 3, ...`` in order of first appearance, every other id (seen only later) the
    rare id 1; 0 (a missing value) is kept free.

    Returns:
        the table's rows (ids seen in training + 2) and the ids ``[N]`` int64.
    """
    seen, first = np.unique(ids[:train_rows], return_index=True)
    table = np.ones(int(ids.max()) + 1, dtype=np.int64)
    table[seen[np.argsort(first, kind="stable")]] = np.arange(2, seen.shape[0] + 2)
    return int(seen.shape[0]) + 2, table[ids]


def generate_over_days(
    profile: SyntheticProfile, settings: TeacherSettings
) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Draw ``rows`` examples over ``drift.days`` days: training the earlier days, then
    validation and test a later one (``drift.later_rows`` rows), the way Criteo's days are.

    Per feature, ids come from Zipf(``zipf_per_feature[f]``) over ``cardinalities[f]`` (the
    real vocabulary, for the Criteo-like regime) with the popularity drift of
    :func:`drifting_ids`; the teacher (:func:`draw_teacher`, weights per id of any
    popularity) holds every id drawn, and its weights drift each day (``drift.weight_corr``:
    :meth:`Teacher.drifted`). The model's tables hold the ids seen in training
    (:func:`count_like_prepare`): a later id unseen in training is the rare id 1 to the
    model, its own id to the teacher. Returns as :func:`generate`.
    """
    drift = settings.drift
    assert drift is not None
    sample_seed, teacher_seed = _seeds(settings)
    rng, teacher_rng = np.random.default_rng(sample_seed), np.random.default_rng(teacher_seed)
    vocab = (
        list(settings.cardinalities)
        if settings.cardinalities is not None
        else scaled_cardinalities(
            profile.real_cardinalities, settings.vocab_scale, settings.keep_below
        )
    )
    exponents = settings.zipf_per_feature or (settings.zipf,) * len(vocab)
    train_rows = settings.rows - drift.later_rows
    day = days_of_rows(settings.rows, train_rows, drift.days)
    ids = np.stack(
        [drifting_ids(rng, n, s, day, drift) for n, s in zip(vocab, exponents, strict=True)],
        axis=1,
    )  # [N, F], the teacher's ids
    teacher = draw_teacher(teacher_rng, [int(c.max()) + 1 for c in ids.T], profile, settings)
    logit = np.zeros(settings.rows)
    scalars = np.zeros((settings.rows, teacher.mu.shape[0] + 1 if teacher.mu.size else 0))
    bounds = np.searchsorted(day, np.arange(drift.days + 1))
    for d in range(drift.days):
        if d:
            teacher = teacher.drifted(teacher_rng, drift.weight_corr)
        rows = slice(int(bounds[d]), int(bounds[d + 1]))
        logit[rows] = sparse_logit(teacher, ids[rows])
        scalars[rows] = dense_scalars(teacher, ids[rows])
    dense = add_dense(rng, teacher, scalars, logit)
    label, prob = _labels(rng, logit, settings.signal, profile.base_ctr)
    counted = [count_like_prepare(ids[:, f], train_rows) for f in range(ids.shape[1])]
    sparse = np.stack([column for _, column in counted], axis=1)
    return [rows for rows, _ in counted], dense, sparse, label, prob
