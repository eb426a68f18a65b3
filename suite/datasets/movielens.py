"""MovieLens ratings framed as CTR: a rating >= ``positive_threshold`` is a click.

``--raw`` is the directory of one GroupLens release, picked by ``variant``:

- ``100k``: ``u.data`` (tab: user, item, rating, unix time), ``u.user`` (``|``: id, age,
  gender, occupation, zip), ``u.item`` (``|``, latin-1: id, title, dates, url, 19 genre
  flags);
- ``1m``: ``ratings.dat``, ``users.dat`` (id, gender, age group, occupation code, zip),
  ``movies.dat`` (id, title, ``|``-joined genres), ``::``-separated, latin-1;
- ``20m``, ``25m``, ``latest``, ``latest-small``: ``ratings.csv`` (header
  ``userId,movieId,rating,timestamp``) and ``movies.csv`` (header, quoted titles).

Prepared: no dense features; sparse ``user_id``, ``item_id``, and the side features the
variant has: ``age``, ``gender``, ``occupation`` (100k and 1m only) and ``genre``. The 100k
ages are grouped into the 1m age groups (1: under 18, 18, 25, 35, 45, 50, 56+), so the two
variants share a vocabulary shape. A movie has several genres but a row holds one id per
feature: with ``genre="first"`` (default) the genre is the first one listed (100k: the first
flag set in ``u.genre`` order, ``unknown`` excluded); with ``genre="combination"`` it is the
sorted set of the movie's genres joined by ``|`` (one id per distinct combination). A movie
with no genre (or ``(no genres listed)``), or missing from the movie file, gets the
missing id 0. Ids otherwise as every raw dataset (``suite.data.vocab``).

Checked: a rating off the release's documented scale (100k, 1m: whole stars 1..5; the csv
releases: half stars 0.5..5) is a bad row (``on_bad_rows``: an error naming file and line,
or skipped and counted). An id on two rows of a side file that differ in a field the suite
reads is refused, naming the file, the id and both lines: which row is right cannot be
told, and the first one winning silently would change the features; exact repeats are
accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from suite.data.chunks import CategoricalOptions, Chunk, chunk_from_arrays, numpy_column
from suite.data.raw import Parsed, RawReader, TextFormat
from suite.data.raw_dataset import RawDataset
from suite.data.splits import RandomSplit, SplitRule, TimeRankSplit
from suite.data.synthetic_dataset import SyntheticDataset
from suite.data.teacher import SyntheticProfile
from suite.errors import DataError
from suite.registry import DATASETS

MOVIELENS_FIELDS = ["user_id", "item_id", "age", "gender", "occupation", "genre"]
MOVIELENS_CARDINALITIES = [6040, 3706, 7, 2, 21, 18]  # the shape of ml-1m
GENRES_100K = [
    "unknown",
    "Action",
    "Adventure",
    "Animation",
    "Children's",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Film-Noir",
    "Horror",
    "Musical",
    "Mystery",
    "Romance",
    "Sci-Fi",
    "Thriller",
    "War",
    "Western",
]
# u.item's genre flag columns, named for messages
_FIELDS = {f"g{i}": f"genre flag {name!r}" for i, name in enumerate(GENRES_100K)}
AGE_GROUPS = np.array([1, 18, 25, 35, 45, 50, 56])
NO_GENRE = "(no genres listed)"

# 100k and 1m: whole stars 1..5; 20m, 25m and the latest releases: half stars 0.5..5 (their
# READMEs: "Ratings are made on a 5-star scale, with half-star increments")
WHOLE_STARS = (1.0, 5.0, 1.0)
_RATING_TYPES = {"user": pa.int64(), "item": pa.int64(), "rating": pa.float64(), "time": pa.int64()}


@dataclass(frozen=True)
class Variant:
    """Files and formats of one MovieLens release."""

    ratings: str
    ratings_format: TextFormat
    items: str
    items_format: TextFormat
    users: str | None = None
    users_format: TextFormat | None = None
    scale: tuple[float, float, float] = (0.5, 5.0, 0.5)
    """The release's documented ratings: lowest, highest, step (5 stars in half stars)."""


