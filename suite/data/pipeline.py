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
from typing import Any

import numpy as np
from tqdm import tqdm

from suite.data.chunks import (
    WORKERS,
    CategoricalOptions,
    Chunk,
)
from suite.data.duplicates import duplicate_warnings, find_duplicates, row_hashes_in_parts
from suite.data.prepared import CACHE_OPTION, PreparedDataset, PreparedWriter
from suite.data.raw import RawReader, prefetch
from suite.data.schema import FeatureSchema
from suite.data.slot import remove_stale, source_guard
from suite.data.spill import ChunkRecord, Spill, shifted_ids, spill_memory_budget
from suite.data.splits import DROP, SPLIT_NAMES, TRAIN, Rows, SplitRule
from suite.data.vocab import (
    FIRST_ID,
    MISSING,
    RARE,
    VocabCounter,
    Vocabulary,
    bucket_keys,
    encode_column,
    first_rows,
)
from suite.errors import DataError, DiskFullError
from suite.fileio import disk_full_error, is_disk_full, make_temp_dir, writing
from suite.progress import progress_bar


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


def _progress(enabled: bool, desc: str, total: int | None = None) -> tqdm:
    return progress_bar(
        total=total, desc=desc, unit=" rows", unit_scale=True, enabled=enabled, leave=False
    )


def build_prepared(job: PrepareJob) -> PreparedDataset:
    """Run the read / count / write passes and publish the prepared dataset."""
    out_dir = Path(job.out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out_dir.parent, time.time())
    with writing(out_dir.parent, option=CACHE_OPTION):
        spill_dir = make_temp_dir(f".{out_dir.name}.spill-{os.getpid()}-", out_dir.parent)
    spill = Spill(
        spill_dir,
        len(job.dense),
        len(job.sparse),
        job.rule.needs_time,
        memory_budget=spill_memory_budget(),
    )
    job.reader.guard = source_guard(out_dir, job.force)  # other raw files: refused before reading
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            _read(job, spill, pool)
            return _count_and_write(job, spill, pool, out_dir)
    except Exception as exc:
        if isinstance(exc, DiskFullError) or not is_disk_full(exc, spill_dir):
            raise
        raise _disk_full(job, spill, spill_dir, out_dir) from None
    finally:
        with contextlib.suppress(OSError):  # a close that fails has been reported above
            spill.close_files()
        shutil.rmtree(spill_dir, ignore_errors=True)


def _read(job: PrepareJob, spill: Spill, pool: ThreadPoolExecutor) -> None:
    """Pass 1: encode every chunk's categorical columns per chunk, hash its rows and keep
    it in ``spill``; the next blocks are parsed on a thread while this one is encoded."""
    num_dense, num_sparse = len(job.dense), len(job.sparse)
    cap = job.options.max_rows_per_table
    with (
        _progress(job.progress, f"{job.dataset}: read") as bar,
        closing(prefetch(lambda: iter(job.chunks), name="prepare-parse")) as chunks,
    ):
        for chunk in _checked(chunks, num_dense, num_sparse):
            n = len(chunk.label)
            by_feature = np.empty((num_sparse, n), dtype=np.int32)

            def encode(
                f: int, chunk: Chunk = chunk, by_feature: np.ndarray = by_feature
            ) -> tuple[np.ndarray, np.ndarray]:
                by_feature[f], column_keys = encode_column(chunk.sparse[f], None)
                return column_keys, shifted_ids(by_feature[f], len(column_keys))

            encoded = list(pool.map(encode, range(num_sparse)))
            keys, ids = [k for k, _ in encoded], [i for _, i in encoded]
            row_hash = row_hashes_in_parts(pool, chunk.label, chunk.dense, by_feature.T, keys)
            if cap is not None:
                keys = [bucket_keys(k, cap) for k in keys]
            spill.add(chunk, ids, keys, row_hash)
            bar.update(n)
    spill.close_files()
    if spill.rows == 0:
        raise DataError(
            f"{job.dataset}: no usable rows were read ({job.reader.bad.total} bad rows skipped)"
        )


def _count_and_write(
    job: PrepareJob, spill: Spill, pool: ThreadPoolExecutor, out_dir: Path
) -> PreparedDataset:
    """Passes 2 and 3: fit the split rule, count duplicates and vocabularies, write."""
    options, rule, reader, dataset = job.options, job.rule, job.reader, job.dataset
    rows_per_source = {i: s.rows for i, s in enumerate(reader.sources)}
    rule.fit(rows_per_source, spill.times() if rule.needs_time else None)
    if options.dedupe:  # the count must skip the dropped rows
        duplicates, drop = find_duplicates(spill, rule, options)
        vocabs = _count(spill, rule, drop, options, pool, job.progress, dataset)
    else:  # nothing is dropped: the duplicates' sort runs beside the count
        with ThreadPoolExecutor(1, thread_name_prefix="prepare-duplicates") as side:
            counted = side.submit(find_duplicates, spill, rule, options)
            vocabs = _count(spill, rule, None, options, pool, job.progress, dataset)
            duplicates, drop = counted.result()
    warnings = [*rule.warnings, *duplicate_warnings(dataset, duplicates, options)]
    schema = FeatureSchema(
        dense=job.dense, sparse=job.sparse, cardinalities=[v.size for v in vocabs]
    )
    manifest = _manifest(job, vocabs, duplicates)
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


def _manifest(
    job: PrepareJob, vocabs: list[Vocabulary], duplicates: dict[str, Any]
) -> dict[str, Any]:
    """The manifest's facts of the read and count passes, then the dataset's extra ones."""
    options, reader = job.options, job.reader
    return {
        "dataset": job.dataset,
        "protocol": job.protocol,
        "options": options.model_dump(mode="json"),
        "sources": [s.as_dict() for s in reader.sources],
        "thresholds": {
            "min_count": options.min_count,
            "max_rows_per_table": options.max_rows_per_table,
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
            for name, v in zip(job.sparse, vocabs, strict=True)
        },
        "split": job.rule.describe(),
        "bad_rows": reader.bad.as_dict(),
        "duplicates": duplicates,
        **job.extra,
    }


def _disk_full(job: PrepareJob, spill: Spill, spill_dir: Path, out_dir: Path) -> DiskFullError:
    """The error for a disk that filled mid-prepare, with a lower bound of the space needed."""
    with contextlib.suppress(OSError):
        spill.close_files()
    # what the rows read so far took, in the spill and in their prepared files: a
    # lower bound of the space the whole prepare needs
    spilled = sum(f.stat().st_size for f in spill_dir.rglob("*") if f.is_file())
    needed = spilled + spill.rows * (4 * (len(job.dense) + 1) + 4 * len(job.sparse))
    shutil.rmtree(spill_dir, ignore_errors=True)  # first: the figure shows the space it held
    return disk_full_error(out_dir.parent, needed, CACHE_OPTION, at_least=True)


def _assign(rule: SplitRule, rows: Rows, drop: np.ndarray | None) -> np.ndarray:
    codes = rule.assign(rows)
    if drop is not None:
        codes = np.where(drop[rows.position : rows.position + len(codes)], DROP, codes)
    return codes.astype(np.uint8, copy=False)


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
    spill: Spill,
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
    counted: list[tuple[ChunkRecord, np.ndarray | None]] = []
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
    spill: Spill,
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

        def remapped(record: ChunkRecord) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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
