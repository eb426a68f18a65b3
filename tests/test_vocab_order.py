"""Categorical ids follow first appearance in the counted rows (as the DLRM reference
numbers them), not frequency: checked on the counter, on a Zipf stream and end to end
through the prepare pipeline with hand-made chunks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from suite.data.chunks import CategoricalOptions, chunk_from_arrays
from suite.data.pipeline import PrepareJob, build_prepared
from suite.data.raw import RawReader
from suite.data.splits import TEST, TRAIN, VAL, Rows, SplitRule
from suite.data.vocab import (
    FIRST_ID,
    MISSING,
    NEVER,
    RARE,
    VocabCounter,
    Vocabulary,
    bucket_keys,
    first_rows,
    string_keys,
)


def test_first_rows_unmasked_masked_and_any_numbering() -> None:
    # local ids + 1 in first-appearance order (a dictionary encoding's), 0 missing
    shifted = np.array([0, 1, 1, 2, 0, 3, 2, 1], dtype=np.uint8)
    assert first_rows(shifted, 3).tolist() == [1, 3, 5]
    assert first_rows(shifted, 4).tolist() == [1, 3, 5, NEVER]
    mask = np.array([1, 0, 1, 0, 1, 1, 1, 0], dtype=bool)
    assert first_rows(shifted, 3, mask).tolist() == [2, 6, 5]
    # not in first-appearance order: the exact scatter-min still holds
    other = np.array([3, 0, 1, 3, 2], dtype=np.uint16)
    assert first_rows(other, 3).tolist() == [2, 4, 0]
    assert first_rows(np.zeros(0, dtype=np.uint8), 2).tolist() == [NEVER, NEVER]


def test_counter_takes_the_minimum_first_row_whatever_the_chunking() -> None:
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 5000, 600_000).astype(np.uint64)  # merges more than once
    rows = np.arange(len(keys), dtype=np.int64)
    expected_keys, first_index = np.unique(keys, return_index=True)
    expected_counts = np.bincount(keys.astype(np.int64))[expected_keys.astype(np.int64)]
    results = []
    for cuts in ([300_000], [1, 299_999, 450_000]):
        counter = VocabCounter()
        pieces = list(zip(np.split(keys, cuts), np.split(rows, cuts), strict=True))
        for k, r in pieces[::-1]:  # added out of row order: the minimum does not care
            counter.add(k, np.ones(len(k), dtype=np.int64), r)
        results.append(counter.finish())
    for got_keys, counts, first in results:
        assert got_keys.tolist() == expected_keys.tolist()
        assert counts.tolist() == expected_counts.tolist()
        assert first.tolist() == first_index.tolist()


def test_build_numbers_frequent_keys_by_first_row() -> None:
    keys = np.array([10, 20, 30, 40, 50], dtype=np.uint64)
    counts = np.array([5, 1, 2, 9, 2])
    first = np.array([7, 0, 3, 8, 1])
    vocab = Vocabulary.build(keys, counts, first, min_count=2)
    assert vocab.lookup(keys).tolist() == [4, RARE, 3, 5, 2]  # 50, 30, 10, 40 by first row
    assert vocab.size == FIRST_ID + 4 and vocab.frequent == 4 and vocab.distinct == 5


def test_hot_values_of_a_zipf_stream_spread_over_the_ids() -> None:
    """By frequency, the 1% most frequent values would hold exactly the lowest 1% of ids
    (all in that band, the highest of them at 1% of the range); by first appearance the
    hottest still come early but the rest of the 1% is spread well past that band."""
    rng = np.random.default_rng(1)
    values = rng.permutation(1 << 20)[np.minimum(rng.zipf(1.1, 1_000_000), 1 << 20) - 1]
    keys = values.astype(np.uint64)
    counter = VocabCounter()
    for start in range(0, len(keys), 100_000):  # chunks as the pipeline adds them
        chunk = keys[start : start + 100_000]
        distinct, first, counts = np.unique(chunk, return_index=True, return_counts=True)
        counter.add(distinct, counts, start + first)
    k, counts, first = counter.finish()
    vocab = Vocabulary.build(k, counts, first, min_count=1)
    hot = k[np.argsort(-counts, kind="stable")[: len(k) // 100]]
    rank = (vocab.lookup(hot) - FIRST_ID) / vocab.frequent  # 0 lowest id, 1 highest
    assert len(hot) >= 500
    assert np.mean(rank < 0.01) < 0.5  # by frequency: 1.0 (seeds 0-3: 0.33-0.36)
    assert np.quantile(rank, 0.9) > 0.03  # by frequency: < 0.01 (seeds 0-3: 0.062-0.067)


class ByPosition(SplitRule):
    """Rows by their position in read order: listed positions go to val or test."""

    def __init__(self, val: set[int], test: set[int]) -> None:
        self.val, self.test = val, test

    def assign(self, rows: Rows) -> np.ndarray:
        position = rows.position + np.arange(len(rows.row))
        codes = np.full(len(position), TRAIN, dtype=np.uint8)
        codes[np.isin(position, list(self.val))] = VAL
        codes[np.isin(position, list(self.test))] = TEST
        return codes

    def describe(self) -> dict[str, Any]:
        return {"rule": "by position (test)"}


# feature 0 (strings), row by row; the val row 1 holds z before any train row does
STRINGS = ["b", "z", "", "a", "b", "c", "a", "d", "z", "c", "e", "e", "b", "f", "a", "c"]
# feature 1 (integers, None missing)
INTS = [7, 7, None, 3, 9, 3, 9, 1, 1, 5, 7, None, 3, 2, 2, 8]
VAL_ROWS, TEST_ROWS = {1}, {15}


def prepare(
    tmp_path: Path, name: str, cuts: list[int], **options: Any
) -> tuple[Any, dict[str, np.ndarray]]:
    """Prepare STRINGS/INTS cut into chunks at ``cuts``; returns the dataset and each
    split's sparse ids ``[n, 2]``."""
    n = len(STRINGS)
    label = np.arange(n) % 2
    chunks = []
    for rows in np.split(np.arange(n), cuts):
        strings = pa.array([STRINGS[i] or None for i in rows], type=pa.string())
        ints = pa.array([INTS[i] for i in rows], type=pa.int64())
        dense = rows[:, None].astype(np.float32)
        chunks.append(chunk_from_arrays(label[rows], dense, [strings, ints], rows))
    settings = {"min_split_rows": 0, "both_labels": False, **options}
    job = PrepareJob(
        dataset="order-test",
        protocol="by-position",
        options=CategoricalOptions(**settings),
        dense=["position"],
        sparse=["s", "i"],
        chunks=chunks,
        reader=RawReader(),
        rule=ByPosition(VAL_ROWS, TEST_ROWS),
        out_dir=tmp_path / name,
        progress=False,
    )
    data = build_prepared(job)
    return data, {s: np.asarray(data.split(s).sparse) for s in ("train", "val", "test")}