_DAT = {"delimiter": "\t", "separator": b"::", "encoding": "latin1"}
_CSV_RATINGS = Variant(
    ratings="ratings.csv",
    ratings_format=TextFormat(
        columns=("user", "item", "rating", "time"),
        types=_RATING_TYPES,
        header=True,
    ),
    items="movies.csv",
    items_format=TextFormat(
        columns=("item", "title", "genres"),
        types={"item": pa.int64(), "genres": pa.string()},
        header=True,
        quoting=True,
        include=("item", "genres"),
    ),
)
VARIANTS: dict[str, Variant] = {
    "100k": Variant(
        scale=WHOLE_STARS,
        ratings="u.data",
        ratings_format=TextFormat(
            columns=("user", "item", "rating", "time"), types=_RATING_TYPES, delimiter="\t"
        ),
        items="u.item",
        items_format=TextFormat(
            columns=("item", "title", "release", "video", "url", *(f"g{i}" for i in range(19))),
            types={"item": pa.int64(), **{f"g{i}": pa.int64() for i in range(19)}},
            delimiter="|",
            encoding="latin1",
            include=("item", *(f"g{i}" for i in range(19))),
        ),
        users="u.user",
        users_format=TextFormat(
            columns=("user", "age", "gender", "occupation", "zip"),
            types={
                "user": pa.int64(),
                "age": pa.int64(),
                "gender": pa.string(),
                "occupation": pa.string(),
            },
            delimiter="|",
            include=("user", "age", "gender", "occupation"),
        ),
    ),
    "1m": Variant(
        scale=WHOLE_STARS,
        ratings="ratings.dat",
        ratings_format=TextFormat(
            columns=("user", "item", "rating", "time"), types=_RATING_TYPES, **_DAT
        ),
        items="movies.dat",
        items_format=TextFormat(
            columns=("item", "title", "genres"),
            types={"item": pa.int64(), "genres": pa.string()},
            include=("item", "genres"),
            **_DAT,
        ),
        users="users.dat",
        users_format=TextFormat(
            columns=("user", "gender", "age", "occupation", "zip"),
            types={
                "user": pa.int64(),
                "age": pa.int64(),
                "gender": pa.string(),
                "occupation": pa.string(),
            },
            include=("user", "gender", "age", "occupation"),
            **_DAT,
        ),
    ),
    "20m": _CSV_RATINGS,
    "25m": _CSV_RATINGS,
    "latest": _CSV_RATINGS,
    "latest-small": _CSV_RATINGS,
}
# ratings.csv's header names, mapped onto ours
_CSV_HEADER = {"userId": "user", "movieId": "item", "rating": "rating", "timestamp": "time"}
_MOVIES_HEADER = {"movieId": "item", "title": "title", "genres": "genres"}


class MovieLensOptions(CategoricalOptions):
    """MovieLens: release, click threshold, genre encoding, thresholds and split seed."""

    variant: Literal["100k", "1m", "20m", "25m", "latest", "latest-small"] = "100k"
    positive_threshold: float = Field(4, description="a rating >= this is a click (label 1)")
    genre: Literal["first", "combination"] = Field(
        "first", description="one genre per row: the first listed, or the sorted combination"
    )
    split_seed: int = Field(0, description="seed of the random-811 split")


@dataclass
class _Side:
    """A side table: sorted ids and one pyarrow column per feature, aligned with them."""

    ids: np.ndarray
    columns: list[pa.Array]

    def unknown(self, keys: np.ndarray) -> int:
        """How many of ``keys`` are not in the table."""
        if len(self.ids) == 0:
            return len(keys)
        pos = np.minimum(np.searchsorted(self.ids, keys), len(self.ids) - 1)
        return int((self.ids[pos] != keys).sum())

    def join(self, keys: np.ndarray) -> list[pa.Array]:
        """Each column's value for ``keys`` (null where the id is unknown)."""
        if len(self.ids) == 0:
            return [pa.nulls(len(keys), type=c.type) for c in self.columns]
        pos = np.minimum(np.searchsorted(self.ids, keys), len(self.ids) - 1)
        hit = self.ids[pos] == keys
        index = pa.array(pos, mask=~hit)
        return [c.take(index) for c in self.columns]


@dataclass
class _RawSide:
    """A side file as read: its table and each row's file line."""

    path: Path
    table: pa.Table
    lines: np.ndarray


def _read_table(
    reader: RawReader, path: Path, fmt: TextFormat, header: dict[str, str] | None = None
) -> _RawSide:
    if header is not None:

        def fmt_for(names: list[str]) -> TextFormat:
            if names != list(header):
                raise DataError(f"{path}:1: unexpected header {names}; expected {list(header)}")
            return replace(fmt, header=False)

        parts = list(reader.read(path, fmt_for))
    else:
        parts = list(reader.read(path, fmt))
    table = pa.concat_tables([p.table for p in parts]) if parts else pa.table({})
    lines = [p.first_line + _local_lines(p) for p in parts]
    return _RawSide(path, table, np.concatenate(lines) if lines else np.zeros(0, np.int64))


def _local_lines(parsed: Parsed) -> np.ndarray:
    if parsed.lines is None:
        return np.arange(parsed.num_rows, dtype=np.int64)
    return np.asarray(parsed.lines, dtype=np.int64)


