"""How embedding rows are accessed: the access stream and its characterization.

An :class:`AccessStream` is every embedding lookup of a split (or a raw trace) in the order
a trainer would issue them: sample by sample, and within a sample table by table. Rows get
one global key (``table offset + row``), so a cache shared by all tables (as fbgemm's
caching tables are) sees the stream as it is.

Every figure here is exact and vectorised (no per-lookup Python): the LRU hit-rate curve at
all cache sizes at once comes from each lookup's stack distance (Mattson et al. 1970),
computed by offline dominance counting in O(n log^2 n) numpy work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

REUSE_BATCH = 131072
"""Samples per window of the reuse-factor histogram: facebookresearch/dlrm_datasets'."""

# Bin edges of the dlrm_datasets reuse-factor histogram: (0,1], (1,2], (2,4], ..., (16384, inf).
REUSE_EDGES: tuple[int, ...] = tuple(2**k for k in range(15))  # 1 .. 16384
REUSE_LABELS: tuple[str, ...] = (
    ("(0,1]",)
    + tuple(f"({REUSE_EDGES[i]},{REUSE_EDGES[i + 1]}]" for i in range(len(REUSE_EDGES) - 1))
    + ("(16384,+)",)
)

# The histogram facebookresearch/dlrm_datasets publishes for its production-like traces
# (README, "Reuse pattern": proportion of data in each reuse-factor bin).
PUBLISHED_REUSE_HISTOGRAM: dict[str, float] = dict(
    zip(
        REUSE_LABELS,
        [
            0.069,
            0.044,
            0.068,
            0.101,
            0.122,
            0.104,
            0.073,
            0.058,
            0.052,
            0.050,
            0.049,
            0.048,
            0.048,
            0.042,
            0.031,
            0.042,
        ],
        strict=True,
    )
)


