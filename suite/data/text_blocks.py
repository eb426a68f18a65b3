"""Raw text files as blocks of whole lines, read on a background thread.

Plain or gzip files (found by their magic bytes, every gzip member) are read in pieces,
hashed as the bytes go by (the manifest's sha256 costs no second read) and cut into
:class:`Block` s of about ``block_bytes`` whole lines; a UTF-8 byte order mark at the
start of a file is dropped. Plain files are read straight into reused buffers.
"""

from __future__ import annotations

import hashlib
import io
import weakref
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from suite.errors import DataError

READ_BYTES = 8 << 20
"""Compressed bytes read at a time from a gzip file (a plain file is read a block at a
time, straight into the block's buffer)."""
BOM = b"\xef\xbb\xbf"
"""A UTF-8 byte order mark, dropped from the start of every file (with a header or not)."""
NEWLINE = ord("\n")


@dataclass
class SourceInfo:
    """What the manifest records of one raw file: name, size, sha256 and data rows."""

    name: str
    bytes: int = 0
    sha256: str = ""
    rows: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "sha256": self.sha256, "rows": self.rows}


@dataclass
class Block:
    """Whole lines of one file: where they start (line, data row), the bytes, how many."""

    first_line: int
    first_row: int
    data: bytes | memoryview
    lines: int


def line_blocks(
    path: Path, block_bytes: int, header: bool, info: SourceInfo
) -> Iterator[bytes | Block]:
    """The header line (``b""`` when there is none), then blocks of whole lines.

    Hashes the raw bytes into ``info`` as it reads; decompresses gzip (all members).
    """
    digest = hashlib.sha256()
    line = 1
    row = 0
    header_seen = not header
    sizes = [0]

    def emit(data: bytes | memoryview) -> Iterator[bytes | Block]:
        nonlocal line, row, header_seen
        if not header_seen:
            cut = _next_newline(data, 0) + 1
            yield bytes(data[:cut])
            header_seen = True
            data = data[cut:]
            line += 1
        start = 0
        while start < len(data):  # blocks of about block_bytes, cut after a newline
            stop = _next_newline(data, start + block_bytes - 1) + 1
            stop = len(data) if stop == 0 or len(data) - stop < block_bytes // 4 else stop
            piece = data[start:stop] if start or stop < len(data) else data
            count = _count_newlines(piece)
            yield Block(line, row, piece, count)
            line += count
            row += count
            start = stop

    if not header:
        yield b""
    with open(path, "rb") as handle:
        gz = handle.read(2) == b"\x1f\x8b"
        handle.seek(0)
        pieces = (
            _inflated_pieces(handle, path, block_bytes, digest, sizes)
            if gz
            else _file_pieces(handle, block_bytes, digest, sizes)
        )
        at_start = True
        for piece in pieces:
            if at_start:  # a UTF-8 byte order mark is not data
                piece = piece[len(BOM) :] if piece[: len(BOM)] == BOM else piece
                at_start = False
            if piece[-1:] == b"\n":
                yield from emit(piece)
            elif bytes(piece).strip(b"\r\n"):  # the last line lacks its line break
                yield from emit(bytes(piece) + b"\n")
            elif piece and not header_seen:
                yield from emit(bytes(piece))
    if not header_seen:
        raise DataError(f"{path}: empty file (no header)")
    info.bytes = sizes[0]
    info.sha256 = digest.hexdigest()
    info.rows = row


def _file_pieces(
    handle: io.BufferedIOBase, block_bytes: int, digest: Any, sizes: list[int]
) -> Iterator[bytes | memoryview]:
    """An uncompressed file in pieces of whole lines (the last may lack its line break).

    Each piece is read straight into a buffer behind the previous piece's unfinished
    line, so the text is copied once, by the read. The buffers are used again once the
    pieces cut from them are gone, so their pages are not faulted in afresh for every
    block; a new one is left uninitialised, first touched by the read, without the GIL.
    """
    buffers = _BufferPool()
    carry = b""
    while True:
        buffer = buffers.take(len(carry) + block_bytes)
        buffer[: len(carry)] = np.frombuffer(carry, dtype=np.uint8)
        view = buffer.data  # a memoryview of the buffer's bytes
        got = handle.readinto(view[len(carry) :])
        if not got:
            if carry:
                yield carry
            return
        digest.update(view[len(carry) : len(carry) + got])
        sizes[0] += got
        end = len(carry) + got
        cut = _last_newline(buffer[:end]) + 1
        carry = buffer[cut:end].tobytes()
        if cut:  # else one line is longer than the buffer: read on behind it
            yield view[:cut]
        del buffer, view  # the pool may hand it out again once its pieces are gone