def expected_ids(values: list[Any], counted: list[bool], min_count: int) -> list[int]:
    """Ids by the contract, written out plainly: first appearance among counted rows."""
    counts: dict[Any, int] = {}
    order: list[Any] = []
    for value, use in zip(values, counted, strict=True):
        if use and value not in (None, ""):
            order += [] if value in counts else [value]
            counts[value] = counts.get(value, 0) + 1
    frequent = [v for v in order if counts[v] >= min_count]
    ids = {v: FIRST_ID + i for i, v in enumerate(frequent)}
    return [MISSING if v in (None, "") else ids.get(v, RARE) for v in values]


def in_read_order(split: dict[str, np.ndarray], column: int) -> list[int]:
    """A feature's ids of every row in read order (train rows, with val and test put back)."""
    train = iter(split["train"][:, column].tolist())
    (val,), (test,) = VAL_ROWS, TEST_ROWS
    return [
        int(split["val"][0, column])
        if i == val
        else int(split["test"][0, column])
        if i == test
        else next(train)
        for i in range(len(STRINGS))
    ]


@pytest.mark.parametrize("vocab_split", ["train", "all"])
def test_ids_follow_first_appearance_across_chunks(tmp_path: Path, vocab_split: str) -> None:
    counted = [vocab_split == "all" or i not in VAL_ROWS | TEST_ROWS for i in range(16)]
    cut_ways = [[5, 9, 12], [1, 2, 3, 4, 8], []]
    results = [
        prepare(tmp_path, f"cut{j}", cuts, min_count=2, vocab_split=vocab_split)
        for j, cuts in enumerate(cut_ways)
    ]
    for data, split in results:
        assert in_read_order(split, 0) == expected_ids(STRINGS, counted, 2)
        assert in_read_order(split, 1) == expected_ids(INTS, counted, 2)
        assert data.fingerprint == results[0][0].fingerprint
    strings = in_read_order(results[0][1], 0)
    # b, then a and c: by first appearance (by frequency a would come before b, their tie
    # broken by key); z (val row 1, train row 8) is frequent only when val rows count too
    assert strings[:6] == ([2, 3, 0, 4, 2, 5] if vocab_split == "all" else [2, 1, 0, 3, 2, 4])
    assert results[0][0].manifest["ids"]["order"].startswith("first appearance")


def test_same_input_gives_the_same_fingerprint_twice(tmp_path: Path) -> None:
    once, split = prepare(tmp_path, "once", [7])
    again, split_again = prepare(tmp_path, "again", [7])
    assert once.fingerprint == again.fingerprint
    assert all((split[s] == split_again[s]).all() for s in split)


def test_capped_buckets_numbered_by_first_appearance(tmp_path: Path) -> None:
    cap = 5
    data, split = prepare(tmp_path, "capped", [4, 10], max_rows_per_table=cap)
    counted = [i not in VAL_ROWS | TEST_ROWS for i in range(16)]
    buckets = bucket_keys(string_keys(pa.array(STRINGS)), cap).tolist()
    as_buckets = [None if s == "" else b for s, b in zip(STRINGS, buckets, strict=True)]
    assert len(set(b for b in as_buckets if b is not None)) > 1  # some buckets are shared
    assert in_read_order(split, 0) == expected_ids(as_buckets, counted, 1)
    assert data.schema.cardinalities[0] <= cap
