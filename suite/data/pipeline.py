"""The two-pass prepare shared by every raw dataset.

1. **read**: the dataset turns parsed blocks into :class:`Chunk` s (label, dense floats,
   categorical columns). Each categorical column is dictionary-encoded per chunk (pyarrow,
   hash based) into chunk-local indices plus one uint64 key per distinct value. Local
   indices, dense, labels and row positions are spilled to flat files next to the output;
   nothing is parsed twice and no row is held in Python.
2. **count**: the split rule learns its totals; each chunk's train rows are counted per
   local index (``bincount``) and merged into a sorted key/count vocabulary per feature.
3. **write**: each chunk's local indices go through a small per-chunk lookup table to the
   final contiguous ids, rows are routed to their splits and streamed into the
   :class:`~suite.data.prepared.PreparedWriter`, which fingerprints and publishes the
   result atomically. The spill directory is removed whatever happens; a killed process
   leaves only dot-named temporary directories that nothing reads.

Features run in parallel on a small thread pool (pyarrow and numpy release the GIL).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field
from tqdm import tqdm

from suite.config import Frozen
from suite.data.prepared import PreparedDataset, PreparedWriter
from suite.data.raw import OnBadRows, RawReader
from suite.data.schema import FeatureSchema
from suite.data.splits import SPLIT_NAMES, TRAIN, Rows, SplitRule
from suite.data.vocab import (
    FIRST_ID,
    MISSING,
    RARE,
    VocabCounter,
    Vocabulary,
    encode_column,
    to_numpy,
)
from suite.errors import DataError
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
class _ChunkRecord:
    start: int
    rows: int
    source: int
    key_offsets: list[int]
    key_counts: list[int]


@dataclass
class _Spill:
    """Flat files holding pass-1 results until the write pass."""

    directory: Path
    num_dense: int
    num_sparse: int
    with_time: bool
    records: list[_ChunkRecord] = field(default_factory=list)
    rows: int = 0

    def __post_init__(self) -> None:
        names = ["label", "dense", "local", "row"] + (["time"] if self.with_time else [])
        names += [f"keys{f}" for f in range(self.num_sparse)]
        self._files = {n: open(self.directory / n, "wb") for n in names}  # noqa: SIM115
        self._key_sizes = [0] * self.num_sparse

    def add(self, chunk: Chunk, local: np.ndarray, keys: list[np.ndarray]) -> None:
        n = len(chunk.label)
        chunk.label.astype(np.float32, copy=False).tofile(self._files["label"])
        np.ascontiguousarray(chunk.dense, dtype=np.float32).tofile(self._files["dense"])
        local.tofile(self._files["local"])
        chunk.row.astype(np.int64, copy=False).tofile(self._files["row"])
        if self.with_time:
            assert chunk.time is not None
            chunk.time.astype(np.int64, copy=False).tofile(self._files["time"])
        for f, k in enumerate(keys):
            k.tofile(self._files[f"keys{f}"])
        self.records.append(
            _ChunkRecord(self.rows, n, chunk.source, list(self._key_sizes), [len(k) for k in keys])
        )
        for f, k in enumerate(keys):
            self._key_sizes[f] += len(k)
        self.rows += n

    def close_files(self) -> None:
        for handle in self._files.values():
            handle.close()

    def close(self) -> None:
        self.close_files()
        self._widths = {
            "label": 1,
            "dense": self.num_dense,
            "local": self.num_sparse,
            "row": 1,
            "time": 1,
        }

    def _read(self, name: str, dtype: type, start: int, count: int, width: int = 1) -> np.ndarray:
        """Rows ``[start, start + count)`` of a spilled array, read into memory (not mapped,
        so the process's memory stays bounded by a chunk)."""
        itemsize = np.dtype(dtype).itemsize
        data = np.fromfile(
            self.directory / name, dtype=dtype, count=count * width, offset=start * width * itemsize
        )
        return data.reshape(count, width) if width > 1 or name in ("dense", "local") else data

    def read(self, name: str, record: _ChunkRecord) -> np.ndarray:
        dtype = {
            "label": np.float32,
            "dense": np.float32,
            "local": np.int32,
            "row": np.int64,
            "time": np.int64,
        }[name]
        return self._read(name, dtype, record.start, record.rows, self._widths[name])

    def times(self) -> np.ndarray:
        return np.fromfile(self.directory / "time", dtype=np.int64, count=self.rows)

    def chunk_keys(self, record: _ChunkRecord, f: int) -> np.ndarray:
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


def build_prepared(
    *,
    dataset: str,
    protocol: str,
    options: CategoricalOptions,
    out_dir: Path,
    progress: bool,
    dense: list[str],
    sparse: list[str],
    chunks: Iterable[Chunk],
    reader: RawReader,
    rule: SplitRule,
    extra: dict[str, Any] | None = None,
) -> PreparedDataset:
    """Run the read / count / write passes and publish the prepared dataset.

    ``chunks`` is consumed once, lazily; ``reader`` supplies the sources' sizes, hashes and
    row counts and the bad-row count for the manifest.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    spill_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.spill-", dir=out_dir.parent))
    cap = options.max_rows_per_table
    spill = _Spill(spill_dir, len(dense), len(sparse), rule.needs_time)
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            with _progress(progress, f"{dataset}: read") as bar:
                for chunk in _checked(chunks, len(dense), len(sparse)):
                    encoded = list(pool.map(lambda col: encode_column(col, cap), chunk.sparse))
                    n = len(chunk.label)
                    local = np.empty((n, len(sparse)), dtype=np.int32)
                    for f, (idx, _) in enumerate(encoded):
                        local[:, f] = idx
                    spill.add(chunk, local, [k for _, k in encoded])
                    bar.update(n)
            spill.close()
            if spill.rows == 0:
                raise DataError(
                    f"{dataset}: no usable rows were read ({reader.bad.total} bad rows skipped)"
                )
            rows_per_source = {i: s.rows for i, s in enumerate(reader.sources)}
            rule.fit(rows_per_source, spill.times() if rule.needs_time else None)
            vocabs = _count(spill, rule, options, pool, progress, dataset)
            schema = FeatureSchema(
                dense=dense, sparse=sparse, cardinalities=[v.size for v in vocabs]
            )
            manifest = {
                "dataset": dataset,
                "protocol": protocol,
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
                    "order": "most frequent first, ties by value key",
                },
                "vocab": {
                    name: {"size": v.size, "distinct": v.distinct, "frequent": v.frequent}
                    for name, v in zip(sparse, vocabs, strict=True)
                },
                "split": rule.describe(),
                "bad_rows": reader.bad.as_dict(),
                **(extra or {}),
            }
            return _write(spill, rule, schema, vocabs, out_dir, manifest, pool, progress, dataset)
    finally:
        spill.close_files()
        shutil.rmtree(spill_dir, ignore_errors=True)


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
    options: CategoricalOptions,
    pool: ThreadPoolExecutor,
    progress: bool,
    dataset: str,
) -> list[Vocabulary]:
    counters = [VocabCounter() for _ in range(spill.num_sparse)]
    with _progress(progress, f"{dataset}: count", spill.rows) as bar:
        for record in spill.records:
            if options.vocab_split == "train":
                mask = rule.assign(spill.rows_of(record)) == TRAIN
                if not mask.any():
                    bar.update(record.rows)
                    continue
            else:
                mask = None
            local = spill.read("local", record)

            def count(
                f: int,
                local: np.ndarray = local,
                mask: np.ndarray | None = mask,
                record: _ChunkRecord = record,
            ) -> None:
                column = local[:, f] if mask is None else local[mask, f]
                keys = spill.chunk_keys(record, f)
                counts = np.bincount(column + 1, minlength=len(keys) + 1)[1:]
                seen = counts > 0
                counters[f].add(keys[seen], counts[seen])

            list(pool.map(count, range(spill.num_sparse)))
            bar.update(record.rows)
    vocabs = []
    for f in range(len(counters)):
        keys, counts = counters[f].finish()
        counters[f] = VocabCounter()  # free the counts as the vocabularies are built
        vocabs.append(Vocabulary.build(keys, counts, options.min_count))
        del keys, counts
    return vocabs


def _write(
    spill: _Spill,
    rule: SplitRule,
    schema: FeatureSchema,
    vocabs: list[Vocabulary],
    out_dir: Path,
    manifest: dict[str, Any],
    pool: ThreadPoolExecutor,
    progress: bool,
    dataset: str,
) -> PreparedDataset:
    sparse_dtype = np.int32 if max(schema.cardinalities, default=0) < 2**31 else np.int64
    num_sparse, num_dense = spill.num_sparse, spill.num_dense
    clicks = np.zeros(3)
    with PreparedWriter(out_dir, schema, sparse_dtype) as writer:
        for split in SPLIT_NAMES:  # every split exists, even if empty
            writer.append(
                split,
                np.zeros((0, num_dense), np.float32),
                np.zeros((0, num_sparse), sparse_dtype),
                np.zeros(0, np.float32),
            )
        with _progress(progress, f"{dataset}: write", spill.rows) as bar:
            for record in spill.records:
                rows = spill.rows_of(record)
                codes = rule.assign(rows)
                local = spill.read("local", record)
                ids = np.empty(local.shape, dtype=sparse_dtype)

                def remap(
                    f: int,
                    local: np.ndarray = local,
                    ids: np.ndarray = ids,
                    record: _ChunkRecord = record,
                ) -> None:
                    table = np.concatenate(
                        ([MISSING], vocabs[f].lookup(spill.chunk_keys(record, f)))
                    )
                    ids[:, f] = table[local[:, f] + 1]

                list(pool.map(remap, range(num_sparse)))
                dense = spill.read("dense", record)
                label = rows.label
                for code, split in enumerate(SPLIT_NAMES):
                    mask = codes == code
                    if mask.all():
                        writer.append(split, dense, ids, label)
                    elif mask.any():
                        writer.append(split, dense[mask], ids[mask], label[mask])
                    clicks[code] += label[mask].sum()
                bar.update(record.rows)
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
    "OnBadRows",
    "build_prepared",
    "chunk_from_arrays",
    "label_column",
    "numpy_column",
]
