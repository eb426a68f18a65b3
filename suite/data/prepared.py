"""Prepared datasets on disk: flat binary arrays per split plus ``manifest.json``.

Layout of a prepared directory::

    manifest.json              schema, row counts, options, sources, fingerprint,
                               each file's sha256, each split's ranges
    <split>.dense.f32          float32 [N, Dd]
    <split>.sparse.i32|i64     int32/int64 [N, F]
    <split>.label.f32          float32 [N]

A :class:`PreparedWriter` streams chunks into a temporary directory and publishes it with
one atomic rename, after the fingerprint is written; a directory without a complete
manifest is never loaded.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from suite import __version__
from suite.data import slot
from suite.data.integrity import (
    check_ranges,
    column_ranges,
    first_bad_dense,
    first_bad_id,
    first_bad_label,
    verify_files,
)
from suite.data.schema import FeatureSchema
from suite.errors import DataError, DiskFullError
from suite.fileio import disk_full_error, is_disk_full, make_temp_dir, writing

FORMAT_VERSION = 2
MANIFEST = "manifest.json"
SPLITS = ("train", "val", "test")


class OutdatedFormat(DataError):
    """A prepared slot written in another format version than this suite reads."""


@dataclass(frozen=True)
class SplitArrays:
    """Arrays of one split: ``dense [N, Dd]`` float32, ``sparse [N, F]`` int, ``label [N]``."""

    dense: np.ndarray
    sparse: np.ndarray
    label: np.ndarray

    def __len__(self) -> int:
        return int(self.label.shape[0])


@dataclass(frozen=True)
class PreparedDataset:
    """A prepared dataset: schema, manifest and memory-mapped splits."""

    path: Path | None
    schema: FeatureSchema
    manifest: dict[str, Any]
    splits: dict[str, SplitArrays]

    @property
    def fingerprint(self) -> str:
        return str(self.manifest["fingerprint"])

    def split(self, name: str) -> SplitArrays:
        if name not in self.splits:
            raise DataError(f"prepared dataset has no split {name!r} (has {sorted(self.splits)})")
        return self.splits[name]

    def feature_counts(self, split: str = "train") -> list[np.ndarray]:
        """Occurrences of each id per feature in ``split``: a list of int64 ``[n_f]``."""
        sparse = self.split(split).sparse
        counts = [np.zeros(n, dtype=np.int64) for n in self.schema.cardinalities]
        step = 1 << 20
        for start in range(0, sparse.shape[0], step):
            chunk = np.asarray(sparse[start : start + step])
            for f, n in enumerate(self.schema.cardinalities):
                counts[f] += np.bincount(chunk[:, f], minlength=n)[:n]
        return counts


def _sparse_suffix(dtype: np.dtype) -> str:
    return "i64" if np.dtype(dtype) == np.int64 else "i32"


def _files(split: str, sparse_dtype: np.dtype) -> dict[str, str]:
    return {
        "dense": f"{split}.dense.f32",
        "sparse": f"{split}.sparse.{_sparse_suffix(sparse_dtype)}",
        "label": f"{split}.label.f32",
    }


HASH_QUEUE = 8
"""Chunks whose sha256 may still be pending behind the writer."""

CACHE_OPTION = "dataset.cache_dir (--cache-dir)"
"""The setting that moves prepared data, named when its disk is full."""


class PreparedWriter:
    """Streams split chunks to a temporary directory, then publishes it atomically.

    Use as a context manager; if the block raises, nothing is published. Every chunk is
    checked as it is written (labels 0/1, dense values finite, ids inside their
    vocabularies) and hashed, so the manifest records each file's sha256 and ranges
    without a second read. ``force``: replace a slot prepared from other raw files;
    ``min_split_rows``: the fewest rows a split may have; ``both_labels``: each split
    must hold rows of both labels (else AUC and log loss mean nothing); ``expected_rows``:
    the rows it will hold, where known, so that a disk without room for them is refused
    before writing and a full disk names the space needed.
    """

    def __init__(
        self,
        out_dir: Path,
        schema: FeatureSchema,
        sparse_dtype: Any = np.int32,
        *,
        force: bool = False,
        min_split_rows: int = 1,
        both_labels: bool = True,
        expected_rows: int | None = None,
    ):
        self.out_dir = Path(out_dir)
        self.schema = schema
        self.sparse_dtype = np.dtype(sparse_dtype)
        self.force = force
        self.min_split_rows = min_split_rows
        self.both_labels = both_labels
        self.needed = None if expected_rows is None else expected_rows * self.row_bytes()
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        slot.remove_stale(self.out_dir.parent, time.time())
        with writing(self.out_dir.parent, self.needed, CACHE_OPTION):
            self.tmp = make_temp_dir(
                f".{self.out_dir.name}.tmp-{os.getpid()}-", self.out_dir.parent
            )
        self._handles: dict[tuple[str, str], Any] = {}
        self._hashes: dict[str, Any] = {}
        # sha256 runs beside the main thread (hashlib releases the GIL), in order per file
        self._hashing = ThreadPoolExecutor(1, thread_name_prefix="prepared-sha256")
        self._pending: deque[Future[None]] = deque()
        self._ranges: dict[str, dict[str, Any]] = {}
        self.rows: dict[str, int] = {}

    def row_bytes(self) -> int:
        """Bytes one row takes in the prepared files (dense, sparse ids and label)."""
        return 4 * (self.schema.num_dense + 1) + self.sparse_dtype.itemsize * self.schema.num_sparse

    def __enter__(self) -> PreparedWriter:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, *_: Any) -> None:
        if exc_type is not None:
            full = exc is not None and is_disk_full(exc, self.tmp)
            self.abort()
            if full and not isinstance(exc, DiskFullError):
                raise disk_full_error(self.out_dir.parent, self.needed, CACHE_OPTION) from None

    def append(self, split: str, dense: np.ndarray, sparse: np.ndarray, label: np.ndarray) -> None:
        """Append rows: ``dense [n, Dd]``, ``sparse [n, F]``, ``label [n]``.

        They are hashed on a background thread after this returns: do not modify them
        until :meth:`finish`."""
        n = len(label)
        if dense.shape != (n, self.schema.num_dense) or sparse.shape != (n, self.schema.num_sparse):
            raise DataError(
                f"chunk for split {split!r} has shapes dense {dense.shape}, sparse {sparse.shape}, "
                f"label {label.shape}; expected ({n}, {self.schema.num_dense}) and ({n}, {self.schema.num_sparse})"
            )
        arrays = {
            "dense": np.ascontiguousarray(dense, dtype=np.float32),
            "sparse": np.ascontiguousarray(sparse, dtype=self.sparse_dtype),
            "label": np.ascontiguousarray(label, dtype=np.float32),
        }
        problem = first_bad_label(arrays["label"]) or first_bad_dense(
            arrays["dense"], self.schema.dense
        )
        if problem is None and not self._track(split, arrays):
            problem = first_bad_id(arrays["sparse"], self.schema.sparse, self.schema.cardinalities)
        if problem:
            raise DataError(f"split {split}: {problem}")
        for kind, name in _files(split, self.sparse_dtype).items():
            key = (split, kind)
            if key not in self._handles:
                self._handles[key] = open(self.tmp / name, "wb")  # noqa: SIM115
                self._hashes[name] = hashlib.sha256()
            data = arrays[kind]
            data.tofile(self._handles[key])
            self._hash(name, data)
        self.rows[split] = self.rows.get(split, 0) + n

    def _hash(self, name: str, data: np.ndarray) -> None:
        """Queue ``data``'s bytes for its file's sha256 (at most a few chunks behind)."""
        while len(self._pending) >= HASH_QUEUE:
            self._pending.popleft().result()
        update = self._hashes[name].update
        self._pending.append(self._hashing.submit(update, data.reshape(-1).view(np.uint8)))

    def _track(self, split: str, arrays: dict[str, np.ndarray]) -> bool:
        """Add the chunk to the split's ranges; False when an id is outside its vocabulary."""
        ranges = self._ranges.setdefault(
            split,
            {
                "sparse_min": [None] * self.schema.num_sparse,
                "sparse_max": [None] * self.schema.num_sparse,
                "positives": 0,
                "dense_finite": True,
            },
        )
        sparse = arrays["sparse"]
        if not len(sparse):
            return True
        lows, highs = column_ranges(sparse)
        if (lows < 0).any() or (highs >= np.asarray(self.schema.cardinalities)).any():
            return False
        ranges["positives"] += int(np.count_nonzero(arrays["label"]))
        for f, (low, high) in enumerate(zip(lows.tolist(), highs.tolist(), strict=True)):
            old_low, old_high = ranges["sparse_min"][f], ranges["sparse_max"][f]
            ranges["sparse_min"][f] = low if old_low is None else min(old_low, low)
            ranges["sparse_max"][f] = high if old_high is None else max(old_high, high)
        return True

    def abort(self) -> None:
        self._hashing.shutdown(wait=True, cancel_futures=True)
        for handle in self._handles.values():
            with contextlib.suppress(OSError):  # its buffer may not fit a full disk
                handle.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _check_splits(self, manifest: dict[str, Any]) -> None:
        for split in SPLITS:
            n = self.rows.get(split, 0)
            positives = self._ranges.get(split, {}).get("positives", 0)
            one_label = positives == 0 or positives == n
            if n < self.min_split_rows or (self.both_labels and one_label):
                raise DataError(
                    f"{manifest.get('dataset', 'dataset')} (protocol {manifest.get('protocol')}): "
                    f"split {split} has {n} rows ({positives} positive, {n - positives} negative); "
                    f"every split needs rows of both labels and at least {self.min_split_rows} "
                    "rows (option min_split_rows)"
                )

    def finish(self, manifest: dict[str, Any]) -> PreparedDataset:
        """Close files, check the splits, compute the fingerprint, write the manifest and
        publish (refusing to replace data prepared from other raw files unless forced)."""
        for handle in self._handles.values():
            handle.flush()
        # the content fingerprint reads the files back while they are made durable
        fingerprint = self._hashing.submit(
            content_fingerprint, self.tmp, self.schema, self.rows, self.sparse_dtype
        )
        for handle in self._handles.values():
            os.fsync(handle.fileno())
            handle.close()
        self._hashing.shutdown(wait=True)
        self._check_splits(manifest)
        digests = {name: h.hexdigest() for name, h in self._hashes.items()}
        full = {
            **manifest,
            "format_version": FORMAT_VERSION,
            "suite_version": __version__,
            "schema": self.schema.model_dump(),
            "sparse_dtype": self.sparse_dtype.name,
            "rows": dict(sorted(self.rows.items())),
            "files": {
                name: {"bytes": (self.tmp / name).stat().st_size, "sha256": digests[name]}
                for name in sorted(digests)
            },
            "ranges": dict(sorted(self._ranges.items())),
        }
        full["fingerprint"] = fingerprint.result()
        slot.check_replace(self.out_dir, full, self.force)
        (self.tmp / MANIFEST).write_text(json.dumps(full, indent=2, sort_keys=True))
        _publish(self.tmp, self.out_dir)
        return load_prepared(self.out_dir, trusted=digests)


