"""movielens (100k, 1m and the csv releases) on tiny raw directories written here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from suite.config import build_config
from suite.data.prepared import PreparedDataset
from suite.data.source import get_prepared
from suite.errors import DataError

# (user, item, rating, time); written to u.data in a shuffled order
RATINGS = {
    "r0": (1, 1, 5, 100),
    "r1": (1, 2, 3, 200),
    "r2": (1, 4, 4, 300),
    "r3": (2, 1, 4, 400),
    "r4": (2, 2, 2, 500),
    "r5": (3, 1, 5, 600),
    "r6": (1, 3, 1, 700),
    "r7": (2, 4, 4, 800),
    "r8": (3, 2, 4, 900),
    "r9": (3, 4, 3, 1000),
}
FILE_ORDER = ["r5", "r0", "r9", "r3", "r1", "r8", "r2", "r7", "r4", "r6"]


def flags(*genres: int) -> str:
    return "|".join("1" if g in genres else "0" for g in range(19))


def ml100k(tmp_path: Path) -> Path:
    directory = tmp_path / "ml-100k"
    directory.mkdir()
    (directory / "u.data").write_text(
        "".join("\t".join(map(str, RATINGS[r])) + "\n" for r in FILE_ORDER)
    )
    (directory / "u.user").write_text(
        "1|24|M|technician|85711\n2|53|F|other|94043\n3|17|M|student|55555\n"
    )
    items = [
        f"1|Café (1995)|01-Jan-1995||http://x|{flags(3, 4, 5)}",  # Animation, Children's, Comedy
        f"2|GoldenEye (1995)|01-Jan-1995||http://x|{flags(1, 2, 16)}",  # Action, Adventure, Thriller
        f"3|Nothing (1996)|01-Jan-1996||http://x|{flags(0)}",  # unknown only
        f"4|Drama (1996)|01-Jan-1996||http://x|{flags(8)}",
    ]
    (directory / "u.item").write_bytes(("\n".join(items) + "\n").encode("latin-1"))
    return directory


def prepare(raw: Path, protocol: str | None = None, **options: object) -> PreparedDataset:
    # hand-made fixtures: splits of a few rows, one slot prepared from several files
    options = {"both_labels": False, "min_split_rows": 0, **options}
    spec = build_config(
        components={"dataset": "movielens"},
        values={"dataset.raw": str(raw), "dataset.protocol": protocol},
        overrides=[f"dataset.options.{k}={v}" for k, v in options.items()],
    ).dataset
    return get_prepared(spec, progress=False, rebuild=True, force=True)


def sparse(data: PreparedDataset, split: str, name: str) -> list[int]:
    return np.asarray(data.split(split).sparse[:, data.schema.sparse.index(name)]).tolist()


def test_100k_temporal_ids_by_hand(tmp_path: Path) -> None:
    data = prepare(ml100k(tmp_path), "temporal", variant="100k")
    assert data.schema.sparse == ["user_id", "item_id", "age", "gender", "occupation", "genre"]
    assert data.schema.num_dense == 0
    assert data.manifest["rows"] == {"train": 8, "val": 1, "test": 1}
    # train = the 8 oldest ratings, in file order: r5 r0 r3 r1 r2 r7 r4 r6
    assert sparse(data, "train", "user_id") == [2, 3, 4, 3, 3, 4, 4, 3]  # first seen: 3, 1, 2
    assert sparse(data, "train", "item_id") == [2, 2, 2, 3, 4, 4, 3, 5]  # first seen: 1, 2, 4, 3
    assert sparse(data, "train", "age") == [2, 3, 4, 3, 3, 4, 4, 3]  # groups 1 (age 17), 18, 50
    assert sparse(data, "train", "gender") == [2, 2, 3, 2, 2, 3, 3, 2]
    assert sparse(data, "train", "genre") == [2, 2, 2, 3, 4, 4, 3, 0]  # Animation, Action, Drama
    assert np.asarray(data.split("train").label).tolist() == [1, 1, 1, 0, 1, 1, 0, 0]
    assert sparse(data, "val", "item_id") == [3] and sparse(data, "test", "item_id") == [4]
    assert np.asarray(data.split("val").label).tolist() == [1]
    assert np.asarray(data.split("test").label).tolist() == [0]
    assert data.manifest["split"]["first_time_of_val_and_test"] == [900, 1000]
    assert [s["name"] for s in data.manifest["sources"]] == ["u.data", "u.item", "u.user"]


def test_threshold_and_genre_combination(tmp_path: Path) -> None:
    raw = ml100k(tmp_path)
    low = prepare(raw, "temporal", variant="100k", positive_threshold=3)
    assert np.asarray(low.split("train").label).tolist() == [1, 1, 1, 1, 1, 1, 0, 0]
    combo = prepare(raw, "temporal", variant="100k", genre="combination")
    genre = sparse(combo, "train", "genre")
    assert genre[:3] == [2, 2, 2] and genre[7] == 0 and len(set(genre)) == 4
    assert combo.manifest["vocab"]["genre"]["distinct"] == 3
    # no two items here share a first genre: combinations get the same ids as first genres
    assert combo.fingerprint == prepare(raw, "temporal", variant="100k").fingerprint


def test_random_811_is_seeded(tmp_path: Path) -> None:
    raw = ml100k(tmp_path)
    a = prepare(raw, variant="100k")
    assert a.manifest["rows"] == {"train": 8, "val": 1, "test": 1}
    assert prepare(raw, variant="100k").fingerprint == a.fingerprint
    assert a.manifest["split"]["seed"] == 0


def test_1m_double_colon_latin1(tmp_path: Path) -> None:
    directory = tmp_path / "ml-1m"
    directory.mkdir()
    ratings = [(1 + i % 2, 10 if i % 3 else 20, 1 + i % 5, 978300000 + i) for i in range(10)]
    (directory / "ratings.dat").write_text("".join("::".join(map(str, r)) + "\n" for r in ratings))
    (directory / "users.dat").write_text("1::F::1::10::48067\n2::M::56::16::70072\n")
    (directory / "movies.dat").write_bytes(
        "10::Café: The Movie (1995)::Comedy|Drama\n20::Toy Story (1995)::Animation|Children's|Comedy\n".encode(
            "latin-1"
        )
    )
    data = prepare(directory, "temporal", variant="1m", vocab_split="all")
    assert data.schema.sparse == ["user_id", "item_id", "age", "gender", "occupation", "genre"]
    for feature in ("user_id", "item_id", "age", "gender", "occupation", "genre"):
        assert data.manifest["vocab"][feature]["distinct"] == 2, feature
    labels = [float(r[2] >= 4) for r in ratings]
    assert np.asarray(data.split("train").label).tolist() == labels[:8]
    assert np.asarray(data.split("test").label).tolist() == labels[9:]
    # Animation (first genre of item 20, in row 0) -> 2; Comedy (item 10, from row 1) -> 3
    assert sparse(data, "train", "genre") == [2 if r[1] == 20 else 3 for r in ratings[:8]]
    assert sparse(data, "train", "gender") == sparse(data, "train", "age")


def test_csv_release_quoted_titles_half_stars(tmp_path: Path) -> None:
    directory = tmp_path / "ml-latest-small"
    directory.mkdir()
    rows = [
        "1,1,4.0,10",
        "1,2,3.5,20",
        "2,1,4.5,30",
        "2,3,0.5,40",
        "3,2,5.0,50",
        "3,1,2.0,60",
        "1,3,4.0,70",
        "2,2,3.0,80",
        "3,3,4.0,90",
        "1,1,1.0,100",
    ]
    (directory / "ratings.csv").write_text(
        "userId,movieId,rating,timestamp\n" + "\n".join(rows) + "\n"
    )
    (directory / "movies.csv").write_text(
        'movieId,title,genres\n1,"American President, The (1995)",Comedy|Drama|Romance\n'
        '2,Heat (1995),Action|Crime\n3,"Nothing, At All",(no genres listed)\n'
    )
    data = prepare(directory, "temporal", variant="latest-small", vocab_split="all")
    assert data.schema.sparse == ["user_id", "item_id", "genre"]
    assert np.asarray(data.split("train").label).tolist() == [1, 0, 1, 0, 1, 0, 1, 0]
    # Comedy (movie 1) x4 -> 2, Action (movie 2) x3 -> 3, movie 3 has none -> 0
    assert sparse(data, "train", "genre") == [2, 3, 2, 0, 3, 2, 0, 3]
    assert sparse(data, "val", "genre") == [0] and sparse(data, "test", "genre") == [2]
    bad = directory / "ratings.csv"
    bad.write_text("user,movie,rating,timestamp\n1,1,4.0,10\n")
    with pytest.raises(DataError, match=r"ratings\.csv:1: unexpected header"):
        prepare(directory, variant="latest-small")


def test_missing_files_and_bad_rows(tmp_path: Path) -> None:
    with pytest.raises(
        DataError, match="needs a directory holding ratings.dat, movies.dat, users.dat"
    ):
        prepare(tmp_path, variant="1m")
    raw = ml100k(tmp_path)
    text = (raw / "u.data").read_text().splitlines()
    text[3] = "2\t1\tfive\t400"
    (raw / "u.data").write_text("\n".join(text) + "\n")
    with pytest.raises(DataError, match=r"u\.data:4: column rating: invalid double value 'five'"):
        prepare(raw, variant="100k")
    data = prepare(raw, variant="100k", on_bad_rows="skip")
    assert data.manifest["bad_rows"]["total"] == 1 and sum(data.manifest["rows"].values()) == 9
