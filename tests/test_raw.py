"""The raw reader's line blocks: every byte once, in order, cut after line breaks."""

from __future__ import annotations

import gzip
import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from suite.data.text_blocks import (
    BOM,
    Block,
    SourceInfo,
    _count_newlines,
    _file_pieces,
    line_blocks,
)


def _text(rng: random.Random, lines: int) -> bytes:
    rows = [b"x" * rng.choice([0, 1, 5, 40, 300]) + b"\t1" for _ in range(lines)]
    return b"\n".join(rows) + b"\n"


@pytest.mark.parametrize("block_bytes", [1, 7, 64, 4096])
@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("header", [False, True])
@pytest.mark.parametrize("ending", ["newline", "none", "bom"])
def test_blocks_hold_every_line_once_in_order(
    tmp_path: Path, block_bytes: int, compressed: bool, header: bool, ending: str
) -> None:
    rng = random.Random(block_bytes)
    body = _text(rng, 200)
    head = b"a\tb\n" if header else b""
    text = head + body
    if ending == "none":
        text = text[:-1]  # the last line has no line break
    raw = (BOM if ending == "bom" else b"") + text
    # compressed: two gzip members, split inside a line
    data = gzip.compress(raw[:1001]) + gzip.compress(raw[1001:]) if compressed else raw
    path = tmp_path / "file.txt"
    path.write_bytes(data)

    info = SourceInfo(path.name)
    items = list(line_blocks(path, block_bytes, header, info))
    assert items[0] == head
    blocks = items[1:]
    assert all(isinstance(b, Block) and bytes(b.data).endswith(b"\n") for b in blocks)
    assert b"".join(bytes(b.data) for b in blocks) == body
    row = 0
    for block in blocks:  # positions follow on from block to block
        assert block.first_row == row
        assert block.first_line == row + 1 + (1 if header else 0)
        assert block.lines == bytes(block.data).count(b"\n")
        row += block.lines
    assert info.rows == row == 200
    assert info.bytes == len(data)
    assert info.sha256 == hashlib.sha256(data).hexdigest()


def test_a_line_longer_than_a_block_is_kept_whole(tmp_path: Path) -> None:
    text = b"short\n" + b"y" * 10_000 + b"\nend\n"
    path = tmp_path / "long.txt"
    path.write_bytes(text)
    blocks = list(line_blocks(path, 16, False, SourceInfo(path.name)))[1:]
    assert [bytes(b.data) for b in blocks] == [b"short\n", b"y" * 10_000 + b"\n", b"end\n"]


@pytest.mark.parametrize("window", [1, 3, 8, 1 << 18])
def test_newlines_are_counted_across_windows(window: int) -> None:
    rng = random.Random(window)
    for size in [0, 1, 7, 8, 9, 1000]:
        text = bytes(rng.choice(b"ab\n") for _ in range(size))
        assert _count_newlines(text, window) == text.count(b"\n")
        assert _count_newlines(memoryview(text), window) == text.count(b"\n")


def _buffer_of(piece: bytes | memoryview) -> object:
    """The array a piece was read into (the pool hands out views of its buffers)."""
    assert isinstance(piece, memoryview)
    owner = piece.obj
    return owner.base if isinstance(owner, np.ndarray) and owner.base is not None else owner


def test_a_block_buffer_is_used_again_only_once_its_pieces_are_gone(tmp_path: Path) -> None:
    text = _text(random.Random(3), 500)
    path = tmp_path / "file.txt"
    path.write_bytes(text)

    def pieces() -> Iterator[bytes | memoryview]:
        with path.open("rb") as handle:
            yield from _file_pieces(handle, 4096, hashlib.sha256(), [0])

    held = list(pieces())  # every piece kept: each in a buffer of its own, none overwritten
    assert len(held) > 10
    assert b"".join(bytes(p) for p in held) == text
    assert len({id(_buffer_of(p)) for p in held}) == len(held)

    buffers, read = [], []  # the buffers are kept alive here, the pieces are not
    for piece in pieces():
        buffers.append(_buffer_of(piece))
        read.append(bytes(piece))
        del piece
    assert b"".join(read) == text
    assert len({id(b) for b in buffers}) <= 2
