"""criteo-synth's regime criteo: real Criteo's tail over its real vocabularies and a later
test day. At the real sample's rows and split its four tail figures land within 25% of the
sample's (stored in ``suite.data.tail_stats``, measured by
``python benchmarks/characterize_samples.py``); the mechanisms underneath: ids that churn
with their popularity, weights that drift by day, tables of the ids seen in training."""

from __future__ import annotations

import math

import numpy as np
import pytest

from suite.config import build_config
from suite.data.source import get_prepared
from suite.data.tail_stats import (
    CRITEO_SAMPLE,
    CRITEO_SAMPLE_SPLIT,
    RARE_BELOW,
    TOLERANCE,
    TailStatistics,
    prepared_tail_statistics,
    tail_statistics,
)
from suite.data.teacher import (
    Drift,
    count_like_prepare,
    days_of_rows,
    draw_teacher,
    drifting_ids,
    generate,
)
from suite.datasets.criteo import CRITEO_CARDINALITIES, CRITEO_KAGGLE_ZIPF, CriteoSynth
from tests.conftest import SHARED_DATA

SAMPLE = SHARED_DATA / "criteo" / "train.txt"
SPLIT = dict(zip(("train_rows", "val_rows", "test_rows"), CRITEO_SAMPLE_SPLIT, strict=True))


def synth_at_sample_rows(regime: str | None) -> TailStatistics:
    overrides = [f"dataset.options.{k}={v}" for k, v in SPLIT.items()]
    overrides += [f"dataset.options.regime={regime}"] if regime else []
    spec = build_config(components={"dataset": "criteo-synth"}, overrides=overrides).dataset
    return prepared_tail_statistics(get_prepared(spec, progress=False))


def test_criteo_regime_is_within_25pct_of_the_real_sample() -> None:
    figures = synth_at_sample_rows("criteo")
    gaps = figures.relative_gaps(CRITEO_SAMPLE)
    assert all(gap <= TOLERANCE for gap in gaps.values()), (figures, gaps)


def test_default_regime_is_not() -> None:
    """Why the regime exists: today's default, at the sample's rows, has half the sample's
    share of test lookups on unseen ids (and far fewer at its own 400k rows)."""
    figures = synth_at_sample_rows(None)
    assert figures.unseen_test < 0.5 * CRITEO_SAMPLE.unseen_test
    assert figures.relative_gaps(CRITEO_SAMPLE)["unseen_test"] > TOLERANCE


@pytest.mark.skipif(not SAMPLE.is_file(), reason=f"{SAMPLE} is absent (real samples not here)")
def test_stored_sample_figures_are_the_real_samples() -> None:
    spec = build_config(
        components={"dataset": "criteo-kaggle"},
        values={"dataset.raw": str(SAMPLE), "dataset.protocol": "dlrm"},
    ).dataset
    data = get_prepared(spec, progress=False)
    assert tuple(data.manifest["rows"][s] for s in ("train", "val", "test")) == CRITEO_SAMPLE_SPLIT
    measured = prepared_tail_statistics(data).as_dict()
    for key, stored in CRITEO_SAMPLE.as_dict().items():
        assert measured[key] == pytest.approx(stored, abs=5e-5), key


def test_tail_statistics_count_by_training_occurrences() -> None:
    # feature 0: id 2 seen 5x, 3 once, 4 and 1 never; feature 1: id 0 seen 6x
    train = np.array([[2, 0], [2, 0], [3, 0], [2, 0], [2, 0], [2, 0]])  # [N=6, F=2]
    test = np.array([[2, 0], [3, 0], [4, 0], [1, 0]])  # [M=4, F=2]
    figures = tail_statistics(train, test, [5, 2], np.array([0, 1, 1, 0]))
    assert RARE_BELOW == 5
    assert figures.rare_test == pytest.approx(3 / 8)  # feature 0's ids 3, 4, 1
    assert figures.unseen_test == pytest.approx(2 / 8)  # feature 0's ids 4 and 1
    assert figures.label_rate == 0.5
    # 7 rows in all: the hottest 1% is one row, feature 1's id 0 (6 of 12 lookups)
    assert figures.hot_rows == pytest.approx(6 / 12)


def test_the_test_split_is_a_later_day() -> None:
    day = days_of_rows(rows=1000, train_rows=800, days=7)
    assert day[:800].min() == 0 and day[:800].max() == 5
    assert np.all(np.diff(day) >= 0)
    assert np.all(day[800:] == 6)
    assert np.bincount(day[:800]).tolist() == [134, 133, 133, 134, 133, 133]