def _sorted_side(raw: _RawSide, id_column: str, columns: list[pa.Array]) -> _Side:
    """The side table sorted by id; an id on two rows that differ is refused (a row that
    repeats another exactly is harmless)."""
    ids = numpy_column(raw.table.column(id_column).fill_null(-1))
    order = np.argsort(ids, kind="stable")
    _check_duplicates(raw, id_column, ids[order], order)
    return _Side(ids[order], [c.take(pa.array(order)) for c in columns])


def _check_duplicates(raw: _RawSide, id_column: str, ids: np.ndarray, order: np.ndarray) -> None:
    """Raise a ``DataError`` naming the file, the id and both lines of the first id whose
    rows differ in a field the suite reads (``ids``: sorted, ``order``: their rows)."""
    for k in np.flatnonzero((ids[1:] == ids[:-1]) & (ids[1:] >= 0)) + 1:
        head = int(np.searchsorted(ids, ids[k]))  # the id's first row in the file
        a, b = (raw.table.slice(int(order[i]), 1).to_pylist()[0] for i in (head, k))
        if a != b:
            differ = ", ".join(_FIELDS.get(name, name) for name in a if a[name] != b[name])
            first, second = int(raw.lines[order[head]]), int(raw.lines[order[k]])
            raise DataError(
                f"{raw.path}: {id_column} {ids[k]} is on line {first} and on line {second} "
                f"with different {differ}; expected one row per {id_column} (identical "
                "repeats are accepted)"
            )


def _genres(names_per_item: list[list[str]], mode: str) -> pa.Array:
    out: list[str | None] = []
    for names in names_per_item:
        names = [n for n in names if n and n != NO_GENRE]
        if not names:
            out.append(None)
        elif mode == "first":
            out.append(names[0])
        else:
            out.append("|".join(sorted(set(names))))
    return pa.array(out, type=pa.string())


def _items(
    reader: RawReader, directory: Path, variant: Variant, options: MovieLensOptions
) -> _Side:
    path = directory / variant.items
    if variant.items == "u.item":
        raw = _read_table(reader, path, variant.items_format)
        table = raw.table
        flags = np.stack(
            [numpy_column(table.column(f"g{i}").fill_null(0)) for i in range(19)], axis=1
        )
        names = [[GENRES_100K[g] for g in np.flatnonzero(row) if g > 0] for row in flags]
    else:
        header = _MOVIES_HEADER if variant.items == "movies.csv" else None
        raw = _read_table(reader, path, variant.items_format, header)
        names = [(g or "").split("|") for g in raw.table.column("genres").to_pylist()]
    return _sorted_side(raw, "item", [_genres(names, options.genre)])


def _users(reader: RawReader, directory: Path, variant: Variant) -> _Side:
    assert variant.users is not None and variant.users_format is not None
    raw = _read_table(reader, directory / variant.users, variant.users_format)
    table = raw.table
    age = numpy_column(table.column("age").fill_null(-1))
    if variant.users == "u.user":  # raw ages -> the 1m age groups
        group = np.maximum(np.searchsorted(AGE_GROUPS, age, side="right") - 1, 0)
        age = np.where(age < 0, -1, AGE_GROUPS[group])
    ages = pa.array(age, mask=age < 0)
    return _sorted_side(
        raw,
        "user",
        [
            ages,
            table.column("gender").combine_chunks(),
            table.column("occupation").combine_chunks(),
        ],
    )


def scale_text(variant: str) -> str:
    """The ratings ``variant`` documents, in words: ``integers 1 to 5`` and the like."""
    low, high, step = VARIANTS[variant].scale
    if step == 1:
        return f"an integer from {low:g} to {high:g}"
    return f"a multiple of {step:g} from {low:g} to {high:g}"


def _drop_off_scale(parsed: Parsed, variant: str) -> None:
    """Ratings off the release's documented scale are bad rows (e.g. ``1e300`` in 100k)."""
    low, high, step = VARIANTS[variant].scale
    rating = numpy_column(parsed.table.column("rating"))
    steps = (rating - low) / step
    off = (rating < low) | (rating > high) | (steps != np.round(steps))
    parsed.drop(off, f"rating must be {scale_text(variant)} (the MovieLens {variant} scale)")


