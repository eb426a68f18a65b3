"""The two-pass prepare shared by every raw dataset.

1. **read**: the dataset turns parsed blocks into :class:`Chunk` s (label, dense floats,
   categorical columns). Each categorical column is dictionary-encoded per chunk (pyarrow,
   hash based) into chunk-local indices plus one uint64 key per distinct value. Local
   indices (1, 2 or 4 bytes, as the chunk's keys need), dense, labels and row positions
   (unless consecutive) stay in memory up to a budget (a sixth of the machine's memory,
   at most 4 GiB) and go to flat files next to the output past it; nothing is parsed
   twice and no row is held in Python.
2. **count**: the split rule learns its totals; each chunk's train rows are counted per
   local index (``bincount``), with the row where each index is first counted, and merged
   into a sorted key/count/first-row vocabulary per feature (ids follow first appearance).
3. **write**: each chunk's local indices go through a small per-chunk lookup table to the
   final contiguous ids, rows are routed to their splits and streamed into the
   :class:`~suite.data.prepared.PreparedWriter`, which fingerprints and publishes the
   result atomically. The spill directory is removed whatever happens; a killed process
   leaves only dot-named temporary directories that nothing reads.

Features run in parallel on a small thread pool (pyarrow and numpy release the GIL).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field
from tqdm import tqdm

from suite.config import Frozen
from suite.data.prepared import CACHE_OPTION, PreparedDataset, PreparedWriter
from suite.data.raw import OnBadRows, RawReader, prefetch
from suite.data.schema import FeatureSchema
from suite.data.slot import remove_stale, source_guard
from suite.data.splits import DROP, SPLIT_NAMES, TEST, TRAIN, VAL, Rows, SplitRule
from suite.data.vocab import (
    FIRST_ID,
    MISSING,
    RARE,
    VocabCounter,
    Vocabulary,
    bucket_keys,
    encode_column,
    first_rows,
    splitmix64,
    to_numpy,
)
from suite.errors import DataError, DiskFullError
from suite.fileio import disk_full_error, is_disk_full, make_temp_dir, writing
from suite.progress import progress_bar

WORKERS = min(4, os.cpu_count() or 1)


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


@dataclass
class PrepareJob:
    """Everything one prepare needs, for :func:`build_prepared`.

    ``chunks`` is consumed once, lazily; ``reader`` supplies the sources' sizes, hashes and
    row counts and the bad-row count for the manifest; ``extra`` is merged into the
    manifest once every chunk was read (a dataset may fill it while reading); ``force``
    replaces a slot prepared from other raw files.
    """

    dataset: str
    protocol: str
    options: CategoricalOptions
    dense: list[str]
    sparse: list[str]
    chunks: Iterable[Chunk]
    reader: RawReader
    rule: SplitRule
    out_dir: Path
    progress: bool = True
    force: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _ChunkRecord:
    start: int
    rows: int
    source: int
    key_offsets: list[int]
    key_counts: list[int]
    id_widths: list[int]
    """Bytes per shifted local id, per feature (see :func:`shifted_ids`)."""
    file_start: int = -1
    """First row in the spill files; -1: the chunk's arrays are in ``memory``."""
    ids_offset: int = 0
    """Byte offset of the chunk's shifted ids in the ``ids`` spill file."""
    first_row: int | None = None
    """The chunk's row numbers are ``first_row + arange(rows)`` (not stored); None: they
    are in ``memory`` or at ``row_start`` in the ``row`` file."""
    row_start: int = 0
    memory: dict[str, np.ndarray] | None = None
    ids: list[np.ndarray] | None = None


_DTYPES: dict[str, type] = {
    "label": np.float32,
    "dense": np.float32,
    "row": np.int64,
    "time": np.int64,
    "hash": np.uint64,
}


def shifted_ids(local: np.ndarray, num_keys: int) -> np.ndarray:
    """A chunk's local ids of one feature as the spill keeps them: ``local [n]`` (-1
    missing, else an index into the chunk's ``num_keys`` keys) plus one, in the narrowest
    unsigned type that holds ``num_keys`` (uint8, uint16 or uint32): Criteo's columns have
    few distinct values a chunk, so the spill is ~40% of int32's size."""
    dtype = np.uint8 if num_keys < 1 << 8 else np.uint16 if num_keys < 1 << 16 else np.uint32
    out = np.empty(len(local), dtype=dtype)
    np.add(local, 1, out=out, casting="unsafe")
    return out


