"""The regime a reproduction ran in, beside the papers' datasets: one table row each.

A verdict reached on a small synthetic dataset says little about a paper's claim when the
regime differs: how many training examples each embedding row gets, how large the tables
are, how skewed the lookups are. :func:`regime_rows` gives the rows a report prints with
its ``table()`` helper: the prepared dataset's own figures first, then fixed reference
rows for Criteo Kaggle, Criteo Terabyte and Avazu ('-' where the suite does not know).

The skew figures are the ``characterize`` task's own (its stream, its first
``max_lookups`` lookups in data order, its ``zipf_exponent`` and ``hot_row_shares``), so
they equal that task's metrics for the same split; only that head of the stream is read,
which keeps a 400k-row dataset to about a second.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from suite.data.access import AccessStream, hot_row_shares, zipf_exponent
from suite.data.prepared import PreparedDataset
from suite.datasets.avazu import AVAZU_CARDINALITIES
from suite.datasets.criteo import CRITEO_CARDINALITIES, KAGGLE_ROWS
from suite.tasks.characterize import CharacterizeOptions
from suite.units import SHARE, format_cell, human_bytes

DIM = 16
"""Embedding dim of the tables' bytes column (fp32 rows)."""
AVAZU_ROWS = 40_428_967  # Kaggle train.csv, 10 days (../shared/data/README.md)
COLUMNS = (
    "data",
    "examples",
    "embedding rows",
    f"tables at dim {DIM}",
    "examples per embedding row",
    "Zipf exponent of lookups",
    "hottest 1% rows: lookups",
)
REFERENCES: tuple[tuple[str, str, list[int] | None], ...] = (
    # name, examples (whole dataset: the reference counts its vocabulary over all of it),
    # cardinalities when the suite has them
    ("Criteo Kaggle (DLRM reference)", f"{KAGGLE_ROWS:,}", CRITEO_CARDINALITIES),
    ("Criteo Terabyte", "about 4.4B", None),
    ("Avazu", f"{AVAZU_ROWS:,}", AVAZU_CARDINALITIES),
)


def regime_figures(data: PreparedDataset, split: str = "train") -> dict[str, float]:
    """The regime of ``data``'s ``split``, as numbers.

    Returns ``examples`` (rows of the split), ``embedding_rows`` (all tables),
    ``table_bytes`` (all tables at dim 16, fp32), ``examples_per_row``, and the
    ``characterize`` task's ``zipf_exponent`` and ``hot_0.01_lookup_share`` over the
    split's first ``CharacterizeOptions().max_lookups`` lookups (NaN with no lookups).
    """
    sparse = data.split(split).sparse  # [N, F]
    cards = list(data.schema.cardinalities)
    examples, features = int(sparse.shape[0]), max(len(cards), 1)
    rows = int(sum(cards))
    limit = CharacterizeOptions().max_lookups
    head = sparse if limit is None else sparse[: math.ceil(limit / features)]
    stream = AccessStream.from_sparse(np.asarray(head), cards).head(limit)
    exponent, _ = zipf_exponent(stream.keys) if len(stream) else (math.nan, math.nan)
    hot = hot_row_shares(stream.keys, rows, [0.01])["0.01"] if len(stream) else math.nan
    return {
        "examples": float(examples),
        "embedding_rows": float(rows),
        "table_bytes": float(rows * DIM * 4),
        "examples_per_row": examples / rows if rows else math.nan,
        "zipf_exponent": exponent,
        "hot_0.01_lookup_share": hot,
    }


def regime_rows(data: PreparedDataset, name: str | None = None) -> list[dict[str, Any]]:
    """The regime table: ``data``'s training split first (named ``name``, default the
    manifest's dataset), then the reference rows; string cells, columns :data:`COLUMNS`."""
    figures = regime_figures(data)
    own = {
        "data": name or str(data.manifest.get("dataset", "prepared data")),
        "examples": f"{int(figures['examples']):,}",
        "embedding rows": f"{int(figures['embedding_rows']):,}",
        f"tables at dim {DIM}": human_bytes(figures["table_bytes"]),
        "examples per embedding row": f"{figures['examples_per_row']:.2f}",
        "Zipf exponent of lookups": format_cell(
            figures["zipf_exponent"], decimals=2, thousands=False, missing="-"
        ),
        "hottest 1% rows: lookups": format_cell(
            figures["hot_0.01_lookup_share"], unit=SHARE, missing="-"
        ),
    }
    return [own, *(_reference(*ref) for ref in REFERENCES)]


def _reference(name: str, examples: str, cards: list[int] | None) -> dict[str, Any]:
    rows = sum(cards) if cards else None
    return {
        "data": name,
        "examples": examples,
        "embedding rows": f"{rows:,}" if rows else "-",
        f"tables at dim {DIM}": human_bytes(rows * DIM * 4) if rows else "-",
        "examples per embedding row": (
            f"{int(examples.replace(',', '')) / rows:.2f}" if rows else "-"
        ),
        "Zipf exponent of lookups": "-",
        "hottest 1% rows: lookups": "-",
    }
