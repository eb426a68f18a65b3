"""Categorical keys and vocabularies (``suite.data.vocab``) against plain-Python references."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from suite.data import vocab
from suite.data.vocab import FIRST_ID, RARE, Vocabulary, encode_column, string_keys


def reference_key(value: bytes) -> int | None:
    """The packed key of a short ASCII value without NUL (else None: the hashed space)."""
    if len(value) > 8 or any(b >= 0x80 or b == 0 for b in value):
        return None
    return int.from_bytes(value.ljust(8, b"\0"), "big")


VALUES = [b"", b"a", b"ab", b"0000000a", b"ffffffff", b"123456789", b"a" * 40, b"\xc3\xa9",
          b"a\x00", b"\x7f", b"abcdefg\x00", b"zzzzzzzz", b"caf\xc3\xa9"]  # fmt: skip


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_string_keys_match_the_packing_rule(offset: int) -> None:
    values = pa.array(VALUES * 3, type=pa.binary()).slice(offset)
    keys = string_keys(values)
    raw = values.to_pylist()
    for value, key in zip(raw, keys.tolist(), strict=True):
        expected = reference_key(value)
        if expected is None:
            assert key >= 2**63, value
        else:
            assert key == expected, value
    # a hashed key depends on the bytes alone, not on where they sit
    by_value: dict[bytes, set[int]] = {}
    for value, key in zip(raw, keys.tolist(), strict=True):
        by_value.setdefault(value, set()).add(key)
    assert all(len(k) == 1 for k in by_value.values())
    assert len({next(iter(k)) for k in by_value.values()}) == len(by_value)


def test_string_keys_of_strings_equal_those_of_their_bytes() -> None:
    text = ["d9c2825f", "", "é", "x" * 9]
    assert (
        string_keys(pa.array(text)).tolist()
        == string_keys(pa.array([t.encode() for t in text], type=pa.binary())).tolist()
    )


def test_encode_column_round_trips_with_nulls_and_slices() -> None:
    column = pa.chunked_array(
        [pa.array(["b", None, "a"]), pa.array(["a", "c" * 12, None, "b"]).slice(1)]
    )
    local, keys = encode_column(column, None)
    decoded = [None if i < 0 else int(keys[i]) for i in local]
    expected = [
        None if v is None else int(string_keys(pa.array([v]))[0]) for v in column.to_pylist()
    ]
    assert decoded == expected


HEX = ["d9c2825f", "0000000a", "ffffffff", "68fd1e64"]


@pytest.mark.parametrize(
    "odd",
    [None, "abc", "é" * 4, "abcdefg\x00", "123456789"],
    ids=["hex-only", "short", "non-ascii", "nul", "long"],
)
@pytest.mark.parametrize("offset", [0, 1, 5])
def test_packed_keys_are_string_keys_or_nothing(odd: str | None, offset: int) -> None:
    """Columns of 8-byte ASCII values (nulls and empties allowed) take the packed path
    with the keys and local ids of the string path; any other value sends the whole
    column back to the string path."""
    rows = [HEX[i % 4] if i % 5 else (None if i % 2 else "") for i in range(40)]
    if odd is not None:
        rows[17] = odd
    column = pa.chunked_array([pa.array(rows[:23]).slice(offset), pa.array(rows[23:])])
    packed = vocab.packed_keys(column)
    assert (packed is None) == (odd is not None)
    local, keys = encode_column(column, None)
    decoded = [None if i < 0 else int(keys[i]) for i in local]
    expected = [
        None if v is None else int(string_keys(pa.array([v]))[0]) for v in column.to_pylist()
    ]
    assert decoded == expected
    if packed is not None:
        generic_local, generic_keys = encode_column(column.cast(pa.large_string()), None)
        assert local.tolist() == generic_local.tolist()
        assert keys.tolist() == generic_keys.tolist()


@pytest.mark.parametrize("hashed_from", [1, 10**9], ids=["hashed-lookup", "sorted-lookup"])
def test_vocabulary_lookup(monkeypatch: pytest.MonkeyPatch, hashed_from: int) -> None:
    monkeypatch.setattr(vocab, "HASHED_LOOKUP_KEYS", hashed_from)
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64))
    counts = rng.integers(1, 6, len(keys))
    built = Vocabulary.build(keys, counts, rng.permutation(len(keys)), min_count=3)
    assert (built.buckets is not None) == (hashed_from == 1)
    assert built.distinct == len(keys) and built.frequent == (counts >= 3).sum()
    ids = dict(zip(built.keys.tolist(), built.ids.tolist(), strict=True))
    assert sorted(ids.values()) == list(range(FIRST_ID, FIRST_ID + built.frequent))
    unknown = rng.integers(0, 2**64 - 1, 1000, dtype=np.uint64)
    queries = np.concatenate([keys, unknown, keys[::-7]])
    rng.shuffle(queries)
    got = built.lookup(queries).tolist()
    assert got == [ids.get(int(q), RARE) for q in queries]
