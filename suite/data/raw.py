"""Reading raw text files fast and in bounded memory: line-aligned blocks parsed by pyarrow.

A background thread reads the file (plain or gzip, found by its magic bytes), hashes the
bytes as they go by (the manifest's sha256 costs no second read) and cuts the stream into
blocks of whole lines; the consuming thread parses each block with
``pyarrow.csv.read_csv`` (explicit column types, one core: prepare parses on a thread of
its own while the block before is encoded, which beat pyarrow's threads). Only when
pyarrow rejects a block does slow code run: it finds the offending lines by bisection with
pyarrow itself, so the rules for a bad row are exactly the parser's and the error names
the file and line::

    DataError: train.txt:1234: expected 40 columns, got 39

With ``on_bad_rows="skip"`` bad rows are dropped and counted instead. Empty files and
truncated or corrupt gzip streams are always errors. Errors name the file's full path; a
UTF-8 byte order mark at the start of a file is skipped, with or without a header.
"""

from __future__ import annotations

import hashlib
import queue
import re
import threading
import weakref
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from suite.errors import DataError

BLOCK_BYTES = 32 << 20
"""Target size of one parsed block of text (whole lines)."""
READ_BYTES = 8 << 20
"""Compressed bytes read at a time from a gzip file (a plain file is read a block at a
time, straight into the block's buffer)."""
MAX_EXAMPLES = 20
"""Bad rows described in the manifest (all are counted)."""

OnBadRows = Literal["error", "skip"]
BOM = b"\xef\xbb\xbf"
"""A UTF-8 byte order mark, dropped from the start of every file (with a header or not)."""
NEWLINE = ord("\n")


def find_file(raw: Path, names: tuple[str, ...]) -> Path:
    """``raw`` itself when it is a file, else the first of ``names`` inside it."""
    raw = Path(raw)
    if raw.is_file():
        return raw
    for name in names:
        if (raw / name).is_file():
            return raw / name
    raise DataError(f"{raw}: expected a file, or a directory holding one of {', '.join(names)}")


@dataclass(frozen=True)
class TextFormat:
    """How to parse one kind of delimited text file.

    Args:
        columns: column names in file order.
        types: a pyarrow type for every column that is converted.
        delimiter: one-character field separator.
        header: the first line holds column names (checked against ``columns``).
        encoding: ``"utf8"`` (checked: undecodable bytes make a bad row) or ``"latin1"``.
        quoting: fields may be double-quoted (``movies.csv``); off for speed elsewhere.
        separator: a multi-character separator (``"::"`` in MovieLens-1M) replaced by
            ``delimiter`` before parsing.
        include: columns to convert (others are parsed for their count, then dropped).
    """

    columns: tuple[str, ...]
    types: dict[str, pa.DataType]
    delimiter: str = ","
    header: bool = False
    encoding: str = "utf8"
    quoting: bool = False
    separator: bytes | None = None
    include: tuple[str, ...] | None = None

    def read_options(self) -> pacsv.ReadOptions:
        return pacsv.ReadOptions(
            column_names=list(self.columns),
            use_threads=False,  # one core parses; the other encodes the block before
            encoding=self.encoding,
            block_size=1 << 20,
        )

    def parse_options(self) -> pacsv.ParseOptions:
        return pacsv.ParseOptions(
            delimiter=self.delimiter,
            quote_char='"' if self.quoting else False,
            double_quote=self.quoting,
            ignore_empty_lines=True,
            newlines_in_values=False,
        )

    def convert_options(self) -> pacsv.ConvertOptions:
        return pacsv.ConvertOptions(
            column_types=self.types,
            include_columns=list(self.include or self.columns),
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
        )


