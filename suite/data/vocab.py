"""Categorical vocabularies in numpy: 64-bit keys, sorted key/count arrays, contiguous ids.

Each raw categorical value becomes a uint64 *key*: strings of at most 8 ASCII bytes (every
Criteo and Avazu hash, every integer written as text) are packed exactly, big-endian, so
the key order is the byte order; longer or non-ASCII strings get a 64-bit FNV-1a hash with
the top bit set (the two key spaces never meet); integer columns use the integer itself.
A feature's vocabulary is then a sorted ``uint64`` array plus an ``int64`` count array
(16 bytes per distinct value, no Python objects), merged chunk by chunk.

Ids of one feature (the prepared arrays' contract):

- ``0`` (``MISSING``): the field was empty;
- ``1`` (``RARE``): seen fewer than ``min_count`` times in the counted rows, or never
  (values that occur only in validation/test rows);
- ``2 ..``: the frequent values in order of first appearance in the counted rows (the
  rows' order as the prepare reads them), so the table has ``2 + frequent`` rows.

First appearance, as the DLRM reference (``data_utils.py``) numbers ids, rather than
frequency: numbered by falling count, every hot value would get a low id, which favours the
hashing trick (``id % m`` gives each hot id its own row) over QR (``id // c`` puts the
``c`` hottest ids in one row) by construction. The counter keeps each key's first row (the
minimum global row index, merged by ``min``), so the order is exact whatever the chunking.

With a table-size cap, keys are first hashed into ``cap - 2`` buckets (the hashing trick,
as the DLRM reference's ``max-ind-range``); buckets then get ids like values do (in order
of their first appearance), so the table never exceeds ``cap`` rows and counting memory is
bounded by the cap too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MISSING = 0
RARE = 1
FIRST_ID = 2
HASHED_LOOKUP_KEYS = 1 << 18
"""From this many keys (2 MB), a vocabulary is laid out in hash buckets for its lookups."""

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_HASHED = np.uint64(1 << 63)


_NUMPY_TYPES = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
    pa.float32(): np.float32,
    pa.float64(): np.float64,
}


def to_numpy(values: pa.Array | pa.ChunkedArray, fill: float | None = None) -> np.ndarray:
    """A numeric pyarrow column as one numpy array, nulls replaced by ``fill``.

    Read straight from the Arrow buffers: pyarrow's own conversions (and ``pa.scalar``)
    import pandas, a second of start-up that a bare parse does not pay.
    """
    if isinstance(values, pa.ChunkedArray):
        parts = [to_numpy(c, fill) for c in values.chunks]
        if not parts:
            return np.zeros(0, dtype=_NUMPY_TYPES.get(values.type, np.float64))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    dtype = _NUMPY_TYPES.get(values.type)
    if dtype is None:
        if values.null_count and fill is not None:
            values = pc.fill_null(values, fill)
        return values.to_numpy(zero_copy_only=False)
    n, offset = len(values), values.offset
    validity, data = values.buffers()[:2]
    array = np.frombuffer(data, dtype=dtype, count=n, offset=offset * np.dtype(dtype).itemsize)
    if values.null_count:
        if fill is None:
            raise ValueError("column has nulls and no fill value")
        bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        array = np.where(
            bits[offset : offset + n].astype(bool), array, np.asarray(fill, dtype=dtype)
        )
    return array


def splitmix64(x: np.ndarray) -> np.ndarray:
    """A strong 64-bit mixer (uint64 in, uint64 out; arithmetic wraps)."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


_BYTE_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)
_ONES = np.uint64(0x0101_0101_0101_0101)
_HIGH_BITS = np.uint64(0x8080_8080_8080_8080)


def string_keys(values: pa.Array) -> np.ndarray:
    """uint64 keys of a string/binary array (see the module docstring); a null slot's key
    is that of its (normally empty) bytes, for the caller to mask.

    Each value is read as the 8 bytes from its start (an unaligned ``uint64`` view of the
    data buffer): masked to its length and byte-swapped, that word is the packed key.
    """
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    if pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type):
        values = values.cast(pa.string() if pa.types.is_large_string(values.type) else pa.binary())
    _, offsets_buf, data_buf = values.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1, offset=values.offset * 4)
    size = data_buf.size if data_buf is not None else 0
    data = np.zeros(size + 8, dtype=np.uint8)  # 8 spare bytes: every start has a whole word
    if size:
        data[:size] = np.frombuffer(data_buf, dtype=np.uint8)
    words = np.ndarray(shape=(size + 1,), dtype="<u8", buffer=data, strides=(1,))
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    short = np.minimum(lengths, 8)
    word = words[starts] & _BYTE_MASKS[short]
    filled = word | (~_BYTE_MASKS[short] & _ONES)  # bytes past the value read as 0x01
    hashed = (lengths > 8) | _not_plain(filled)
    keys = word.byteswap()
    if hashed.any():
        keys[hashed] = _fnv1a(data, starts[hashed].astype(np.int64), lengths[hashed]) | _HASHED
    return keys


