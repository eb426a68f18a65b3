"""Criteo Kaggle (``train.txt``) and Criteo Terabyte (``day_0`` .. ``day_23``).

Raw rows are tab-separated, without header: label, 13 integer features I1..I13, 26
categorical features C1..C26 (8 hex digits); any field but the label may be empty. Files
may be gzip-compressed. Prepared features:

- dense ``I1..I13``: missing -> 0, negative -> 0, then ``log(1 + x)`` (as the DLRM
  reference);
- sparse ``C1..C26``: contiguous ids per feature (``suite.data.vocab``): 0 for an empty
  field, 1 for values seen fewer than ``min_count`` times in the counted rows (the train
  split by default) or never, 2.. for the others in order of first appearance; with
  ``max_rows_per_table`` values are hashed into that many rows minus two first.

Terabyte streams its 24 day files block by block (pyarrow, never a day in memory). Its
counted rows are the train rows that remain after ``negative_downsampling`` (the fraction
of train negatives dropped, seeded per row: 0.875 keeps one negative in eight, as the
reference's ``--data-sub-sample-rate``). The vocabulary of the full logs holds about 880M
distinct values (16 bytes each while counting): set ``max_rows_per_table`` (the reference
uses 10M or 40M) to bound both the tables and the counting memory.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from suite.data.chunks import (
    WORKERS,
    CategoricalOptions,
    Chunk,
    chunk_from_arrays,
    label_column,
    numpy_column,
)
from suite.data.raw import Parsed, TextFormat
from suite.data.raw_dataset import RawDataset
from suite.data.splits import DaySplit, LastSourceHalves, RandomSplit, SplitRule
from suite.data.synthetic_dataset import SyntheticDataset, SyntheticOptions
from suite.data.teacher import Drift, SyntheticProfile, TeacherSettings, kaggle_cardinalities
from suite.errors import DataError
from suite.registry import DATASETS

DENSE = [f"I{i}" for i in range(1, 14)]
SPARSE = [f"C{i}" for i in range(1, 27)]
COLUMNS = ("label", *DENSE, *SPARSE)
KAGGLE_ROWS = 45_840_617
"""Rows of the full Kaggle ``train.txt`` (7 days in order)."""
# Vocabulary sizes of Criteo Kaggle as counted by the DLRM reference.
CRITEO_CARDINALITIES = [
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
]
KAGGLE_EXAMPLES_PER_ROW = KAGGLE_ROWS / sum(CRITEO_CARDINALITIES)
"""1.358: Kaggle's rows per embedding row (all 7 days, as the reference counts its vocabulary;
its days 1-6 train split alone gives 1.164)."""
# Zipf exponent of each Criteo feature over its REAL Kaggle vocabulary, fit to the real sample
# (the first 6,858 rows, the dlrm train split of ../shared/data/criteo/train.txt) by
# `python benchmarks/fit_kaggle_tail.py`: the exponent whose expected distinct ids in 6,858
# draws equals the sample's (C9, C20: every value seen, so the top value's share instead).
# Check, 6,858 rows drawn like the sample (real vocabularies, ids re-counted as prepare does)
# against the sample: 33,503 vs 33,236 embedding rows, Zipf exponent of the lookups 1.04 vs
# 0.955, hottest 1% of rows 67.9% vs 61.5% of the lookups.
CRITEO_KAGGLE_ZIPF = (
    1.881, 1.405, 1.027, 1.085, 2.43, 4.462, 0.953, 2.194, 3.285, 1.093, 1.027, 1.036, 1.018,
    2.855, 1.119, 1.059, 3.92, 1.241, 1.466, 0.902, 1.047, 4.45, 3.597, 1.166, 2.575, 1.225,
)  # fmt: skip
CRITEO_DAYS = 7
"""Days of Criteo Kaggle: regime criteo trains on the first six, validates and tests on the
seventh (as the dlrm protocol does)."""
CRITEO_CHURN = 0.1
CRITEO_STABLE_SHARE = 1e-4
"""Regime criteo's popularity drift (``suite.data.teacher.Drift``): each later day an id
taking at most about ``CRITEO_STABLE_SHARE`` of its feature's lookups is replaced by a new
id with probability about ``CRITEO_CHURN`` (the more popular, the less likely). Chosen, not measured:
the real sample spans minutes of one day, so it cannot show day-to-day drift; these keep its
four tail figures within 25% (``tests/test_tail_regime.py``; i.i.d., no drift, the share of
test lookups on unseen ids is 14.7% at 8,000 rows, with this drift 15.7%, the sample 13.5%)."""
CRITEO_WEIGHT_CORR = 0.95
"""Regime criteo's day-to-day correlation of every teacher weight (chosen, not measured)."""
FORMAT = TextFormat(
    columns=COLUMNS,
    types={
        "label": pa.int64(),
        **dict.fromkeys(DENSE, pa.int64()),
        **dict.fromkeys(SPARSE, pa.string()),
    },
    delimiter="\t",
)
DENSE_TRANSFORM = "missing -> 0, negative -> 0, log(1 + x)"


