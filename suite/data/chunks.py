"""What a raw dataset hands the prepare pipeline: its options' shared part and
:class:`Chunk` s of parsed rows, with the helpers that build them from pyarrow columns."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from suite.config import Frozen
from suite.data.vocab import to_numpy

WORKERS = min(4, os.cpu_count() or 1)
"""Threads a prepare encodes, hashes and parses on (pyarrow and numpy release the GIL)."""


class CategoricalOptions(Frozen):
    """Options every raw dataset shares: vocabulary thresholds and bad-row handling."""

    min_count: int = Field(
        1, ge=1, description="values seen fewer times in the counted rows share the rare id 1"
    )
    max_rows_per_table: int | None = Field(
        None, ge=3, description="cap on a table's rows: values are hashed into cap-2 buckets first"
    )
    vocab_split: Literal["train", "all"] = Field(
        "train", description="rows whose values are counted: the train split, or every row read"
    )
    on_bad_rows: Literal["error", "skip"] = Field(
        "error", description="a malformed row raises an error naming file and line, or is skipped"
    )
    min_split_rows: int = Field(
        1, ge=0, description="fewest rows a split may have (each split needs both labels too)"
    )
    both_labels: bool = Field(
        True,
        description="every split must hold rows of both labels (false only for hand-made "
        "fixtures of a few rows)",
    )
    dedupe: bool = Field(
        False,
        description="drop rows that repeat an earlier row exactly (train first, then val, test)",
    )
    duplicate_warning: float = Field(
        0.01, ge=0, le=1, description="warn when more than this fraction of rows are duplicates"
    )


@dataclass
class Chunk:
    """Rows of one parsed block in the dataset's feature layout.

    ``label`` float32 ``[n]``; ``dense`` float32 ``[n, Dd]``; ``sparse``: one column per
    categorical feature (pyarrow strings/integers or numpy integers; null = missing);
    ``row`` int64 ``[n]``: index among the source's data rows; ``source``: which input
    file; ``time`` int64 ``[n]`` when the protocol splits by time.
    """

    label: np.ndarray
    dense: np.ndarray
    sparse: list[Any]
    row: np.ndarray
    source: int = 0
    time: np.ndarray | None = None


def chunk_from_arrays(
    label: np.ndarray,
    dense: np.ndarray,
    sparse: list[Any],
    row: np.ndarray,
    source: int = 0,
    time: np.ndarray | None = None,
) -> Chunk:
    """A :class:`Chunk` with dtypes normalised (float32 label/dense, int64 rows)."""
    return Chunk(
        label=np.asarray(label, dtype=np.float32),
        dense=np.asarray(dense, dtype=np.float32),
        sparse=sparse,
        row=np.asarray(row, dtype=np.int64),
        source=source,
        time=None if time is None else np.asarray(time, dtype=np.int64),
    )


def numpy_column(column: pa.Array | pa.ChunkedArray, fill: float | None = None) -> np.ndarray:
    """A numeric pyarrow column as one numpy array, nulls replaced by ``fill``."""
    return to_numpy(column, fill)


def label_column(parsed_table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A 0/1 label column: float32 values and a mask of rows whose label is missing or
    not 0/1 (for ``Parsed.drop``)."""
    column = parsed_table.column(name)
    values = numpy_column(column, fill=-1)
    bad = (values != 0) & (values != 1)
    return values.astype(np.float32), bad