def _publish(tmp: Path, out_dir: Path) -> None:
    """Replace ``out_dir`` with ``tmp`` so readers see the old or the new, never a mix.

    Between the two renames the slot is missing; if the process dies there, the next
    open of the slot puts the ``.old-<pid>`` back (:func:`suite.data.slot.recover`).
    """
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        os.replace(out_dir, old)
    try:
        os.replace(tmp, out_dir)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST) and (out_dir / MANIFEST).is_file():
            # a concurrent prepare of the same slot published between our two renames:
            # its arrays stand (the same deterministic content), ours and the old go
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            return
        if old is not None:  # put the old arrays back before reporting
            os.replace(old, out_dir)
        raise
    except BaseException:
        if old is not None:
            os.replace(old, out_dir)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def content_fingerprint(
    directory: Path, schema: FeatureSchema, rows: dict[str, int], sparse_dtype: np.dtype
) -> str:
    """sha256 over the schema, row counts and every array's bytes, in a fixed order."""
    digest = hashlib.sha256()
    digest.update(json.dumps(schema.model_dump(), sort_keys=True).encode())
    digest.update(json.dumps(dict(sorted(rows.items())), sort_keys=True).encode())
    for split in sorted(rows):
        for _kind, name in sorted(_files(split, sparse_dtype).items()):
            digest.update(name.encode())
            with open(directory / name, "rb") as handle:
                while block := handle.read(1 << 24):
                    digest.update(block)
    return digest.hexdigest()