def criteo_chunk(parsed: Parsed, source: int = 0) -> Chunk:
    """Label, transformed dense and raw categorical columns of one parsed block."""
    label, bad = label_column(parsed.table, "label")
    parsed.drop(bad, "label must be 0 or 1")
    if bad.any():
        label, _ = label_column(parsed.table, "label")
    table = parsed.table
    by_feature = np.empty((len(DENSE), table.num_rows), dtype=np.float32)

    def transform(j: int) -> None:
        values = numpy_column(table.column(DENSE[j]).combine_chunks(), fill=0)
        by_feature[j] = np.log1p(np.maximum(values, 0), dtype=np.float64)

    with ThreadPoolExecutor(WORKERS, thread_name_prefix="criteo-dense") as pool:  # no GIL
        list(pool.map(transform, range(len(DENSE))))
    sparse = [table.column(name) for name in SPARSE]
    return chunk_from_arrays(label, by_feature.T, sparse, parsed.row_index(), source)


class CriteoOptions(CategoricalOptions):
    """Criteo Kaggle: thresholds, bad-row handling and the random split's seed."""

    split_seed: int = Field(0, description="seed of the random-811 split")


class CriteoFormat(RawDataset):
    """Criteo's text files (Kaggle and Terabyte alike): layout, features and transform."""

    format = FORMAT
    dense = tuple(DENSE)
    sparse = tuple(SPARSE)
    extra: ClassVar[dict[str, Any]] = {"dense_transform": DENSE_TRANSFORM}

    def chunk(self, parsed: Parsed, source: int, options: Any, rule: SplitRule) -> Chunk:
        return criteo_chunk(parsed, source)


@DATASETS.register("criteo-kaggle")
class CriteoKaggle(CriteoFormat):
    """Criteo Kaggle display ads (train.txt, 45.8M rows, 7 days): 13 dense + 26 categorical."""

    Options = CriteoOptions
    protocols: ClassVar[dict[str, str]] = {
        "dlrm": "7 equal consecutive days of rows; days 1-6 train, day 7 halves: test then "
        "validation (DLRM reference)",
        "random-811": "seeded random 8:1:1 train/validation/test split (AutoInt / BARS Criteo_x4 "
        "setting; use bars-criteo-x1 for BARS's own Criteo_x1 files)",
    }
    default_protocol: ClassVar[str] = "dlrm"
    splits: ClassVar[dict[str, Callable[[Any], SplitRule]]] = {
        "dlrm": lambda options: DaySplit(7, full_rows=KAGGLE_ROWS),
        "random-811": lambda options: RandomSplit((0.8, 0.1, 0.1), options.split_seed),
    }
    files = ("train.txt", "train.txt.gz")


class TerabyteOptions(CategoricalOptions):
    """Criteo Terabyte: days used, negative downsampling of train and its seed."""

    days: int = Field(
        24, ge=2, le=24, description="read day_0 .. day_{days-1}; the last is val/test"
    )
    negative_downsampling: float | None = Field(
        None, ge=0, lt=1, description="fraction of train negatives dropped (reference: 0.875)"
    )
    seed: int = Field(0, description="seed of the negative downsampling")


def _day_file(directory: Path, day: int) -> Path | None:
    for name in (f"day_{day}", f"day_{day}.gz"):
        if (directory / name).is_file():
            return directory / name
    return None