def test_tail_ids_churn_frequent_ones_stay() -> None:
    rng = np.random.default_rng(0)
    drift = Drift(days=7, later_rows=2000, churn=0.5, stable_share=1e-3, weight_corr=1.0)
    day = days_of_rows(20_000, 18_000, drift.days)
    ids = drifting_ids(rng, 100_000, 1.1, day, drift)  # [N]
    first_day = set(ids[day == 0].tolist())
    last_day = ids[day == 6]
    new = ~np.isin(last_day, list(first_day))
    values, counts = np.unique(ids, return_counts=True)
    hottest = int(values[np.argmax(counts)])
    assert hottest in first_day and hottest in set(last_day.tolist())  # the head stays
    assert 0.1 < new.mean() < 0.9  # the tail is renewed
    # without churn every rank keeps its id: as many ids as ranks drawn
    still = Drift(days=7, later_rows=2000, churn=0.0, stable_share=1e-3, weight_corr=1.0)
    again = drifting_ids(np.random.default_rng(0), 100_000, 1.1, day, still)
    assert np.unique(again).shape[0] < np.unique(ids).shape[0]


def test_tables_hold_the_ids_seen_in_training() -> None:
    ids = np.array([7, 3, 7, 9, 3, 5, 9, 8])  # train: the first 5
    rows, counted = count_like_prepare(ids, train_rows=5)
    assert rows == 3 + 2  # 7, 3, 9 seen in training, plus ids 0 and 1
    assert counted.tolist() == [2, 3, 2, 4, 3, 1, 4, 1]  # order of first appearance; 5, 8: 1


def test_criteo_regime_unseen_test_ids_are_the_rare_id() -> None:
    source = CriteoSynth()
    options = CriteoSynth.Options(regime="criteo", train_rows=3000, val_rows=500, test_rows=500)
    cards, dense, sparse, label, prob = generate(source.profile, source.settings(options))
    train, later = sparse[:3000], sparse[3000:]
    assert not (train == 1).any() and not (train == 0).any()
    assert (later == 1).any()  # ids only the later day has
    assert (sparse.max(axis=0) < np.asarray(cards)).all()
    assert dense.shape == (4000, 13) and np.isfinite(dense).all()
    assert label.mean() == pytest.approx(0.256, abs=0.03)
    again = generate(source.profile, source.settings(options))  # seeded: the same draw
    assert all(
        np.array_equal(a, b) for a, b in zip((dense, sparse, label), again[1:4], strict=True)
    )


def test_rare_ids_carry_as_much_signal_per_occurrence() -> None:
    """The teacher's weights are drawn per id whatever its popularity: the first-order term
    of a lookup on a rare id spreads as that of a frequent one."""
    rng = np.random.default_rng(1)
    drift = Drift(days=2, later_rows=1, churn=0.0, stable_share=1.0, weight_corr=1.0)
    feature = CRITEO_CARDINALITIES.index(max(CRITEO_CARDINALITIES))
    ids = drifting_ids(
        rng, 1_000_000, CRITEO_KAGGLE_ZIPF[feature], days_of_rows(50_000, 49_999, 2), drift
    )
    source = CriteoSynth()
    teacher = draw_teacher(
        np.random.default_rng(2),
        [int(ids.max()) + 1],
        source.profile,
        source.settings(CriteoSynth.Options(pairs=0, triples=0)),
    )
    counts = np.bincount(ids)[ids]
    term = teacher.first[0][ids]
    rare, frequent = term[counts < RARE_BELOW], term[counts >= 50]
    assert rare.size > 1000 and frequent.size > 1000
    assert np.std(rare) == pytest.approx(0.5, rel=0.1)
    # the frequent lookups repeat few ids: their spread is over those ids' weights
    assert np.std(np.unique(term[counts >= 50])) == pytest.approx(0.5, rel=0.3)


def test_teacher_weights_drift_by_day() -> None:
    source = CriteoSynth()
    teacher = draw_teacher(
        np.random.default_rng(0),
        [50_000] * 26,
        source.profile,
        source.settings(CriteoSynth.Options()),
    )
    later = teacher
    rng = np.random.default_rng(1)
    for _ in range(6):
        later = later.drifted(rng, 0.95)
    corr = np.corrcoef(teacher.first[0], later.first[0])[0, 1]
    assert corr == pytest.approx(0.95**6, abs=0.02)
    assert np.std(later.first[0]) == pytest.approx(0.5, rel=0.03)  # each keeps its spread
    assert math.isclose(np.std(later.scalar[0]), 1.0, rel_tol=0.03)