@dataclass
class BadRows:
    """Count of skipped rows, per source file, with the first few described."""

    total: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    examples: list[dict[str, str]] = field(default_factory=list)

    def add(self, origin: str, line: int, reason: str) -> None:
        """Count a bad row of ``origin`` (a path; the manifest keeps its base name)."""
        name = Path(origin).name if Path(origin).exists() else origin
        self.total += 1
        self.by_source[name] = self.by_source.get(name, 0) + 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append({"where": f"{name}:{line}", "reason": reason})

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_source": dict(self.by_source),
            "examples": list(self.examples),
        }


@dataclass
class Parsed:
    """One parsed block: a table of its good rows and where each row came from.

    ``lines[i]`` is the block-relative line of table row ``i`` (``None``: every line kept,
    in order); file line numbers are ``first_line + lines[i]`` and data-row indices (the
    row's position among the source's data lines, counting bad ones) ``first_row + lines[i]``.
    """

    table: pa.Table
    origin: str
    first_line: int
    first_row: int
    lines: np.ndarray | None
    on_bad_rows: OnBadRows
    bad: BadRows

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def row_index(self) -> np.ndarray:
        """int64 ``[n]``: each row's index among its source's data rows."""
        local = np.arange(self.num_rows, dtype=np.int64) if self.lines is None else self.lines
        return self.first_row + local

    def line(self, position: int) -> int:
        """File line number of table row ``position``."""
        local = position if self.lines is None else int(self.lines[position])
        return self.first_line + local

    def where(self, position: int) -> str:
        return f"{self.origin}:{self.line(position)}"

    def drop(self, bad: np.ndarray, reason: str) -> None:
        """Handle rows that parsed but are invalid (``bad``: bool ``[n]``): raise a
        ``DataError`` naming the first one, or drop and count them."""
        bad = np.asarray(bad, dtype=bool)
        if not bad.any():
            return
        positions = np.flatnonzero(bad)
        if self.on_bad_rows == "error":
            raise DataError(f"{self.where(int(positions[0]))}: {reason}")
        for pos in positions:
            self.bad.add(self.origin, self.line(int(pos)), reason)
        keep = ~bad
        local = np.arange(self.num_rows, dtype=np.int64) if self.lines is None else self.lines
        self.lines = local[keep]
        self.table = self.table.filter(pa.array(keep))


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
class _Block:
    first_line: int
    first_row: int
    data: bytes | memoryview
    lines: int


