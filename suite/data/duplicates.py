"""Exact duplicate rows of a prepare: a 64-bit hash per row (label, dense bits, raw
categorical values), counted per split and across splits, optionally dropped."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from suite.data.chunks import WORKERS, CategoricalOptions
from suite.data.spill import Spill
from suite.data.splits import DROP, SPLIT_NAMES, TEST, VAL, SplitRule
from suite.data.vocab import splitmix64


def row_hashes(
    label: np.ndarray, dense: np.ndarray, local: np.ndarray, keys: list[np.ndarray]
) -> np.ndarray:
    """uint64 ``[n]``: a 64-bit hash of each row's label, dense bits and raw categorical
    values (``local [n, F]`` indices into each feature's ``keys``, -1 missing), so equal
    rows, and in practice only they, hash alike.

    Each of the row's values goes through its column's own bijective mix (xorshift, then
    an odd multiplier), the mixed values are summed and the sum is mixed once more: rows
    that differ in one value never collide, in more only by a 64-bit coincidence.
    """
    n, num_dense = dense.shape
    multipliers = _multipliers(1 + num_dense + local.shape[1])
    h = np.zeros(n, dtype=np.uint64)
    value = np.empty(n, dtype=np.uint64)
    spare = np.empty(n, dtype=np.uint64)

    def add(column: int) -> None:  # h += mix_column(value), in place
        np.right_shift(value, np.uint64(31), out=spare)
        np.bitwise_xor(value, spare, out=value)
        np.multiply(value, multipliers[column], out=value)
        np.add(h, value, out=h)

    with np.errstate(over="ignore"):
        value[:] = np.asarray(label, dtype=np.float32).view(np.uint32)
        add(0)
        for j in range(num_dense):
            value[:] = np.ascontiguousarray(dense[:, j], dtype=np.float32).view(np.uint32)
            add(1 + j)
        for f, k in enumerate(keys):
            # -1 (missing) takes the last entry: the missing key appended to the keys
            np.take(
                np.append(k.astype(np.uint64, copy=False), _MISSING_KEY), local[:, f], out=value
            )
            add(1 + num_dense + f)
        return splitmix64(h)


def row_hashes_in_parts(
    pool: ThreadPoolExecutor,
    label: np.ndarray,
    dense: np.ndarray,
    local: np.ndarray,
    keys: list[np.ndarray],
) -> np.ndarray:
    """:func:`row_hashes` over row ranges on the pool, one per CPU (numpy releases the GIL)."""
    n = len(label)
    parts = max(1, min(WORKERS, n // 10_000))
    if parts == 1:
        return row_hashes(label, dense, local, keys)
    cuts = np.linspace(0, n, parts + 1).astype(int)

    def part(start: int, stop: int) -> np.ndarray:
        return row_hashes(label[start:stop], dense[start:stop], local[start:stop], keys)

    return np.concatenate(list(pool.map(part, cuts[:-1], cuts[1:])))


def _multipliers(count: int) -> np.ndarray:
    """uint64 ``[count]``: one fixed odd multiplier per column."""
    return splitmix64(np.arange(1, count + 1, dtype=np.uint64)) | np.uint64(1)


_MISSING_KEY = np.uint64(0xA5A5_5A5A_C3C3_3C3C)

DUPLICATE_MAX_ROWS = 200_000_000
"""Above this many rows duplicates are not counted (the sort would need ~17 bytes a row)."""


def find_duplicates(
    spill: Spill, rule: SplitRule, options: CategoricalOptions
) -> tuple[dict[str, Any], np.ndarray | None]:
    """Count exact duplicate rows (and, with ``dedupe``, mark all but the first of each
    for dropping): ``duplicate_rows`` repeat an earlier row (train first, then val, then
    test, file order within a split); ``within_split`` per split; ``across_splits``: val
    rows also in train, test rows also in train or val (leaks)."""
    if spill.rows > DUPLICATE_MAX_ROWS:
        return {"counted": False, "reason": f"more than {DUPLICATE_MAX_ROWS} rows"}, None
    codes = np.empty(spill.rows, dtype=np.uint8)
    for record in spill.records:
        codes[record.start : record.start + record.rows] = rule.assign(spill.rows_of(record))
    hashes = spill.hashes()
    kept = np.flatnonzero(codes != DROP)
    repeated = kept[_repeated_hashes(hashes[kept])]  # a row whose hash is unique is no copy
    order = repeated[np.lexsort((codes[repeated], hashes[repeated]))]  # stable: file order
    h, c = hashes[order], codes[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = h[1:] != h[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    first_code = c[group_start]
    previous_code = np.concatenate(([255], c[:-1])).astype(np.uint8)
    within = ~first & (previous_code == c)
    across = ~first & (first_code < c)
    result = {
        "counted": True,
        "method": "64-bit hash of label, dense bits and raw categorical values",
        "rows_checked": len(kept),
        "duplicate_rows": int((~first).sum()),
        "within_split": {s: int((within & (c == i)).sum()) for i, s in enumerate(SPLIT_NAMES)},
        "across_splits": {
            "val_in_train": int((across & (c == VAL)).sum()),
            "test_in_train_or_val": int((across & (c == TEST)).sum()),
        },
        "dropped": bool(options.dedupe),
    }
    drop = None
    if options.dedupe:
        drop = np.zeros(spill.rows, dtype=bool)
        drop[order[~first]] = True
    return result, drop


SEARCH_REPEATS_BELOW = 0.01
"""While the repeated hashes are fewer than this fraction of the rows, a binary search
picks out the rows that carry them for the exact (stable) sort; with more, every row
goes to it."""


def _repeated_hashes(hashes: np.ndarray) -> np.ndarray:
    """bool ``[n]``: the rows whose hash ``[n]`` uint64 occurs more than once.

    One unstable sort finds the repeated values (4x faster than the stable two-key sort
    that orders the copies); when they are few, a binary search over them marks the
    rows, and only those rows need the exact sort."""
    ordered = np.sort(hashes)
    repeats = ordered[1:][ordered[1:] == ordered[:-1]]
    if len(repeats) == 0:
        return np.zeros(len(hashes), dtype=bool)
    if len(repeats) >= SEARCH_REPEATS_BELOW * len(hashes):
        return np.ones(len(hashes), dtype=bool)
    values = np.unique(repeats)
    at = np.minimum(np.searchsorted(values, hashes), len(values) - 1)
    return values[at] == hashes


def duplicate_warnings(
    dataset: str, duplicates: dict[str, Any], options: CategoricalOptions
) -> list[str]:
    if not duplicates.get("counted") or options.dedupe:
        return []
    total = duplicates["duplicate_rows"]
    leaks = sum(duplicates["across_splits"].values())
    if total and total / duplicates["rows_checked"] > options.duplicate_warning:
        return [
            f"{dataset}: {total} rows repeat an earlier row exactly, {leaks} of them across "
            "splits (a val/test row also in train inflates its metrics); set dedupe=true to "
            "drop them"
        ]
    return []
