"""Four figures of a dataset's id tail and split, the ones a synthetic regime is checked
against a real sample on: how much of the test set's lookups hit ids training saw rarely or
never, how much of training's lookups the hottest rows take, and the label rate.

A lookup is one (row, feature) id; an id's count is its occurrences in the train split. The
hottest rows are counted as the ``characterize`` task counts them (:func:`hot_row_shares` of
the training split's access stream over all tables' rows), so the figure equals that task's
``hot_0.01_lookup_share`` on the same split.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from suite.data.access import AccessStream, hot_row_shares
from suite.data.prepared import PreparedDataset

RARE_BELOW = 5
"""Ids seen fewer times than this in training are rare."""
HOT_FRACTION = 0.01
"""The hottest share of rows whose lookups are counted."""
TOLERANCE = 0.25
"""How far (relative) a regime's figure may be from the real sample's."""

CRITEO_SAMPLE_SPLIT = (6858, 571, 571)
"""Train, validation and test rows of the real Criteo sample (8,000 rows) under
criteo-kaggle's ``dlrm`` protocol: six of seven equal 'days' train, the seventh halves."""


@dataclass(frozen=True)
class TailStatistics:
    """The four figures, each a share in ``[0, 1]``.

    Attributes:
        rare_test: share of test lookups on ids seen fewer than :data:`RARE_BELOW` times in
            training (unseen ones included).
        unseen_test: share of test lookups on ids never seen in training.
        hot_rows: share of training lookups taken by the hottest :data:`HOT_FRACTION` of
            all tables' rows.
        label_rate: mean label over every split's rows.
    """

    rare_test: float
    unseen_test: float
    hot_rows: float
    label_rate: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def relative_gaps(self, reference: TailStatistics) -> dict[str, float]:
        """``|self - reference| / reference`` per figure."""
        ref = reference.as_dict()
        return {k: abs(v - ref[k]) / ref[k] for k, v in self.as_dict().items()}


LABELS = {
    "rare_test": f"test lookups on ids seen < {RARE_BELOW}x in training",
    "unseen_test": "test lookups on ids unseen in training",
    "hot_rows": f"training lookups on the hottest {HOT_FRACTION:.0%} of rows",
    "label_rate": "label rate",
}
"""A table's column header per figure."""

CRITEO_SAMPLE = TailStatistics(
    rare_test=0.2430, unseen_test=0.1350, hot_rows=0.6152, label_rate=0.2160
)
"""The real Criteo sample's figures (../shared/data/criteo/train.txt, 8,000 rows, prepared as
criteo-kaggle with protocol dlrm: 6,858 / 571 / 571 rows), measured by
``python benchmarks/characterize_samples.py`` (its tail table's 'criteo sample' row)."""


def tail_statistics(
    train: np.ndarray, test: np.ndarray, cardinalities: list[int], labels: np.ndarray
) -> TailStatistics:
    """The four figures of a split.

    Args:
        train: training ids ``[N, F]`` (int, ``0 <= id < cardinalities[f]``).
        test: test ids ``[M, F]``.
        cardinalities: rows of each feature's table ``[F]``.
        labels: every split's labels ``[R]``.
    """
    rare = unseen = 0
    for f, rows in enumerate(cardinalities):
        counts = np.bincount(np.asarray(train[:, f], dtype=np.int64), minlength=rows)
        seen = counts[np.asarray(test[:, f], dtype=np.int64)]
        rare += int((seen < RARE_BELOW).sum())
        unseen += int((seen == 0).sum())
    lookups = max(int(test.shape[0]) * len(cardinalities), 1)
    stream = AccessStream.from_sparse(np.asarray(train), list(cardinalities))
    hot = hot_row_shares(stream.keys, stream.num_rows, [HOT_FRACTION])[f"{HOT_FRACTION:g}"]
    return TailStatistics(
        rare_test=rare / lookups,
        unseen_test=unseen / lookups,
        hot_rows=hot,
        label_rate=float(np.mean(labels)) if len(labels) else float("nan"),
    )


def prepared_tail_statistics(data: PreparedDataset) -> TailStatistics:
    """:func:`tail_statistics` of a prepared dataset's train and test splits (the label rate
    over train, validation and test)."""
    labels = np.concatenate([np.asarray(data.split(s).label) for s in sorted(data.splits)])
    return tail_statistics(
        data.split("train").sparse,
        data.split("test").sparse,
        list(data.schema.cardinalities),
        labels,
    )
