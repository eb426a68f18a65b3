"""Split rules: which rows go to train, validation and test (or are dropped).

A rule sees rows after they were read (their source file, their index among that source's
data rows, label and time) and returns one code per row. Rows keep their file order
inside each split. Every rule is deterministic: the same raw input gives the same split,
whatever the chunking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from suite.data.vocab import splitmix64
from suite.errors import DataError

TRAIN, VAL, TEST = 0, 1, 2
DROP = 255
SPLIT_NAMES = ("train", "val", "test")


@dataclass(frozen=True)
class Rows:
    """Rows of one chunk as a split rule sees them.

    ``row``: int64 index of each row among its source's data rows (bad rows counted);
    ``position``: index of the chunk's first row among all rows read (after bad rows).
    """

    source: int
    row: np.ndarray
    label: np.ndarray
    time: np.ndarray | None
    position: int


class SplitRule:
    """Base: ``fit`` once every row was read, then ``assign`` chunk by chunk."""

    needs_time = False
    warnings: tuple[str, ...] = ()
    """What ``fit`` found worth telling the user (recorded in the manifest)."""

    def fit(self, rows_per_source: dict[int, int], times: np.ndarray | None) -> None:
        """Learn totals: data rows per source (bad rows included) and, when
        ``needs_time``, the time of every row read (int64, in read order)."""

    def assign(self, rows: Rows) -> np.ndarray:
        """uint8 code per row: TRAIN, VAL, TEST or DROP."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError


def split_sizes(n: int, fractions: tuple[float, float, float]) -> tuple[int, int, int]:
    """Exact split sizes: val and test rounded down, train takes the rest."""
    n_val, n_test = int(n * fractions[1]), int(n * fractions[2])
    return n - n_val - n_test, n_val, n_test


def random_assignment(n: int, fractions: tuple[float, float, float], seed: int) -> np.ndarray:
    """uint8 ``[n]`` codes of a uniformly random assignment with exact split sizes.

    Drawn block by block (multivariate hypergeometric counts, then a shuffle), so memory
    is ``n`` bytes and the result depends only on ``n``, the fractions and the seed.
    """
    rng = np.random.default_rng([seed, 811])
    codes = np.empty(n, dtype=np.uint8)
    remaining = np.array(split_sizes(n, fractions), dtype=np.int64)
    step = 1 << 20
    for start in range(0, n, step):
        m = min(step, n - start)
        take = rng.multivariate_hypergeometric(remaining, m, method="marginals")
        block = np.repeat(np.arange(3, dtype=np.uint8), take)
        rng.shuffle(block)
        codes[start : start + m] = block
        remaining -= take
    return codes


class RandomSplit(SplitRule):
    """Seeded random split of the rows of source 0 with exact sizes (e.g. 8:1:1)."""

    def __init__(self, fractions: tuple[float, float, float], seed: int) -> None:
        self.fractions = fractions
        self.seed = seed
        self.codes = np.zeros(0, dtype=np.uint8)
        self.n = 0

    def fit(self, rows_per_source: dict[int, int], times: np.ndarray | None) -> None:
        self.n = rows_per_source.get(0, 0)
        self.codes = random_assignment(self.n, self.fractions, self.seed)

    def assign(self, rows: Rows) -> np.ndarray:
        return self.codes[rows.row]

    def describe(self) -> dict[str, Any]:
        ratio = ":".join(f"{f * 10:g}" for f in self.fractions)
        return {
            "rule": f"seeded random {ratio} split of the data rows, exact sizes",
            "seed": self.seed,
            "fractions": list(self.fractions),
            "sizes_of_data_rows": list(split_sizes(self.n, self.fractions)),
        }