class _BufferPool:
    """Block buffers used again once nothing refers to them.

    A fresh buffer's pages are zeroed by the kernel when first touched, which cost as
    much as reading the text into them. Each buffer is handed out as a view of it; the
    pieces cut from that view keep it alive, so a buffer is free again exactly when its
    view is gone (a weak reference says so, whoever held the pieces).
    """

    def __init__(self, keep: int = 8) -> None:
        self._keep = keep
        self._entries: list[tuple[np.ndarray, weakref.ref[np.ndarray]]] = []

    def take(self, size: int) -> np.ndarray:
        """A writable uint8 ``[size]`` array nobody else holds (contents undefined)."""
        for i, (buffer, handed) in enumerate(self._entries):
            if handed() is None and len(buffer) >= size:
                view = buffer[:size]
                self._entries[i] = (buffer, weakref.ref(view))
                return view
        buffer = np.empty(size + size // 8, dtype=np.uint8)  # room for a longer carry
        view = buffer[:size]
        if len(self._entries) < self._keep:
            self._entries.append((buffer, weakref.ref(view)))
        return view


def _next_newline(data: bytes | memoryview, start: int) -> int:
    """Index of the first ``\\n`` at or after ``start``, or -1 (numpy: no GIL held)."""
    text = np.frombuffer(data, dtype=np.uint8)
    window = 1 << 16
    while start < len(text):
        hits = np.flatnonzero(text[start : start + window] == NEWLINE)
        if len(hits):
            return start + int(hits[0])
        start += window
        window *= 2
    return -1


def _count_newlines(data: bytes | memoryview, window: int = 1 << 18) -> int:
    """How many ``\\n`` ``data`` holds. Compared a window at a time into one small buffer:
    a block-sized temporary costs more in the kernel's zeroing of its fresh pages than
    the comparison itself."""
    text = np.frombuffer(data, dtype=np.uint8)
    hits = np.empty(min(window, len(text)), dtype=bool)
    count = 0
    for start in range(0, len(text), window):
        part = text[start : start + window]
        found = hits[: len(part)]
        np.equal(part, NEWLINE, out=found)
        count += int(np.count_nonzero(found))
    return count


def _last_newline(text: np.ndarray) -> int:
    """Index of the last ``\\n`` in ``text`` (uint8), or -1."""
    stop, window = len(text), 1 << 16
    while stop > 0:
        start = max(0, stop - window)
        hits = np.flatnonzero(text[start:stop] == NEWLINE)
        if len(hits):
            return start + int(hits[-1])
        stop = start
        window *= 2
    return -1


def _inflated_pieces(
    handle: BinaryIO, path: Path, block_bytes: int, digest: Any, sizes: list[int]
) -> Iterator[bytes]:
    """A gzip file's text (all members) in pieces of whole lines of at least
    ``block_bytes`` (the last may be shorter and lack its line break)."""
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    pending: list[bytes] = []
    pending_bytes = 0
    lines = 0  # in the pieces given out
    while True:
        raw = handle.read(READ_BYTES)
        if not raw:
            break
        digest.update(raw)
        sizes[0] += len(raw)
        try:
            data = inflater.decompress(raw)
            while inflater.eof and inflater.unused_data:  # a further gzip member
                rest = inflater.unused_data
                inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
                data += inflater.decompress(rest)
        except zlib.error as exc:
            raise DataError(
                f"{path}: corrupt gzip stream after line {lines + _lines(pending)} ({exc})"
            ) from None
        if not data:
            continue
        pending.append(data)
        pending_bytes += len(data)
        if pending_bytes >= block_bytes:
            joined = b"".join(pending)
            cut = joined.rfind(b"\n") + 1
            pending = [joined[cut:]] if cut < len(joined) else []
            pending_bytes = len(joined) - cut
            if cut:
                lines += joined.count(b"\n", 0, cut)
                yield joined[:cut]
    if not inflater.eof:
        raise DataError(
            f"{path}: truncated gzip stream: the file ends inside line "
            f"{lines + 1 + _lines(pending)}; download it again"
        )
    if pending:
        yield b"".join(pending)


def _lines(pending: list[bytes]) -> int:
    return sum(p.count(b"\n") for p in pending)