def _padded(size: int) -> int:
    """Bytes rounded up to 8, so every feature's ids start aligned in the ``ids`` file."""
    return -(-size // 8) * 8


def spill_memory_budget() -> int:
    """Bytes of pass-1 results kept in memory before the rest goes to files: a sixth of
    this machine's memory, at most 4 GiB (a 10M-row Criteo prepare spills ~1.3 GB)."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        physical = 0
    return min(4 << 30, physical // 6)


@dataclass
class _Spill:
    """Pass-1 results until the write pass: chunks in memory up to ``memory_budget``
    bytes, the rest in flat files (the process's memory stays bounded either way)."""

    directory: Path
    num_dense: int
    num_sparse: int
    with_time: bool
    memory_budget: int = 0
    records: list[_ChunkRecord] = field(default_factory=list)
    rows: int = 0

    def __post_init__(self) -> None:
        self._names = ["label", "dense", "row", "hash", "ids"]
        self._names += ["time"] if self.with_time else []
        self._names += [f"keys{f}" for f in range(self.num_sparse)]
        self._files: dict[str, Any] = {}
        self._key_sizes = [0] * self.num_sparse
        self._file_rows = 0
        self._row_rows = 0
        self._ids_bytes = 0
        self._memory_bytes = 0
        self._widths = {"dense": self.num_dense}

    def add(
        self, chunk: Chunk, ids: list[np.ndarray], keys: list[np.ndarray], row_hash: np.ndarray
    ) -> None:
        """Keep a chunk: ``ids`` F arrays ``[n]`` of :func:`shifted_ids` (indices + 1 into
        the feature's ``keys``, 0 missing), ``keys`` F uint64 arrays, ``row_hash [n]``."""
        n = len(chunk.label)
        row = chunk.row.astype(np.int64, copy=False)
        consecutive = bool(row[-1] - row[0] == n - 1 and (np.diff(row) == 1).all())
        arrays = {
            "label": chunk.label.astype(np.float32, copy=False),
            "dense": np.ascontiguousarray(chunk.dense, dtype=np.float32),
            "hash": row_hash,
        }
        if not consecutive:
            arrays["row"] = row
        if self.with_time:
            assert chunk.time is not None
            arrays["time"] = chunk.time.astype(np.int64, copy=False)
        for f, k in enumerate(keys):
            arrays[f"keys{f}"] = k
        size = sum(a.nbytes for a in arrays.values()) + sum(a.nbytes for a in ids)
        record = _ChunkRecord(
            self.rows,
            n,
            chunk.source,
            list(self._key_sizes),
            [len(k) for k in keys],
            [a.itemsize for a in ids],
            first_row=int(row[0]) if consecutive else None,
        )
        if self._memory_bytes + size <= self.memory_budget:
            self._memory_bytes += size
            record.memory, record.ids = arrays, ids
        else:
            if not self._files:
                self._files = {m: open(self.directory / m, "wb") for m in self._names}  # noqa: SIM115
            for name, array in arrays.items():
                array.tofile(self._files[name])
            record.file_start, record.ids_offset = self._file_rows, self._ids_bytes
            for array in ids:
                array.tofile(self._files["ids"])
                pad = _padded(array.nbytes) - array.nbytes
                self._files["ids"].write(bytes(pad))
                self._ids_bytes += array.nbytes + pad
            if not consecutive:
                record.row_start = self._row_rows
                self._row_rows += n
            for f, k in enumerate(keys):
                self._key_sizes[f] += len(k)
            self._file_rows += n
        self.records.append(record)
        self.rows += n

    def close_files(self) -> None:
        """Close every spilled file; the first failure (a flush on a full disk) is raised
        after all are closed."""
        failures = []
        for handle in self._files.values():
            try:
                handle.close()
            except OSError as exc:
                failures.append(exc)
        if failures:
            raise failures[0]

    def _read(self, name: str, dtype: type, start: int, count: int, width: int = 1) -> np.ndarray:
        """Rows ``[start, start + count)`` of a spilled file, read into memory (not mapped,
        so the process's memory stays bounded by a chunk)."""
        itemsize = np.dtype(dtype).itemsize
        data = np.fromfile(
            self.directory / name, dtype=dtype, count=count * width, offset=start * width * itemsize
        )
        return data.reshape(count, width) if width > 1 or name == "dense" else data

    def read(self, name: str, record: _ChunkRecord) -> np.ndarray:
        if name == "row" and record.first_row is not None:
            return np.arange(record.first_row, record.first_row + record.rows, dtype=np.int64)
        if record.memory is not None:
            return record.memory[name]
        if name == "row":
            return self._read(name, np.int64, record.row_start, record.rows)
        width = self._widths.get(name, 1)
        return self._read(name, _DTYPES[name], record.file_start, record.rows, width)

    def feature_ids(self, record: _ChunkRecord, f: int) -> np.ndarray:
        """Feature ``f``'s ``[n]`` :func:`shifted_ids` in the chunk (one read, if spilled)."""
        if record.ids is not None:
            return record.ids[f]
        width = record.id_widths[f]
        offset = record.ids_offset + sum(_padded(record.rows * w) for w in record.id_widths[:f])
        return np.fromfile(
            self.directory / "ids", dtype=f"u{width}", count=record.rows, offset=offset
        )

    def _column(self, name: str) -> np.ndarray:
        """One per-row array over every chunk, in row order."""
        assert name != "row"
        out = np.empty(self.rows, dtype=_DTYPES[name])
        on_file = np.fromfile(self.directory / name, dtype=out.dtype) if self._files else None
        for record in self.records:
            rows = slice(record.start, record.start + record.rows)
            if record.memory is not None:
                out[rows] = record.memory[name]
            else:
                assert on_file is not None
                out[rows] = on_file[record.file_start : record.file_start + record.rows]
        return out

    def times(self) -> np.ndarray:
        return self._column("time")

    def hashes(self) -> np.ndarray:
        return self._column("hash")

    def chunk_keys(self, record: _ChunkRecord, f: int) -> np.ndarray:
        if record.memory is not None:
            return record.memory[f"keys{f}"]
        return self._read(f"keys{f}", np.uint64, record.key_offsets[f], record.key_counts[f])

    def rows_of(self, record: _ChunkRecord) -> Rows:
        time = self.read("time", record) if self.with_time else None
        return Rows(
            record.source, self.read("row", record), self.read("label", record), time, record.start
        )


def _progress(enabled: bool, desc: str, total: int | None = None) -> tqdm:
    return progress_bar(
        total=total, desc=desc, unit=" rows", unit_scale=True, enabled=enabled, leave=False
    )


def build_prepared(job: PrepareJob) -> PreparedDataset:
    """Run the read / count / write passes and publish the prepared dataset."""
    options, rule, reader, dataset = job.options, job.rule, job.reader, job.dataset
    dense, sparse = job.dense, job.sparse
    out_dir = Path(job.out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out_dir.parent, time.time())
    with writing(out_dir.parent, option=CACHE_OPTION):
        spill_dir = make_temp_dir(f".{out_dir.name}.spill-{os.getpid()}-", out_dir.parent)
    cap = options.max_rows_per_table
    spill = _Spill(
        spill_dir, len(dense), len(sparse), rule.needs_time, memory_budget=spill_memory_budget()
    )
    reader.guard = source_guard(out_dir, job.force)  # other raw files: refused before reading
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            # the next blocks are parsed on a thread while this one is encoded
            with (
                _progress(job.progress, f"{dataset}: read") as bar,
                closing(prefetch(lambda: iter(job.chunks), name="prepare-parse")) as chunks,
            ):
                for chunk in _checked(chunks, len(dense), len(sparse)):
                    n = len(chunk.label)
                    by_feature = np.empty((len(sparse), n), dtype=np.int32)

                    def encode(
                        f: int, chunk: Chunk = chunk, by_feature: np.ndarray = by_feature
                    ) -> tuple[np.ndarray, np.ndarray]:
                        by_feature[f], column_keys = encode_column(chunk.sparse[f], None)
                        return column_keys, shifted_ids(by_feature[f], len(column_keys))

                    encoded = list(pool.map(encode, range(len(sparse))))
                    keys, ids = [k for k, _ in encoded], [i for _, i in encoded]
                    row_hash = _row_hashes_in_parts(
                        pool, chunk.label, chunk.dense, by_feature.T, keys
                    )
                    if cap is not None:
                        keys = [bucket_keys(k, cap) for k in keys]
                    spill.add(chunk, ids, keys, row_hash)
                    bar.update(n)
            spill.close_files()
            if spill.rows == 0:
                raise DataError(
                    f"{dataset}: no usable rows were read ({reader.bad.total} bad rows skipped)"
                )
            rows_per_source = {i: s.rows for i, s in enumerate(reader.sources)}
            rule.fit(rows_per_source, spill.times() if rule.needs_time else None)
            if options.dedupe:  # the count must skip the dropped rows
                duplicates, drop = _duplicates(spill, rule, options)
                vocabs = _count(spill, rule, drop, options, pool, job.progress, dataset)
            else:  # nothing is dropped: the duplicates' sort runs beside the count
                with ThreadPoolExecutor(1, thread_name_prefix="prepare-duplicates") as side:
                    counted = side.submit(_duplicates, spill, rule, options)
                    vocabs = _count(spill, rule, None, options, pool, job.progress, dataset)
                    duplicates, drop = counted.result()
            warnings = [*rule.warnings, *_duplicate_warnings(dataset, duplicates, options)]
            schema = FeatureSchema(
                dense=dense, sparse=sparse, cardinalities=[v.size for v in vocabs]
            )
            manifest = {
                "dataset": dataset,
                "protocol": job.protocol,
                "options": options.model_dump(mode="json"),
                "sources": [s.as_dict() for s in reader.sources],
                "thresholds": {
                    "min_count": options.min_count,
                    "max_rows_per_table": cap,
                    "counted_rows": options.vocab_split,
                },
                "ids": {
                    "missing": MISSING,
                    "rare": RARE,
                    "first_value": FIRST_ID,
                    "order": "first appearance in the counted rows, in read order",
                },
                "vocab": {
                    name: {"size": v.size, "distinct": v.distinct, "frequent": v.frequent}
                    for name, v in zip(sparse, vocabs, strict=True)
                },
                "split": rule.describe(),
                "bad_rows": reader.bad.as_dict(),
                "duplicates": duplicates,
                **job.extra,
            }
            warnings += manifest.pop("warnings", [])
            manifest["warnings"] = warnings
            writer = PreparedWriter(  # refused here if the rows' files cannot fit
                out_dir,
                schema,
                _sparse_dtype(schema),
                force=job.force,
                min_split_rows=options.min_split_rows,
                both_labels=options.both_labels,
                expected_rows=spill.rows,
            )
            return _write(spill, rule, drop, vocabs, writer, manifest, pool, job.progress, dataset)
    except Exception as exc:
        if isinstance(exc, DiskFullError) or not is_disk_full(exc, spill_dir):
            raise
        with contextlib.suppress(OSError):
            spill.close_files()
        # what the rows read so far took, in the spill and in their prepared files: a
        # lower bound of the space the whole prepare needs
        spilled = sum(f.stat().st_size for f in spill_dir.rglob("*") if f.is_file())
        needed = spilled + spill.rows * (4 * (len(dense) + 1) + 4 * len(sparse))
        shutil.rmtree(spill_dir, ignore_errors=True)  # first: the figure shows the space it held
        raise disk_full_error(out_dir.parent, needed, CACHE_OPTION, at_least=True) from None
    finally:
        with contextlib.suppress(OSError):  # a close that fails has been reported above
            spill.close_files()
        shutil.rmtree(spill_dir, ignore_errors=True)


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


def _row_hashes_in_parts(
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


def _assign(rule: SplitRule, rows: Rows, drop: np.ndarray | None) -> np.ndarray:
    codes = rule.assign(rows)
    if drop is not None:
        codes = np.where(drop[rows.position : rows.position + len(codes)], DROP, codes)
    return codes.astype(np.uint8, copy=False)


def _duplicates(
    spill: _Spill, rule: SplitRule, options: CategoricalOptions
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


def _duplicate_warnings(
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


def _sparse_dtype(schema: FeatureSchema) -> np.dtype:
    return np.dtype(np.int32 if max(schema.cardinalities, default=0) < 2**31 else np.int64)


def _checked(chunks: Iterable[Chunk], num_dense: int, num_sparse: int) -> Iterator[Chunk]:
    for chunk in chunks:
        n = len(chunk.label)
        assert chunk.dense.shape == (n, num_dense), (chunk.dense.shape, n, num_dense)
        assert len(chunk.sparse) == num_sparse and all(len(c) == n for c in chunk.sparse)
        assert len(chunk.row) == n
        if n:
            yield chunk


def _count(
    spill: _Spill,
    rule: SplitRule,
    drop: np.ndarray | None,
    options: CategoricalOptions,
    pool: ThreadPoolExecutor,
    progress: bool,
    dataset: str,
) -> list[Vocabulary]:
    """Each feature's vocabulary over the counted rows: one task per feature over every
    chunk, largest first, so a long merge of one feature never holds the other workers
    at a per-chunk barrier. Each key's first row is its global position in read order
    (the record's start plus its row in the chunk), so ids follow first appearance."""
    counted: list[tuple[_ChunkRecord, np.ndarray | None]] = []
    for record in spill.records:
        mask = None
        if options.vocab_split == "train":
            mask = _assign(rule, spill.rows_of(record), drop) == TRAIN
        elif drop is not None:
            mask = ~drop[record.start : record.start + record.rows]
        if mask is None or mask.all():
            counted.append((record, None))
        elif mask.any():
            counted.append((record, mask))
    num_sparse = spill.num_sparse
    lock = threading.Lock()

    with _progress(progress, f"{dataset}: count", spill.rows) as bar:

        def vocabulary(f: int) -> Vocabulary:
            counter = VocabCounter()
            for record, mask in counted:
                column = spill.feature_ids(record, f)
                keys = spill.chunk_keys(record, f)
                counts = np.bincount(
                    column if mask is None else column[mask], minlength=len(keys) + 1
                )[1:]
                seen = counts > 0
                first = first_rows(column, len(keys), mask)[seen] + record.start
                counter.add(keys[seen], counts[seen], first)
                with lock:
                    bar.update(record.rows / num_sparse)
            return Vocabulary.build(*counter.finish(), options.min_count)

        sizes = [sum(r.key_counts[f] for r in spill.records) for f in range(num_sparse)]
        largest_first = sorted(range(num_sparse), key=lambda f: -sizes[f])
        futures = {f: pool.submit(vocabulary, f) for f in largest_first}
        vocabs = [futures[f].result() for f in range(num_sparse)]
        bar.update(max(0.0, bar.total - bar.n))  # the chunks with no counted rows
    return vocabs


def _write(
    spill: _Spill,
    rule: SplitRule,
    drop: np.ndarray | None,
    vocabs: list[Vocabulary],
    writer: PreparedWriter,
    manifest: dict[str, Any],
    pool: ThreadPoolExecutor,
    progress: bool,
    dataset: str,
) -> PreparedDataset:
    sparse_dtype = writer.sparse_dtype
    num_sparse, num_dense = spill.num_sparse, spill.num_dense
    clicks = np.zeros(3)
    with writer:
        for split in SPLIT_NAMES:  # every split exists, even if empty
            writer.append(
                split,
                np.zeros((0, num_dense), np.float32),
                np.zeros((0, num_sparse), sparse_dtype),
                np.zeros(0, np.float32),
            )

        def remapped(record: _ChunkRecord) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
            """The record's split codes, dense ``[n, Dd]``, global ids ``[n, F]`` and labels."""
            rows = spill.rows_of(record)
            ids = np.empty((num_sparse, record.rows), dtype=sparse_dtype)

            def remap(f: int) -> None:
                keys = spill.chunk_keys(record, f)
                table = np.empty(1 + len(keys), dtype=sparse_dtype)
                table[0] = MISSING
                table[1:] = vocabs[f].lookup(keys)
                np.take(table, spill.feature_ids(record, f), out=ids[f])

            list(pool.map(remap, range(num_sparse)))
            ids = np.ascontiguousarray(ids.T)  # back to rows: [n, F]
            return _assign(rule, rows, drop), spill.read("dense", record), ids, rows.label

        # the next record is remapped on a thread while this one is written
        with (
            _progress(progress, f"{dataset}: write", spill.rows) as bar,
            closing(prefetch(lambda: map(remapped, spill.records), 1, "prepare-remap")) as ahead,
        ):
            for codes, dense, ids, label in ahead:
                for code, split in enumerate(SPLIT_NAMES):
                    mask = codes == code
                    if mask.all():
                        writer.append(split, dense, ids, label)
                    elif mask.any():
                        writer.append(split, dense[mask], ids[mask], label[mask])
                    clicks[code] += label[mask].sum()
                bar.update(len(label))
        written = writer.rows
        manifest["dropped_rows"] = int(spill.rows - sum(written.values()))
        manifest["ctr"] = {
            s: (float(clicks[i] / written[s]) if written[s] else None)
            for i, s in enumerate(SPLIT_NAMES)
        }
        return writer.finish(manifest)


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


__all__ = [
    "CategoricalOptions",
    "Chunk",
    "PrepareJob",
    "OnBadRows",
    "build_prepared",
    "chunk_from_arrays",
    "label_column",
    "numpy_column",
]