class DaySplit(SplitRule):
    """The DLRM reference's Criteo Kaggle split: ``days`` equal consecutive slices of the
    rows of source 0 (the first ``n % days`` one row longer); all but the last train; the last one's
    first half (the larger, when odd) is test, its second half validation."""

    def __init__(self, days: int = 7, full_rows: int | None = None) -> None:
        self.days = days
        self.full_rows = full_rows
        self.bounds = np.zeros(days + 1, dtype=np.int64)

    def fit(self, rows_per_source: dict[int, int], times: np.ndarray | None) -> None:
        n = rows_per_source.get(0, 0)
        if self.full_rows and n < self.full_rows // 2:
            self.warnings = (
                f"the dlrm protocol cuts the file into {self.days} equal 'days' because the "
                f"full set ({self.full_rows:,} rows) is ordered by day; this file has {n:,} rows, "
                "so its slices are not days (a random protocol may suit a sample better)",
            )
        per_day, extra = divmod(n, self.days)
        sizes = [per_day + (1 if d < extra else 0) for d in range(self.days)]
        self.bounds = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)

    def assign(self, rows: Rows) -> np.ndarray:
        last = int(self.bounds[-2])
        half = last + -(-(int(self.bounds[-1]) - last) // 2)
        codes = np.full(len(rows.row), TRAIN, dtype=np.uint8)
        codes[rows.row >= last] = TEST
        codes[rows.row >= half] = VAL
        return codes

    def describe(self) -> dict[str, Any]:
        return {
            "rule": f"{self.days} equal consecutive days of rows; days 1-{self.days - 1} train; "
            f"day {self.days}: first half test, second half validation (DLRM reference)",
            "day_bounds": self.bounds.tolist(),
        }


class SourceSplit(SplitRule):
    """Each source file is one split (a dataset's own train/valid/test files)."""

    def __init__(self, codes: dict[int, int], names: dict[int, str]) -> None:
        self.codes = codes
        self.names = names

    def assign(self, rows: Rows) -> np.ndarray:
        return np.full(len(rows.row), self.codes[rows.source], dtype=np.uint8)

    def describe(self) -> dict[str, Any]:
        return {
            "rule": "the source's own splits",
            "files": {self.names[s]: SPLIT_NAMES[c] for s, c in sorted(self.codes.items())},
        }


def uniform(seed: int, source: int, row: np.ndarray) -> np.ndarray:
    """Deterministic uniform [0, 1) per (seed, source, row)."""
    with np.errstate(over="ignore"):
        base = splitmix64(
            np.asarray(np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(source))
        )
        bits = splitmix64(np.asarray(row, dtype=np.uint64) ^ base)
    return (bits >> np.uint64(11)).astype(np.float64) / float(1 << 53)


class LastSourceHalves(SplitRule):
    """Terabyte: sources before the last train; the last source's first half (the larger,
    when odd) is test, its second half validation (MLPerf / DLRM). Optionally drop a
    seeded fraction of the training negatives (``negative_downsampling``)."""

    def __init__(self, last: int, negative_downsampling: float | None, seed: int) -> None:
        self.last = last
        self.rate = negative_downsampling
        self.seed = seed
        self.half = 0

    def fit(self, rows_per_source: dict[int, int], times: np.ndarray | None) -> None:
        n_last = rows_per_source.get(self.last, 0)
        self.half = -(-n_last // 2)

    def assign(self, rows: Rows) -> np.ndarray:
        if rows.source != self.last:
            codes = np.full(len(rows.row), TRAIN, dtype=np.uint8)
            if self.rate:
                drop = (rows.label == 0) & (uniform(self.seed, rows.source, rows.row) < self.rate)
                codes[drop] = DROP
            return codes
        return np.where(rows.row < self.half, TEST, VAL).astype(np.uint8)

    def describe(self) -> dict[str, Any]:
        return {
            "rule": f"days 0-{self.last - 1} train; day {self.last}: first half test, second half "
            "validation",
            "negative_downsampling": self.rate,
            "seed": self.seed,
            "last_day_test_rows": self.half,
        }


class TimeRankSplit(SplitRule):
    """By time: the oldest rows train, the next validation, the newest test (exact
    sizes; equal times keep file order)."""

    needs_time = True

    def __init__(self, fractions: tuple[float, float, float]) -> None:
        self.fractions = fractions
        self.codes = np.zeros(0, dtype=np.uint8)
        self.cuts: list[int] = []

    def fit(self, rows_per_source: dict[int, int], times: np.ndarray | None) -> None:
        assert times is not None
        n = len(times)
        n_train, n_val, _ = split_sizes(n, self.fractions)
        order = np.argsort(times, kind="stable")
        self.codes = np.full(n, TEST, dtype=np.uint8)
        self.codes[order[:n_train]] = TRAIN
        self.codes[order[n_train : n_train + n_val]] = VAL
        sorted_times = times[order]
        self.cuts = [int(sorted_times[i]) for i in (n_train, n_train + n_val) if i < n]

    def assign(self, rows: Rows) -> np.ndarray:
        return self.codes[rows.position : rows.position + len(rows.row)]

    def describe(self) -> dict[str, Any]:
        return {
            "rule": "by timestamp: oldest rows train, next validation, newest test",
            "fractions": list(self.fractions),
            "first_time_of_val_and_test": self.cuts,
        }


class LastDaysSplit(SplitRule):
    """By day (``time`` is a day number): the last day present is test, the latest day
    before it validation, every earlier day train."""

    needs_time = True

    def __init__(self) -> None:
        self.test_day = self.val_day = 0
        self.days: list[int] = []

    def fit(self, rows_per_source: dict[int, int], times: np.ndarray | None) -> None:
        assert times is not None
        days = np.unique(times)
        if len(days) < 3:
            raise DataError(
                f"protocol by-day needs rows from at least 3 days (train, validation, test); "
                f"the data has {len(days)}"
            )
        self.days = days.tolist()
        self.test_day, self.val_day = int(days[-1]), int(days[-2])

    def assign(self, rows: Rows) -> np.ndarray:
        assert rows.time is not None
        codes = np.full(len(rows.row), TRAIN, dtype=np.uint8)
        codes[rows.time == self.val_day] = VAL
        codes[rows.time == self.test_day] = TEST
        return codes

    def describe(self) -> dict[str, Any]:
        return {
            "rule": "by day: last day test, the day before it validation, earlier days train",
            "days": self.days,
            "val_day": self.val_day,
            "test_day": self.test_day,
        }
