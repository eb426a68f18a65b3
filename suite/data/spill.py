"""Pass-1 results of a prepare kept until the write pass: in memory up to a budget,
the rest in flat files next to the output, so the process's memory stays bounded."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from suite.data.chunks import Chunk
from suite.data.splits import Rows


@dataclass
class ChunkRecord:
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
class Spill:
    """Pass-1 results until the write pass: chunks in memory up to ``memory_budget``
    bytes, the rest in flat files (the process's memory stays bounded either way)."""

    directory: Path
    num_dense: int
    num_sparse: int
    with_time: bool
    memory_budget: int = 0
    records: list[ChunkRecord] = field(default_factory=list)
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
        record = ChunkRecord(
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
        data: np.ndarray = np.fromfile(
            self.directory / name, dtype=dtype, count=count * width, offset=start * width * itemsize
        )
        return data.reshape(count, width) if width > 1 or name == "dense" else data

    def read(self, name: str, record: ChunkRecord) -> np.ndarray:
        if name == "row" and record.first_row is not None:
            return np.arange(record.first_row, record.first_row + record.rows, dtype=np.int64)
        if record.memory is not None:
            return record.memory[name]
        if name == "row":
            return self._read(name, np.int64, record.row_start, record.rows)
        width = self._widths.get(name, 1)
        return self._read(name, _DTYPES[name], record.file_start, record.rows, width)

    def feature_ids(self, record: ChunkRecord, f: int) -> np.ndarray:
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
        out: np.ndarray = np.empty(self.rows, dtype=_DTYPES[name])
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

    def chunk_keys(self, record: ChunkRecord, f: int) -> np.ndarray:
        if record.memory is not None:
            return record.memory[f"keys{f}"]
        return self._read(f"keys{f}", np.uint64, record.key_offsets[f], record.key_counts[f])

    def rows_of(self, record: ChunkRecord) -> Rows:
        time = self.read("time", record) if self.with_time else None
        return Rows(
            record.source, self.read("row", record), self.read("label", record), time, record.start
        )