def _not_plain(words: np.ndarray) -> np.ndarray:
    """bool ``[n]``: the little-endian ``uint64`` word holds a byte >= 0x80 or a NUL
    (subtracting 1 from every byte sets a high bit only where a byte was 0)."""
    with np.errstate(over="ignore"):
        flags = words - _ONES
    flags |= words
    flags &= _HIGH_BITS
    return flags != 0


def _fnv1a(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    h = np.full(len(starts), _FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(int(lengths.max(initial=0))):
            active = j < lengths
            byte = data[starts[active] + j].astype(np.uint64)
            h[active] = (h[active] ^ byte) * _FNV_PRIME
    return splitmix64(h ^ lengths.astype(np.uint64))


def value_keys(values: pa.Array) -> np.ndarray:
    """uint64 keys of any supported array without nulls: strings/binary or integers."""
    if pa.types.is_integer(values.type):
        return to_numpy(values).astype(np.int64).view(np.uint64)
    if pa.types.is_boolean(values.type):
        return values.to_numpy(zero_copy_only=False).astype(np.uint64)
    if pa.types.is_floating(values.type):
        return string_keys(pc.cast(values, pa.string()))
    return string_keys(values)


def encode_column(
    column: pa.Array | pa.ChunkedArray | np.ndarray, cap: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Chunk-local encoding of one categorical column.

    Returns:
        ``local`` int32 ``[n]``: index into ``keys`` (``-1``: missing), and ``keys``
        uint64 ``[k]``: the key of each distinct value of the chunk (bucket keys, possibly
        repeated, when ``cap`` is set).
    """
    if isinstance(column, np.ndarray):
        column = pa.array(column)
    packed = packed_keys(column)
    encoded = pc.dictionary_encode(column if packed is None else packed)
    if isinstance(encoded, pa.ChunkedArray):
        if encoded.num_chunks == 0:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.uint64)
        dictionary = encoded.chunk(encoded.num_chunks - 1).dictionary
        indices = pa.chunked_array(
            [c.indices for c in encoded.chunks], type=pa.int32()
        ).combine_chunks()
    else:
        dictionary, indices = encoded.dictionary, encoded.indices
    local = to_numpy(indices, fill=-1).astype(np.int32, copy=False)
    keys = value_keys(dictionary)
    if cap is not None:
        keys = bucket_keys(keys, cap)
    return local, keys


def packed_keys(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray | None:
    """The uint64 keys of a string column whose every value is 8 ASCII bytes or empty
    (Criteo's hashed values), nulls kept; ``None`` for any other column.

    Read straight from the data buffer as big-endian words, these are exactly the keys
    :func:`string_keys` gives, and a dictionary of integers is built about twice as fast as
    one of strings.
    """
    if column.type not in (pa.string(), pa.binary()):
        return None
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()  # a parser's many small chunks: one pass instead
    n, offset = len(column), column.offset
    validity, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1, offset=offset * 4)
    full = offsets[1:] - offsets[:-1] == 8
    count = int(np.count_nonzero(full))
    first, last = int(offsets[0]), int(offsets[-1])
    if last - first != 8 * count:  # some value is neither empty nor 8 bytes long
        return None
    words = (
        np.frombuffer(data_buf, dtype=">u8", count=count, offset=first)
        if count
        else np.zeros(0, dtype=">u8")
    )
    if _not_plain(words.view("<u8")).any():
        return None
    keys = np.zeros(offset + n, dtype=np.uint64)  # the validity bits count from offset
    keys[offset:][full] = words
    return pa.Array.from_buffers(
        pa.uint64(), n, [validity, pa.py_buffer(keys)], null_count=column.null_count, offset=offset
    )


def bucket_keys(keys: np.ndarray, cap: int) -> np.ndarray:
    """Hash keys into ``cap - 2`` buckets (ids 0 and 1 are reserved)."""
    return splitmix64(keys) % np.uint64(cap - FIRST_ID)


NEVER = np.iinfo(np.int64).max
"""The first row of a key never counted."""


def first_rows(shifted: np.ndarray, num_keys: int, mask: np.ndarray | None = None) -> np.ndarray:
    """int64 ``[num_keys]``: the row of a chunk where each of its keys is first counted
    (:data:`NEVER` for a key no counted row holds).

    ``shifted [n]``: local indices plus one (0 missing), as ``encode_column``'s
    ``local + 1``; ``mask`` bool ``[n]``: the counted rows (None: all). Unmasked, a chunk's
    local indices come in order of first appearance (a dictionary encoding numbers values
    as it meets them), so the running maximum steps by one exactly where each index first
    occurs: one cheap pass. Anything else (a mask, another numbering) takes a scatter-min.
    """
    first = np.full(num_keys, NEVER, dtype=np.int64)
    if len(shifted) == 0:
        return first
    if mask is None:
        running = np.maximum.accumulate(shifted)
        steps = np.flatnonzero(running[1:] != running[:-1]) + 1
        if running[0]:
            steps = np.concatenate(([0], steps))
        top = int(running[-1])
        if top == len(steps) and top <= num_keys:  # every step is +1: index v first at step v
            first[:top] = steps
            return first
        rows = np.arange(len(shifted), dtype=np.int64)
    else:
        rows = np.flatnonzero(mask)
        shifted = shifted[rows]
    first = np.full(num_keys + 1, NEVER, dtype=np.int64)
    np.minimum.at(first, shifted.astype(np.intp, copy=False), rows)
    return first[1:]


class VocabCounter:
    """Distinct keys of one feature with their counts and first rows, as sorted numpy
    arrays.

    ``add`` buffers chunks and merges them in batches, so a merge costs one sort of the
    batch plus a linear pass over the vocabulary. Counts add up; first rows take the
    minimum, so the result does not depend on how the rows were cut into chunks.
    """

    def __init__(self) -> None:
        self.keys = np.zeros(0, dtype=np.uint64)
        self.counts = np.zeros(0, dtype=np.int64)
        self.first = np.zeros(0, dtype=np.int64)
        self._keys: list[np.ndarray] = []
        self._counts: list[np.ndarray] = []
        self._first: list[np.ndarray] = []
        self._pending = 0
        self._added = 0

    def add(self, keys: np.ndarray, counts: np.ndarray, first: np.ndarray | None = None) -> None:
        """Add ``counts[i]`` occurrences of ``keys[i]`` (keys may repeat), first seen at
        global row ``first[i]`` (int64 ``[k]``; None: each entry's position among all the
        entries added so far, for a caller that adds in row order)."""
        if len(keys) == 0:
            return
        if first is None:
            first = self._added + np.arange(len(keys), dtype=np.int64)
        self._added += len(keys)
        self._keys.append(np.asarray(keys, dtype=np.uint64))
        self._counts.append(np.asarray(counts, dtype=np.int64))
        self._first.append(np.asarray(first, dtype=np.int64))
        self._pending += len(keys)
        if self._pending >= max(1 << 18, len(self.keys) // 8):
            self._merge()

    def _merge(self) -> None:
        if not self._keys:
            return
        keys, counts, first = reduce_counts(
            np.concatenate(self._keys), np.concatenate(self._counts), np.concatenate(self._first)
        )
        self._keys, self._counts, self._first, self._pending = [], [], [], 0
        pos = np.searchsorted(self.keys, keys)
        hit = pos < len(self.keys)
        hit[hit] = self.keys[pos[hit]] == keys[hit]
        at = pos[hit]
        self.counts[at] += counts[hit]
        self.first[at] = np.minimum(self.first[at], first[hit])
        new = ~hit
        if new.any():
            self.keys = np.insert(self.keys, pos[new], keys[new])
            self.counts = np.insert(self.counts, pos[new], counts[new])
            self.first = np.insert(self.first, pos[new], first[new])

    def finish(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sorted distinct keys ``[k]``, their counts ``[k]`` and first rows ``[k]``."""
        self._merge()
        return self.keys, self.counts, self.first


def reduce_counts(
    keys: np.ndarray, counts: np.ndarray, first: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sum counts and take the minimum first row of equal keys; returns sorted distinct
    keys with their counts and first rows."""
    # sums and minima do not depend on the order of equal keys: ~3x a stable sort
    order = np.argsort(keys)
    keys, counts, first = keys[order], counts[order], first[order]
    if len(keys) == 0:
        return keys, counts, first
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    return keys[starts], np.add.reduceat(counts, starts), np.minimum.reduceat(first, starts)


@dataclass(frozen=True)
class Vocabulary:
    """Key -> id map of one feature: ``keys`` and their ``ids`` (int32).

    A small vocabulary keeps its keys sorted and looks them up by binary search. One of
    ``HASHED_LOOKUP_KEYS`` keys or more is a bucketed hash table instead: ``keys`` (and
    ``ids`` with them) are grouped by the top bits of ``splitmix64(key)``, bucket ``b``
    holding ``keys[buckets[b] : buckets[b + 1]]`` (about one key a bucket), so a lookup
    touches a bucket or two rather than walking ~24 levels of a search through memory.
    """

    keys: np.ndarray
    ids: np.ndarray
    size: int
    distinct: int
    frequent: int
    buckets: np.ndarray | None = None
    """int64 ``[2**bits + 1]``: where each hash bucket starts in ``keys`` (None: sorted)."""

    @classmethod
    def build(
        cls, keys: np.ndarray, counts: np.ndarray, first: np.ndarray, min_count: int
    ) -> Vocabulary:
        """Frequent keys (count >= ``min_count``) get ids ``2..`` in order of their first
        row (ties, which counted rows never make, by key); rare keys map to ``RARE``.
        ``keys``: sorted distinct uint64 ``[k]``; ``counts``, ``first``: int64 ``[k]``."""
        frequent = np.flatnonzero(counts >= min_count)
        order = np.lexsort((keys[frequent], first[frequent]))
        ids = np.full(len(keys), RARE, dtype=np.int32)
        ids[frequent[order]] = FIRST_ID + np.arange(len(frequent), dtype=np.int32)
        # keep only keys that have their own id: every other key looks up to RARE anyway
        keep = ids != RARE
        distinct, keys, ids = len(keys), keys[keep], ids[keep]
        buckets = None
        if len(keys) >= HASHED_LOOKUP_KEYS:
            bits = _bucket_bits(len(keys))
            bucket = _bucket_of(keys, bits)
            by_bucket = np.argsort(bucket)
            keys, ids = keys[by_bucket], ids[by_bucket]
            buckets = np.zeros((1 << bits) + 1, dtype=np.int64)
            np.cumsum(np.bincount(bucket, minlength=1 << bits), out=buckets[1:])
        return cls(keys, ids, FIRST_ID + len(frequent), distinct, len(frequent), buckets)

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """int32 ids of ``keys`` (uint64 ``[n]``); unknown keys get ``RARE``."""
        if len(self.keys) == 0 or len(keys) == 0:
            return np.full(len(keys), RARE, dtype=np.int32)
        if self.buckets is None:
            pos = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
            return np.where(self.keys[pos] == keys, self.ids[pos], RARE).astype(np.int32)
        out = np.full(len(keys), RARE, dtype=np.int32)
        bucket = _bucket_of(keys, len(self.buckets).bit_length() - 1)
        start, stop = self.buckets[bucket], self.buckets[bucket + 1]
        todo = np.flatnonzero(start < stop)
        pos, stop = start[todo], stop[todo]
        while len(todo):  # the i-th key of every bucket not yet resolved, i = 0, 1, ..
            hit = self.keys[pos] == keys[todo]
            out[todo[hit]] = self.ids[pos[hit]]
            pos += 1
            more = ~hit & (pos < stop)
            todo, pos, stop = todo[more], pos[more], stop[more]
        return out


def _bucket_bits(count: int) -> int:
    """Bits of a hash table's bucket index for ``count`` keys: at most one key a bucket
    on average."""
    return max(1, (count - 1).bit_length())


def _bucket_of(keys: np.ndarray, bits: int) -> np.ndarray:
    """intp ``[n]``: the hash bucket (top ``bits`` bits of ``splitmix64``) of each key."""
    return (splitmix64(keys) >> np.uint64(64 - bits)).astype(np.intp)