def movielens_chunk(
    parsed: Parsed,
    options: MovieLensOptions,
    users: _Side | None,
    items: _Side,
    unmatched: dict[str, int] | None = None,
) -> Chunk:
    """One block of ratings as CTR rows. Rows with a missing user, item, rating or
    timestamp, or a rating that is not a finite number >= 0 or is off the variant's
    scale (:func:`scale_text`), are bad rows. ``unmatched`` counts ratings whose user or
    item is absent from the side files."""
    table = parsed.table
    missing = pc.or_(
        pc.or_(table.column("user").is_null(), table.column("item").is_null()),
        table.column("rating").is_null(),
    )
    parsed.drop(numpy_column(missing), "missing user, item or rating")
    rating = numpy_column(parsed.table.column("rating"))
    with np.errstate(invalid="ignore"):
        parsed.drop(~np.isfinite(rating) | (rating < 0), "rating must be a finite number >= 0")
    _drop_off_scale(parsed, options.variant)
    parsed.drop(numpy_column(parsed.table.column("time").is_null()), "missing timestamp")
    table = parsed.table
    user = numpy_column(table.column("user"))
    item = numpy_column(table.column("item"))
    rating = numpy_column(table.column("rating"))
    label = (rating >= options.positive_threshold).astype(np.float32)
    sparse: list[object] = [user, item]
    if users is not None:
        sparse += users.join(user)
    sparse += items.join(item)
    if unmatched is not None:
        unmatched["items"] += items.unknown(item)
        if users is not None:
            unmatched["users"] += users.unknown(user)
    dense = np.zeros((len(label), 0), dtype=np.float32)
    time = numpy_column(table.column("time"))
    return chunk_from_arrays(label, dense, sparse, parsed.row_index(), time=time)


@DATASETS.register("movielens")
class MovieLens(RawDataset):
    """MovieLens ratings as CTR (rating >= 4 is a click): user, item and side features."""

    Options = MovieLensOptions
    protocols: ClassVar[dict[str, str]] = {
        "random-811": "seeded random 8:1:1 train/validation/test split of the ratings",
        "temporal": "by timestamp: oldest 80% train, next 10% validation, newest 10% test",
    }
    default_protocol: ClassVar[str] = "random-811"
    splits: ClassVar[dict[str, Callable[[Any], SplitRule]]] = {
        "random-811": lambda options: RandomSplit((0.8, 0.1, 0.1), options.split_seed),
        "temporal": lambda options: TimeRankSplit((0.8, 0.1, 0.1)),
    }

    def sources(self, raw: Path, options: Any) -> list[Path]:
        """The variant's ratings file (source 0: its row indices drive the random split),
        once its side files are checked to be there too."""
        variant = VARIANTS[options.variant]
        needed = [variant.ratings, variant.items] + ([variant.users] if variant.users else [])
        if not raw.is_dir() or any(not (raw / str(n)).is_file() for n in needed):
            raise DataError(
                f"{raw}: movielens variant {options.variant} needs a directory holding "
                f"{', '.join(str(n) for n in needed)}"
            )
        return [raw / variant.ratings]

    def features(self, options: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
        side = ("age", "gender", "occupation") if VARIANTS[options.variant].users else ()
        return (), ("user_id", "item_id", *side, "genre")

    def manifest_extra(self, options: Any, raw: Path) -> dict[str, Any]:
        return {
            "label": f"rating >= {options.positive_threshold:g}",
            "genre_encoding": options.genre,
            "ratings_unmatched_in_side_files": {"users": 0, "items": 0},
        }

    def text_format(self, path: Path, options: Any) -> Any:
        fmt = VARIANTS[options.variant].ratings_format
        if path.name != "ratings.csv":
            return fmt

        def ratings_format(names: list[str]) -> TextFormat:
            if names != list(_CSV_HEADER):
                raise DataError(
                    f"{path}:1: unexpected header {names}; expected {list(_CSV_HEADER)}"
                )
            return replace(fmt, header=False)

        return ratings_format

    def chunks(
        self,
        reader: RawReader,
        paths: list[Path],
        options: Any,
        rule: SplitRule,
        extra: dict[str, Any],
    ) -> Iterator[Chunk]:
        """The ratings' blocks joined with the side files (read after the first block)."""
        (ratings_path,) = paths
        variant = VARIANTS[options.variant]
        unmatched = extra["ratings_unmatched_in_side_files"]
        parsed_blocks = reader.read(ratings_path, self.text_format(ratings_path, options))
        first = next(parsed_blocks, None)
        items = _items(reader, ratings_path.parent, variant, options)
        users = _users(reader, ratings_path.parent, variant) if variant.users else None
        for parsed in [first] if first is not None else []:
            yield movielens_chunk(parsed, options, users, items, unmatched)
        for parsed in parsed_blocks:
            yield movielens_chunk(parsed, options, users, items, unmatched)
        if unmatched["users"] or unmatched["items"]:
            extra["warnings"] = [
                f"{ratings_path}: {unmatched['users']} ratings name a user absent from "
                f"{variant.users or 'the user file'} and {unmatched['items']} an item absent "
                f"from {variant.items} (their side features get the missing id 0)"
            ]


@DATASETS.register("movielens-synth")
class MovieLensSynth(SyntheticDataset):
    """Synthetic MovieLens-as-CTR: user, item and side features, rating>=4 rate 0.575."""

    profile = SyntheticProfile(
        sparse_names=MOVIELENS_FIELDS,
        real_cardinalities=MOVIELENS_CARDINALITIES,
        base_ctr=0.575,
        strong_pairs=[(0, 1)],
    )