class RawReader:
    """Reads raw files for one prepare; keeps their ``SourceInfo`` and the bad-row count.

    Args:
        on_bad_rows: ``"error"`` (default): the first bad row raises ``DataError``;
            ``"skip"``: bad rows are dropped and counted.
        block_bytes: target size of a parsed block (default ``BLOCK_BYTES``).
    """

    def __init__(self, on_bad_rows: OnBadRows = "error", block_bytes: int | None = None) -> None:
        self.on_bad_rows = on_bad_rows
        self.block_bytes = block_bytes or BLOCK_BYTES
        self.bad = BadRows()
        self.sources: list[SourceInfo] = []
        self.guard: Callable[[int, Path], None] | None = None
        """Called with each file's position and path before it is read (may raise)."""

    def read(
        self,
        path: Path,
        fmt: TextFormat | Callable[[list[str]], TextFormat],
        info: SourceInfo | None = None,
    ) -> Iterator[Parsed]:
        """Parse ``path`` block by block. ``fmt`` may be a function of the header's column
        names (for files whose header decides the layout). The file's ``SourceInfo`` is
        appended to ``self.sources`` and complete once the iterator is exhausted."""
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: no such file")
        if self.guard is not None:
            self.guard(len(self.sources), path)
        info = info or SourceInfo(path.name)
        self.sources.append(info)
        has_header = callable(fmt) or fmt.header
        blocks = prefetch(lambda: _line_blocks(path, self.block_bytes, has_header, info))
        try:  # a bad block's error must not keep the reader thread alive in its traceback
            header = next(blocks)
            if has_header:
                assert isinstance(header, bytes)
                fmt = _check_header(path, header, fmt)
            assert isinstance(fmt, TextFormat)
            seen = False
            for block in blocks:
                assert isinstance(block, _Block)
                seen = True
                yield self._parse(str(path), block, fmt)
            if not seen:
                raise DataError(f"{path}: empty file (no data rows)")
        finally:
            blocks.close()

    def _parse(self, origin: str, block: _Block, fmt: TextFormat) -> Parsed:
        data = (
            block.data
            if fmt.separator is None
            else bytes(block.data).replace(fmt.separator, fmt.delimiter.encode())
        )
        try:
            table = _read_csv(data, fmt)
            if table.num_rows == block.lines:  # else the parser skipped an empty line
                return Parsed(
                    table,
                    origin,
                    block.first_line,
                    block.first_row,
                    None,
                    self.on_bad_rows,
                    self.bad,
                )
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
        # slow path: find the bad lines, empty ones included
        parts = _split_lines(bytes(data))
        empty = [(i, "empty line") for i, p in enumerate(parts) if not p.strip(b"\r\n")]
        bad = _find_bad_lines(parts, fmt, self.on_bad_rows == "error", empty)
        if not bad:  # the block fails, but no line alone does
            raise DataError(
                f"{origin}:{block.first_line}: unparseable block of {block.lines} lines"
            )
        if self.on_bad_rows == "error":
            index, reason = bad[0]
            raise DataError(f"{origin}:{block.first_line + index}: {reason}")
        for index, reason in bad:
            self.bad.add(origin, block.first_line + index, reason)
        dropped = {index for index, _ in bad}
        kept = [i for i in range(len(parts)) if i not in dropped]
        table = _read_csv(b"".join(parts[i] for i in kept), fmt) if kept else _empty(fmt)
        lines = np.asarray(kept, dtype=np.int64)
        return Parsed(
            table, origin, block.first_line, block.first_row, lines, self.on_bad_rows, self.bad
        )


def _read_csv(data: bytes, fmt: TextFormat) -> pa.Table:
    return pacsv.read_csv(
        pa.py_buffer(data),
        read_options=fmt.read_options(),
        parse_options=fmt.parse_options(),
        convert_options=fmt.convert_options(),
    )


def _empty(fmt: TextFormat) -> pa.Table:
    names = list(fmt.include or fmt.columns)
    return pa.table({n: pa.array([], type=fmt.types.get(n, pa.string())) for n in names})


def _split_lines(data: bytes) -> list[bytes]:
    """Lines with their ``\\n`` (only ``\\n`` ends a line, as for the parser)."""
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p + b"\n" for p in parts]


def _quick_reason(line: bytes, fmt: TextFormat) -> str | None:
    """Cheap checks before bisection: undecodable bytes and (unquoted) field count."""
    if fmt.encoding == "utf8":
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"undecodable bytes (not UTF-8) at byte {exc.start} of the line"
    if not fmt.quoting:
        fields = line.rstrip(b"\r\n").count(fmt.delimiter.encode()) + 1
        if fields != len(fmt.columns):
            return f"expected {len(fmt.columns)} columns, got {fields}"
    return None


def _find_bad_lines(
    parts: list[bytes], fmt: TextFormat, first_only: bool, known: list[tuple[int, str]]
) -> list[tuple[int, str]]:
    """Indices (and reasons) of the lines the parser rejects, with the ``known`` bad ones,
    in order; with ``first_only`` just the first. Bisection with pyarrow itself, so
    O(bad * log n) parses; cheap checks first when every bad line is wanted."""
    bad = list(known)
    skip = {i for i, _ in known}
    candidates = [i for i in range(len(parts)) if i not in skip]
    if not first_only:
        quick = [(i, _quick_reason(parts[i], fmt)) for i in candidates]
        bad += [(i, r) for i, r in quick if r]
        candidates = [i for i, r in quick if not r]

    def search(lo: int, hi: int) -> bool:
        """Record bad lines among candidates[lo:hi]; True when one was found."""
        try:
            table = _read_csv(b"".join(parts[i] for i in candidates[lo:hi]), fmt)
            if table.num_rows == hi - lo:
                return False
            reason = "a stray carriage return splits the line"
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            reason = _reason(str(exc), fmt)
        if hi - lo == 1:
            bad.append((candidates[lo], _quick_reason(parts[candidates[lo]], fmt) or reason))
            return True
        mid = (lo + hi) // 2
        found = search(lo, mid)
        if found and first_only:
            return True
        return search(mid, hi) or found

    if candidates:
        search(0, len(candidates))
    bad.sort()
    return bad[:1] if first_only else bad


