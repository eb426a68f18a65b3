"""Avazu mobile ads CTR (Kaggle ``train.csv``: 40.4M rows over 10 days).

Raw: comma-separated with a header: ``id, click, hour, C1, banner_pos, site_*, app_*,
device_*, C14..C21``; ``hour`` is ``YYMMDDHH``. Prepared: no dense features; 23 sparse
features, the 21 raw categorical fields plus ``hour_of_day`` (0-23) and ``weekday``
(0 = Monday) derived from ``hour`` (the field names of ``avazu-synth``); ``id`` is dropped.
Ids per feature as for every raw dataset (``suite.data.vocab``): 0 missing, 1 rare or
unseen, 2.. in order of first appearance.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from pydantic import Field

from suite.data.chunks import (
    CategoricalOptions,
    Chunk,
    chunk_from_arrays,
    label_column,
    numpy_column,
)
from suite.data.raw import Parsed, TextFormat
from suite.data.raw_dataset import RawDataset
from suite.data.splits import LastDaysSplit, RandomSplit, SplitRule
from suite.data.synthetic_dataset import SyntheticDataset
from suite.data.teacher import SyntheticProfile
from suite.registry import DATASETS

AVAZU_FIELDS = [
    "C1",
    "banner_pos",
    "site_id",
    "site_domain",
    "site_category",
    "app_id",
    "app_domain",
    "app_category",
    "device_id",
    "device_ip",
    "device_model",
    "device_type",
    "device_conn_type",
    "C14",
    "C15",
    "C16",
    "C17",
    "C18",
    "C19",
    "C20",
    "C21",
    "hour_of_day",
    "weekday",
]
AVAZU_CARDINALITIES = [
    7,
    7,
    4737,
    7745,
    26,
    8552,
    559,
    36,
    2686408,
    6729486,
    8251,
    5,
    4,
    2626,
    8,
    9,
    435,
    4,
    68,
    172,
    60,
    24,
    7,
]
RAW_FIELDS = [f for f in AVAZU_FIELDS if f not in ("hour_of_day", "weekday")]
COLUMNS = ("id", "click", "hour", *RAW_FIELDS)
FORMAT = TextFormat(
    columns=COLUMNS,
    types={"click": pa.int64(), "hour": pa.int64(), **dict.fromkeys(RAW_FIELDS, pa.string())},
    delimiter=",",
    header=True,
    include=("click", "hour", *RAW_FIELDS),
)
_EPOCH = dt.date(1970, 1, 1)


def decode_hours(hour: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``YYMMDDHH`` -> (hour of day, weekday with 0 = Monday, day number since 1970, bad mask)."""
    date = hour // 100
    hour_of_day = hour % 100
    bad = (hour_of_day > 23) | (hour < 0)
    weekday = np.zeros(len(hour), dtype=np.int64)
    day = np.zeros(len(hour), dtype=np.int64)
    dates, inverse = np.unique(date, return_inverse=True)
    for i, value in enumerate(dates.tolist()):
        try:
            when = dt.date(2000 + value // 10000, value // 100 % 100, value % 100)
        except ValueError:
            bad |= inverse == i
            continue
        weekday[inverse == i] = when.weekday()
        day[inverse == i] = (when - _EPOCH).days
    return hour_of_day, weekday, day, bad


def avazu_chunk(parsed: Parsed, with_time: bool) -> Chunk:
    label, bad = label_column(parsed.table, "click")
    parsed.drop(bad, "click must be 0 or 1")
    hour_column = parsed.table.column("hour")
    missing = hour_column.is_null()
    hour = numpy_column(hour_column.fill_null(0))
    _, _, _, bad_hour = decode_hours(hour)
    parsed.drop(bad_hour | numpy_column(missing), "hour must be YYMMDDHH")
    table = parsed.table
    label, _ = label_column(table, "click")
    hour_of_day, weekday, day, _ = decode_hours(numpy_column(table.column("hour")))
    sparse = [table.column(name) for name in RAW_FIELDS] + [hour_of_day, weekday]
    dense = np.zeros((table.num_rows, 0), dtype=np.float32)
    return chunk_from_arrays(
        label, dense, sparse, parsed.row_index(), time=day if with_time else None
    )


class AvazuOptions(CategoricalOptions):
    """Avazu: thresholds, bad-row handling and the random splits' seed."""

    split_seed: int = Field(0, description="seed of the random splits")


def _random(fractions: tuple[float, float, float]) -> Callable[[Any], SplitRule]:
    return lambda options: RandomSplit(fractions, options.split_seed)


@DATASETS.register("avazu")
class Avazu(RawDataset):
    """Avazu mobile ads CTR (train.csv, 40.4M rows, 10 days): 23 categorical features."""

    Options = AvazuOptions
    protocols: ClassVar[dict[str, str]] = {
        "random-811": "seeded random 8:1:1 train/validation/test split",
        "random-712": "seeded random 7:1:2 train/validation/test split",
        "by-day": "last day (by the hour field) test, the latest day before it validation, "
        "earlier days train",
    }
    default_protocol: ClassVar[str] = "random-811"
    splits: ClassVar[dict[str, Callable[[Any], SplitRule]]] = {
        "random-811": _random((0.8, 0.1, 0.1)),
        "random-712": _random((0.7, 0.1, 0.2)),
        "by-day": lambda options: LastDaysSplit(),
    }
    format = FORMAT
    files = ("train.csv", "train.csv.gz", "train", "train.gz")
    sparse = tuple(AVAZU_FIELDS)
    extra: ClassVar[dict[str, Any]] = {
        "derived": {"hour_of_day": "hour % 100", "weekday": "weekday of YYMMDD, 0 = Monday"}
    }

    def chunk(self, parsed: Parsed, source: int, options: Any, rule: SplitRule) -> Chunk:
        return avazu_chunk(parsed, rule.needs_time)


@DATASETS.register("avazu-synth")
class AvazuSynth(SyntheticDataset):
    """Synthetic Avazu: 23 categorical features (21 fields + hour-of-day, weekday), CTR 0.17."""

    profile = SyntheticProfile(
        sparse_names=AVAZU_FIELDS, real_cardinalities=AVAZU_CARDINALITIES, base_ctr=0.17
    )
