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

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from suite.data.prefetch import prefetch
from suite.data.text_blocks import BOM, Block, SourceInfo, line_blocks
from suite.errors import DataError

BLOCK_BYTES = 32 << 20
"""Target size of one parsed block of text (whole lines)."""
MAX_EXAMPLES = 20
"""Bad rows described in the manifest (all are counted)."""

OnBadRows = Literal["error", "skip"]


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
        blocks = prefetch(lambda: line_blocks(path, self.block_bytes, has_header, info))
        try:  # a bad block's error must not keep the reader thread alive in its traceback
            header = next(blocks)
            if has_header:
                assert isinstance(header, bytes)
                fmt = _check_header(path, header, fmt)
            assert isinstance(fmt, TextFormat)
            seen = False
            for block in blocks:
                assert isinstance(block, Block)
                seen = True
                yield self._parse(str(path), block, fmt)
            if not seen:
                raise DataError(f"{path}: empty file (no data rows)")
        finally:
            blocks.close()

    def _parse(self, origin: str, block: Block, fmt: TextFormat) -> Parsed:
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


def _read_csv(data: bytes | memoryview, fmt: TextFormat) -> pa.Table:
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


__all__ = [
    "BLOCK_BYTES",
    "BOM",
    "BadRows",
    "OnBadRows",
    "Parsed",
    "RawReader",
    "SourceInfo",
    "TextFormat",
    "find_file",
    "prefetch",
]