def _remedy(manifest: dict[str, Any]) -> str:
    """What a refused slot's error tells to do: the ``suite prepare`` command that makes it."""
    command = (
        f"suite prepare {manifest.get('dataset', 'DATASET')} --protocol {manifest.get('protocol')}"
    )
    raw = " --raw and" if manifest.get("sources") else ""
    return f"prepare it again with `{command}` (and the{raw} --set options it was prepared with)"


def load_prepared(directory: str | Path, trusted: dict[str, str] | None = None) -> PreparedDataset:
    """Memory-map a published prepared directory; refuse incomplete, outdated or corrupt ones.

    The arrays' sizes and sha256 (every file read whole, every load: see
    :mod:`suite.data.integrity`) and recorded ranges are checked; any mismatch is one
    ``DataError`` naming the file or column and the command that prepares it again.
    ``trusted``: checksums the caller computed on the bytes it just wrote.
    """
    directory = Path(directory)
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        slot.recover(directory)
    if not manifest_path.is_file():
        raise DataError(f"{directory} is not a prepared dataset (no {MANIFEST})")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{manifest_path}:{exc.lineno}: corrupt manifest ({exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{manifest_path}: unreadable manifest ({exc})") from None
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if version != FORMAT_VERSION:
        raise OutdatedFormat(
            f"{directory}: prepared in format {version}, this suite reads format "
            f"{FORMAT_VERSION}; run `suite prepare` for it again"
        )
    if any(key not in manifest for key in ("fingerprint", "files", "ranges", "schema", "rows")):
        raise DataError(f"{manifest_path}: incomplete manifest; prepare again")
    schema = FeatureSchema.model_validate(manifest["schema"])
    sparse_dtype = np.dtype(manifest["sparse_dtype"])
    check_ranges(manifest_path, manifest)
    splits = {}
    for split, n in manifest["rows"].items():
        files = _files(split, sparse_dtype)
        shapes = {"dense": (n, schema.num_dense), "sparse": (n, schema.num_sparse), "label": (n,)}
        dtypes = {"dense": np.float32, "sparse": sparse_dtype, "label": np.float32}
        arrays = {}
        for kind, name in files.items():
            path = directory / name
            expected = int(np.prod(shapes[kind])) * np.dtype(dtypes[kind]).itemsize
            if not path.is_file() or path.stat().st_size != expected:
                raise DataError(
                    f"{path}: missing or wrong size (expected {expected} bytes); prepare again"
                )
            arrays[kind] = (
                np.memmap(path, dtype=dtypes[kind], mode="r", shape=shapes[kind])
                if expected
                else np.zeros(shapes[kind], dtype=dtypes[kind])
            )
        splits[split] = SplitArrays(**arrays)

    def diagnose(name: str) -> str | None:
        split, kind = name.split(".")[:2]
        array = np.asarray(getattr(splits[split], kind))
        if kind == "label":
            return first_bad_label(array)
        if kind == "dense":
            return first_bad_dense(array, schema.dense)
        return first_bad_id(array, schema.sparse, schema.cardinalities)

    unknown = set(manifest["files"]) - {
        name for split in manifest["rows"] for name in _files(split, sparse_dtype).values()
    }
    if unknown:
        raise DataError(f"{manifest_path}: lists unknown files {sorted(unknown)}")
    verify_files(directory, manifest["files"], diagnose, trusted, _remedy(manifest))
    return PreparedDataset(directory, schema, manifest, splits)