@dataclass(frozen=True)
class AccessStream:
    """Embedding lookups in issue order.

    Attributes:
        keys: ``[N]`` int64 global row keys (``table_offsets[t] + row``).
        tables: ``[N]`` int32 table of each lookup.
        samples: ``[N]`` int64 sample index of each lookup (non-decreasing).
        table_rows: ``[T]`` rows of each table.
    """

    keys: np.ndarray
    tables: np.ndarray
    samples: np.ndarray
    table_rows: np.ndarray

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    @property
    def num_samples(self) -> int:
        return int(self.samples[-1]) + 1 if len(self) else 0

    @property
    def num_rows(self) -> int:
        return int(self.table_rows.sum())

    @property
    def table_offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.table_rows)[:-1]]).astype(np.int64)

    def head(self, max_lookups: int | None) -> AccessStream:
        """The first ``max_lookups`` lookups (whole stream when ``None``)."""
        if max_lookups is None or max_lookups >= len(self):
            return self
        n = max_lookups
        return AccessStream(self.keys[:n], self.tables[:n], self.samples[:n], self.table_rows)

    @classmethod
    def from_sparse(cls, sparse: np.ndarray, cardinalities: list[int]) -> AccessStream:
        """One lookup per (sample, feature) of single-hot ids ``sparse [N, F]``."""
        sparse = np.asarray(sparse)
        n, f = sparse.shape
        rows = np.asarray(cardinalities, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(rows)[:-1]])
        keys = (sparse.astype(np.int64) + offsets[None, :]).reshape(-1)
        tables = np.tile(np.arange(f, dtype=np.int32), n)
        samples = np.repeat(np.arange(n, dtype=np.int64), f)
        return cls(keys, tables, samples, rows)

    @classmethod
    def from_bags(
        cls, indices: np.ndarray, offsets: np.ndarray, num_tables: int, table_rows: np.ndarray
    ) -> AccessStream:
        """Multi-hot lookups in fbgemm's TBE layout (table-major bags, as dlrm_datasets).

        Args:
            indices: ``[L]`` row ids within their table.
            offsets: ``[T*B + 1]`` bag boundaries, bag ``t*B + b`` is table ``t``, sample ``b``.
            num_tables: ``T``.
            table_rows: ``[T]`` rows of each table.
        """
        indices = np.asarray(indices, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64)
        bags = offsets.shape[0] - 1
        batch = bags // num_tables
        lengths = np.diff(offsets)
        bag_table = np.repeat(np.arange(bags) // batch, lengths)
        bag_sample = np.repeat(np.arange(bags) % batch, lengths)
        # issue order: sample by sample, then table by table within a sample
        order = np.lexsort((bag_table, bag_sample))
        rows = np.asarray(table_rows, dtype=np.int64)
        table_offsets = np.concatenate([[0], np.cumsum(rows)[:-1]])
        keys = indices[order] + table_offsets[bag_table[order]]
        return cls(keys, bag_table[order].astype(np.int32), bag_sample[order], rows)


def previous_access(keys: np.ndarray) -> np.ndarray:
    """``prev[i]``: position of the last lookup of ``keys[i]`` before ``i``, or -1. ``[N]``."""
    n = keys.shape[0]
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    prev = np.full(n, -1, dtype=np.int64)
    same = sorted_keys[1:] == sorted_keys[:-1]
    prev[order[1:][same]] = order[:-1][same]
    return prev


def stack_distances(keys: np.ndarray) -> np.ndarray:
    """LRU stack distance of each lookup: distinct other keys since its key's last lookup.

    ``-1`` for a first lookup (a compulsory miss). A fully associative LRU cache of ``C``
    rows hits lookup ``i`` exactly when ``0 <= d[i] < C``. ``[N]`` int64.

    With ``p = prev[i]``, the distinct keys in ``(p, i)`` are the lookups ``j`` there whose
    own previous lookup lies before ``p``; counting ``#{j < i : prev[j] < p}`` and taking
    away the ``p + 1`` lookups at or before ``p`` (all of which qualify) gives ``d[i]``.
    The counts come from a bottom-up merge over blocks of positions: at each level, queries
    in a right block count points in the left block below them with one sorted search.
    """
    keys = np.asarray(keys, dtype=np.int64)
    n = keys.shape[0]
    prev = previous_access(keys)
    counts = np.zeros(n, dtype=np.int64)
    pos = np.arange(n, dtype=np.int64)
    span = n + 2
    level = 0
    while (1 << level) < n:
        block = pos >> level
        left = (block & 1) == 0
        right = ~left & (prev >= 0)
        pair = block >> 1
        point_keys = np.sort(pair[left] * span + (prev[left] + 1))
        q = pos[right]
        base = pair[right] * span
        counts[q] += np.searchsorted(point_keys, base + prev[q] + 1, side="left") - np.searchsorted(
            point_keys, base, side="left"
        )
        level += 1
    distances = np.where(prev >= 0, counts - (prev + 1), -1)
    return distances


def lru_hit_rates(distances: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """Hit rate of a fully associative LRU cache at each capacity (rows). ``[C]``."""
    hits = np.sort(distances[distances >= 0])
    n = max(distances.shape[0], 1)
    return np.searchsorted(hits, np.asarray(capacities), side="left") / n


def lfu_hit_rates(keys: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """Hit rate of a frequency cache holding the ``C`` most-looked-up rows. ``[C]``.

    The rows are ranked by their count over the whole stream and the cache is warm (the
    limit a frequency-based policy such as fbgemm's LFU approaches on a stationary
    stream); each row's first lookup is still a miss, so no hit rate exceeds LRU's bound
    of ``1 - unique/N``.
    """
    _, counts = np.unique(keys, return_counts=True)
    ranked = np.sort(counts)[::-1]
    cumulative = np.concatenate([[0], np.cumsum(ranked - 1)])
    caps = np.minimum(np.asarray(capacities, dtype=np.int64), ranked.shape[0])
    return cumulative[caps] / max(keys.shape[0], 1)


def reuse_histogram(
    keys: np.ndarray, samples: np.ndarray, window: int = REUSE_BATCH
) -> dict[str, dict[str, float]]:
    """Reuse factors per window of ``window`` samples, in dlrm_datasets' bins.

    A row's reuse factor in a window is how many times the window looks it up. Returns the
    share of unique (window, row) pairs and the share of lookups in each bin.
    """
    window_of = samples // window
    pair = window_of * (int(keys.max()) + 1 if keys.size else 1) + keys
    _, factors = np.unique(pair, return_counts=True)
    bins = np.searchsorted(np.asarray(REUSE_EDGES), factors, side="left")
    unique_share = np.bincount(bins, minlength=len(REUSE_LABELS)) / max(factors.size, 1)
    lookup_share = np.bincount(bins, weights=factors, minlength=len(REUSE_LABELS)) / max(
        factors.sum(), 1
    )
    return {
        "unique_rows": dict(zip(REUSE_LABELS, unique_share.tolist(), strict=True)),
        "lookups": dict(zip(REUSE_LABELS, lookup_share.tolist(), strict=True)),
    }


def zipf_exponent(keys: np.ndarray) -> tuple[float, float]:
    """Exponent ``s`` of ``count ~ rank^-s`` by least squares on log-log, and its R^2.

    Fitted over the ranks whose count is at least 2 (the flat tail of rows seen once is
    sampling floor, not popularity); ``(nan, nan)`` with fewer than 3 such ranks.
    """
    _, counts = np.unique(keys, return_counts=True)
    ranked = np.sort(counts)[::-1].astype(np.float64)
    ranked = ranked[ranked >= 2]
    if ranked.shape[0] < 3:
        return math.nan, math.nan
    x = np.log(np.arange(1, ranked.shape[0] + 1))
    y = np.log(ranked)
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((residual**2).sum()) / total if total > 0 else math.nan
    return float(-slope), r2


def hot_row_shares(keys: np.ndarray, num_rows: int, fractions: list[float]) -> dict[str, float]:
    """Share of lookups served by the hottest ``f`` of the ``num_rows`` rows, per ``f``."""
    _, counts = np.unique(keys, return_counts=True)
    ranked = np.sort(counts)[::-1]
    cumulative = np.concatenate([[0], np.cumsum(ranked)])
    out = {}
    for f in fractions:
        top = min(int(math.ceil(f * num_rows)), ranked.shape[0])
        out[f"{f:g}"] = float(cumulative[top] / max(keys.shape[0], 1))
    return out


def unique_per_batch(stream: AccessStream, batch_sizes: list[int]) -> dict[int, dict[str, float]]:
    """Mean unique rows per batch of ``B`` samples and their share of the batch's lookups.

    Only whole batches count; a batch size larger than the stream is left out.
    """
    out: dict[int, dict[str, float]] = {}
    for b in batch_sizes:
        batches = stream.num_samples // b
        if batches == 0:
            continue
        mask = stream.samples < batches * b
        batch_of = stream.samples[mask] // b
        pair = batch_of * (stream.num_rows + 1) + stream.keys[mask]
        unique_pairs = np.unique(pair)
        unique = np.bincount(unique_pairs // (stream.num_rows + 1), minlength=batches)
        lookups = np.bincount(batch_of, minlength=batches)
        out[b] = {
            "unique_rows": float(unique.mean()),
            "unique_share": float((unique / lookups).mean()),
        }
    return out