@DATASETS.register("criteo-terabyte")
class CriteoTerabyte(CriteoFormat):
    """Criteo Terabyte click logs (day_0..day_23, 4.4B rows): 13 dense + 26 categorical."""

    Options = TerabyteOptions
    protocols: ClassVar[dict[str, str]] = {
        "dlrm": "days 0-22 train (optionally negative-downsampled), day 23 halves: test then "
        "validation (DLRM / MLPerf)",
    }
    default_protocol: ClassVar[str] = "dlrm"
    splits: ClassVar[dict[str, Callable[[Any], SplitRule]]] = {
        "dlrm": lambda options: LastSourceHalves(
            options.days - 1, options.negative_downsampling, options.seed
        ),
    }

    def sources(self, raw: Path, options: Any) -> list[Path]:
        """``day_0`` .. ``day_{days-1}`` (plain or .gz) in the ``raw`` directory."""
        if not raw.is_dir():
            raise DataError(f"{raw}: expected a directory holding day_0 .. day_{options.days - 1}")
        files = [_day_file(raw, d) for d in range(options.days)]
        missing = [f"day_{d}" for d, f in enumerate(files) if f is None]
        if missing:
            raise DataError(f"{raw}: missing day files {', '.join(missing)} (plain or .gz)")
        return [f for f in files if f is not None]


class CriteoSynthOptions(SyntheticOptions):
    """criteo-synth's options: the synthetic ones plus the regime of its vocabulary."""

    regime: Literal["default", "kaggle", "criteo"] = Field(
        "default",
        description="kaggle: tables scaled so train_rows / embedding rows is Kaggle's 1.36 "
        "at any size, per-feature Zipf tails fit to real Criteo (vocab_scale, keep_below and "
        "zipf unused); criteo: real Criteo's tail and split at any size: ids drawn over the "
        "real vocabularies with those tails, seven days whose id popularity and teacher "
        "weights drift, val and test the seventh, tables of the ids seen in training (later "
        "ids unseen in it: the rare id 1), as prepare counts real data (vocab_scale, "
        "keep_below and zipf unused)",
    )

    # at its default the regime is left out, so configs, their hashes and the prepared
    # cache keys stay those of runs from before the option
    left_out_at: ClassVar[dict[str, Any]] = {**SyntheticOptions.left_out_at, "regime": "default"}


@DATASETS.register("criteo-synth")
class CriteoSynth(SyntheticDataset):
    """Synthetic Criteo: 13 dense + 26 categorical features, Zipf ids, CTR 0.256; regime
    kaggle: Kaggle's examples per embedding row and real Criteo's per-feature tails; regime
    criteo: real Criteo's tails over its real vocabularies, and a later test day."""

    Options = CriteoSynthOptions
    profile = SyntheticProfile(
        sparse_names=list(SPARSE),
        real_cardinalities=CRITEO_CARDINALITIES,
        dense_names=list(DENSE),
        base_ctr=0.256,
    )

    def settings(self, options: SyntheticOptions) -> TeacherSettings:
        """The regime's settings: Kaggle's ratio ties the tables to ``train_rows`` (kaggle),
        or the real vocabularies and days do (criteo)."""
        settings = super().settings(options)
        regime = getattr(options, "regime", "default")
        if regime == "criteo":
            drift = Drift(
                days=CRITEO_DAYS,
                later_rows=options.val_rows + options.test_rows,
                churn=CRITEO_CHURN,
                stable_share=CRITEO_STABLE_SHARE,
                weight_corr=CRITEO_WEIGHT_CORR,
            )
            return replace(
                settings,
                cardinalities=tuple(CRITEO_CARDINALITIES),
                zipf_per_feature=CRITEO_KAGGLE_ZIPF,
                drift=drift,
            )
        if regime != "kaggle":
            return settings
        cards = kaggle_cardinalities(
            CRITEO_CARDINALITIES, options.train_rows, KAGGLE_EXAMPLES_PER_ROW
        )
        return replace(settings, cardinalities=tuple(cards), zipf_per_feature=CRITEO_KAGGLE_ZIPF)