_COLUMN = re.compile(r"In CSV column #(\d+): (?:Row #\d+: )?")
_INVALID = re.compile(r"^(\w+): invalid value (.*)$")


def _reason(message: str, fmt: TextFormat) -> str:
    """pyarrow's message, short and with the column's name."""
    text = message.strip().splitlines()[0]
    text = text.removeprefix("CSV parse error: ")
    match = _COLUMN.search(text)
    if match:
        index = int(match.group(1))  # the column's position in the file
        name = fmt.columns[index] if index < len(fmt.columns) else f"#{index}"
        detail = text[match.end() :].removeprefix("CSV conversion error to ")
        value = _INVALID.match(detail)
        if value:
            detail = f"invalid {value.group(1)} value {value.group(2)}"
        text = f"column {name}: " + detail.replace(
            "invalid UTF8 data", "undecodable bytes (not UTF-8)"
        )
    if ": " in text and text.startswith("Expected"):
        text = text.split(": ", 1)[0]
    text = text[0].lower() + text[1:] if text else "unparseable row"
    return text[:200]


def _check_header(
    path: Path, header: bytes, fmt: TextFormat | Callable[[list[str]], TextFormat]
) -> TextFormat:
    encoding = "latin-1" if not callable(fmt) and fmt.encoding == "latin1" else "utf-8"
    try:
        text = header.decode(encoding).rstrip("\r\n")
    except UnicodeDecodeError:
        raise DataError(f"{path}:1: undecodable bytes in the header") from None
    delimiter = fmt.delimiter if not callable(fmt) else ("\t" if "\t" in text else ",")
    names = [n.strip().strip('"') for n in text.split(delimiter)]
    if callable(fmt):
        return fmt(names)
    if tuple(names) != fmt.columns:
        raise DataError(
            f"{path}:1: unexpected header {names[:8]}{'...' if len(names) > 8 else ''}; "
            f"expected {len(fmt.columns)} columns {list(fmt.columns[:8])}..."
        )
    return fmt


def _line_blocks(
    path: Path, block_bytes: int, header: bool, info: SourceInfo
) -> Iterator[bytes | _Block]:
    """The header line (``b""`` when there is none), then blocks of whole lines.

    Hashes the raw bytes into ``info`` as it reads; decompresses gzip (all members).
    """
    digest = hashlib.sha256()
    line = 1
    row = 0
    header_seen = not header
    sizes = [0]

    def emit(data: bytes | memoryview) -> Iterator[bytes | _Block]:
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
            yield _Block(line, row, piece, count)
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
    handle: BinaryIO, block_bytes: int, digest: Any, sizes: list[int]
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
        view = memoryview(buffer)
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


_END = object()


def prefetch(
    make: Callable[[], Iterator[Any]], depth: int = 2, name: str = "raw-reader"
) -> Iterator[Any]:
    """Run the iterator ``make()`` on a thread named ``name``, ``depth`` items ahead of
    the consumer. Its exceptions reach the consumer; when the consumer stops early, the
    iterator is closed on its thread (its own clean-up runs) before this returns."""
    items: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        iterator: Iterator[Any] | None = None
        try:
            iterator = make()
            for item in iterator:
                if not put(item):
                    return
            put(_END)
        except BaseException as exc:  # handed to the consumer
            put(_Raised(exc))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = items.get()
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join()


@dataclass
class _Raised:
    exc: BaseException
