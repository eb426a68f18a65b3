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

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
from pydantic import Field

from suite.data.pipeline import (
    WORKERS,
    CategoricalOptions,
    Chunk,
    PrepareJob,
    build_prepared,
    chunk_from_arrays,
    label_column,
    numpy_column,
)
from suite.data.prepared import PreparedDataset
from suite.data.raw import Parsed, RawReader, TextFormat, find_file
from suite.data.source import DatasetSource
from suite.data.splits import DaySplit, LastSourceHalves, RandomSplit
from suite.errors import DataError
from suite.registry import DATASETS

DENSE = [f"I{i}" for i in range(1, 14)]
SPARSE = [f"C{i}" for i in range(1, 27)]
COLUMNS = ("label", *DENSE, *SPARSE)
KAGGLE_ROWS = 45_840_617
"""Rows of the full Kaggle ``train.txt`` (7 days in order)."""
FORMAT = TextFormat(
    columns=COLUMNS,
    types={
        "label": pa.int64(),
        **dict.fromkeys(DENSE, pa.int64()),
        **dict.fromkeys(SPARSE, pa.string()),
    },
    delimiter="\t",
)


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


@DATASETS.register("criteo-kaggle")
class CriteoKaggle(DatasetSource):
    """Criteo Kaggle display ads (train.txt, 45.8M rows, 7 days): 13 dense + 26 categorical."""

    Options = CriteoOptions
    needs_raw = True
    protocols: ClassVar[dict[str, str]] = {
        "dlrm": "7 equal consecutive days of rows; days 1-6 train, day 7 halves: test then "
        "validation (DLRM reference)",
        "random-811": "seeded random 8:1:1 train/validation/test split (AutoInt / BARS Criteo_x4 "
        "setting; use bars-criteo-x1 for BARS's own Criteo_x1 files)",
    }
    default_protocol: ClassVar[str] = "dlrm"

    def build(
        self,
        options: CriteoOptions,
        protocol: str,
        raw: Path | None,
        out_dir: Path,
        progress: bool,
        force: bool = False,
    ) -> PreparedDataset:
        assert raw is not None
        path = find_file(Path(raw), ("train.txt", "train.txt.gz"))
        reader = RawReader(options.on_bad_rows)
        rule = (
            DaySplit(7, full_rows=KAGGLE_ROWS)
            if protocol == "dlrm"
            else RandomSplit((0.8, 0.1, 0.1), options.split_seed)
        )

        def chunks() -> Iterator[Chunk]:
            for parsed in reader.read(path, FORMAT):
                yield criteo_chunk(parsed)

        return build_criteo(
            PrepareJob(
                dataset="criteo-kaggle",
                protocol=protocol,
                options=options,
                dense=DENSE,
                sparse=SPARSE,
                chunks=chunks(),
                reader=reader,
                rule=rule,
                out_dir=out_dir,
                progress=progress,
                force=force,
            )
        )


def build_criteo(job: PrepareJob) -> PreparedDataset:
    """Prepare Criteo-format chunks (Kaggle or Terabyte) with the shared schema."""
    job.extra["dense_transform"] = "missing -> 0, negative -> 0, log(1 + x)"
    return build_prepared(job)


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
class CriteoTerabyte(DatasetSource):
    """Criteo Terabyte click logs (day_0..day_23, 4.4B rows): 13 dense + 26 categorical."""

    Options = TerabyteOptions
    needs_raw = True
    protocols: ClassVar[dict[str, str]] = {
        "dlrm": "days 0-22 train (optionally negative-downsampled), day 23 halves: test then "
        "validation (DLRM / MLPerf)",
    }
    default_protocol: ClassVar[str] = "dlrm"

    def build(
        self,
        options: TerabyteOptions,
        protocol: str,
        raw: Path | None,
        out_dir: Path,
        progress: bool,
        force: bool = False,
    ) -> PreparedDataset:
        assert raw is not None
        directory = Path(raw)
        if not directory.is_dir():
            raise DataError(
                f"{directory}: expected a directory holding day_0 .. day_{options.days - 1}"
            )
        files = [_day_file(directory, d) for d in range(options.days)]
        missing = [f"day_{d}" for d, f in enumerate(files) if f is None]
        if missing:
            raise DataError(f"{directory}: missing day files {', '.join(missing)} (plain or .gz)")
        reader = RawReader(options.on_bad_rows)
        rule = LastSourceHalves(options.days - 1, options.negative_downsampling, options.seed)

        def chunks() -> Iterator[Chunk]:
            for day, path in enumerate(files):
                assert path is not None
                for parsed in reader.read(path, FORMAT):
                    yield criteo_chunk(parsed, source=day)

        return build_criteo(
            PrepareJob(
                dataset="criteo-terabyte",
                protocol=protocol,
                options=options,
                dense=DENSE,
                sparse=SPARSE,
                chunks=chunks(),
                reader=reader,
                rule=rule,
                out_dir=out_dir,
                progress=progress,
                force=force,
            )
        )
