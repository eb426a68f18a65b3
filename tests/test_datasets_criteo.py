"""criteo-kaggle and criteo-terabyte on tiny raw files written here, checked by hand."""

from __future__ import annotations

import gzip
import hashlib
import math
from pathlib import Path

import numpy as np
import pytest

import suite.data.raw as raw_module
from suite.cli import main
from suite.config import build_config
from suite.data.prepared import PreparedDataset, PreparedWriter, load_prepared
from suite.data.source import get_prepared, prepared_dir
from suite.errors import DataError
from suite.runs.single import execute


def row(
    label: object = 0, ints: dict[int, object] | None = None, cats: dict[int, str] | None = None
) -> str:
    """One raw Criteo line; I and C features are 1-based as in the column names."""
    ints_ = {i: 1 for i in range(1, 14)} | (ints or {})
    cats_ = {i: f"{i:08x}" for i in range(1, 27)} | (cats or {})
    return "\t".join(
        [str(label), *(str(ints_[i]) for i in range(1, 14)), *(cats_[i] for i in range(1, 27))]
    )


def write(path: Path, lines: list[str], compress: bool = False) -> Path:
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def spec(name: str, raw: Path, protocol: str | None = None, **options: object):
    # hand-made fixtures: splits of a few rows, sometimes of one label
    options = {"both_labels": False, "min_split_rows": 0, **options}
    return build_config(
        components={"dataset": name},
        values={"dataset.raw": str(raw), "dataset.protocol": protocol},
        overrides=[f"dataset.options.{k}={v}" for k, v in options.items()],
    ).dataset


def prepare(
    raw: Path, protocol: str | None = None, name: str = "criteo-kaggle", **options: object
) -> PreparedDataset:
    # hand-made fixtures: one raw file prepared several ways into a slot
    return get_prepared(
        spec(name, raw, protocol, **options), progress=False, rebuild=True, force=True
    )


def every(data: PreparedDataset, kind: str) -> dict[str, np.ndarray]:
    return {s: np.asarray(getattr(data.split(s), kind)) for s in ("train", "val", "test")}


# C1 over the 12 train rows of a 14-row file (days of 2 rows; rows 12 and 13 are day 7)
C1_TRAIN = ["0000000b"] * 4 + ["0000000a"] * 3 + ["0000000c"] * 3 + ["0000000d", ""]


def ids_file(tmp_path: Path) -> Path:
    lines = [row(i % 2, {1: i}, {1: c}) for i, c in enumerate(C1_TRAIN)]
    lines += [row(1, {1: 12}, {1: "0000000e"}), row(0, {1: 13}, {1: "0000000a"})]
    return write(tmp_path / "train.txt", lines)


def test_dense_transform_missing_negative_log1p(tmp_path: Path) -> None:
    values = ["", "-5", "0", "3", "1000", "7", "2"]
    raw = write(tmp_path / "train.txt", [row(0, {1: v, 13: v}) for v in values])
    data = prepare(raw, "dlrm")  # 7 rows: one per day; rows 0-5 train, row 6 test
    dense = every(data, "dense")
    expected = [0, 0, 0, math.log(4), math.log(1001), math.log(8)]
    np.testing.assert_allclose(dense["train"][:, 0], expected, rtol=1e-6)
    np.testing.assert_allclose(dense["train"][:, 12], expected, rtol=1e-6)
    np.testing.assert_allclose(dense["test"][:, 0], [math.log(3)], rtol=1e-6)
    assert len(dense["val"]) == 0
    np.testing.assert_allclose(dense["train"][:, 1:12], math.log(2), rtol=1e-6)


def test_ids_by_first_appearance_with_rare_and_missing(tmp_path: Path) -> None:
    data = prepare(ids_file(tmp_path), "dlrm", min_count=2)
    sparse = every(data, "sparse")
    # in order of first appearance: b -> 2, a -> 3, c -> 4; d x1 is rare -> 1; empty -> 0
    assert sparse["train"][:, 0].tolist() == [2, 2, 2, 2, 3, 3, 3, 4, 4, 4, 1, 0]
    assert sparse["test"][:, 0].tolist() == [1]  # e never seen in train: the rare id
    assert sparse["val"][:, 0].tolist() == [3]
    assert data.schema.cardinalities[0] == 5
    assert data.manifest["vocab"]["C1"] == {"size": 5, "distinct": 4, "frequent": 3}
    # a feature with one value in every row: ids 0, 1 reserved, the value is 2
    assert set(sparse["train"][:, 5].tolist()) == {2} and data.schema.cardinalities[5] == 3
    assert data.manifest["thresholds"]["min_count"] == 2


def test_min_count_one_and_counting_all_rows(tmp_path: Path) -> None:
    raw = ids_file(tmp_path)
    ones = prepare(raw, "dlrm", min_count=1)
    assert every(ones, "sparse")["train"][:, 0].tolist() == [2, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 0]
    assert ones.schema.cardinalities[0] == 6
    everything = prepare(raw, "dlrm", vocab_split="all")  # a gains one count (val row)
    sparse = every(everything, "sparse")
    assert sparse["train"][:, 0].tolist() == [2, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 0]
    assert sparse["test"][:, 0].tolist() == [6]  # e counted now, first seen after d


def test_table_size_cap(tmp_path: Path) -> None:
    lines = [row(i % 2, cats={3: f"{i:08x}"}) for i in range(200)]
    data = prepare(write(tmp_path / "train.txt", lines), "random-811", max_rows_per_table=10)
    assert data.schema.cardinalities[2] <= 10
    assert int(every(data, "sparse")["train"][:, 2].max()) < 10
    assert data.schema.cardinalities[0] == 3  # small features keep their own ids


def test_dlrm_days_follow_the_reference(tmp_path: Path) -> None:
    # 15 rows: divmod(15, 7) = (2, 1): days of 3, 2, 2, 2, 2, 2, 2 rows
    raw = write(tmp_path / "train.txt", [row(0, {1: i}) for i in range(15)])
    data = prepare(raw, "dlrm")
    dense = every(data, "dense")
    order = {s: np.round(np.expm1(d[:, 0])).astype(int).tolist() for s, d in dense.items()}
    assert order == {"train": list(range(13)), "test": [13], "val": [14]}
    assert data.manifest["split"]["day_bounds"] == [0, 3, 5, 7, 9, 11, 13, 15]


def test_random_811_exact_seeded_partition(tmp_path: Path) -> None:
    raw = write(tmp_path / "train.txt", [row(i % 2, {1: i}) for i in range(50)])
    a = prepare(raw, "random-811")
    rows = {
        s: sorted(np.round(np.expm1(d[:, 0])).astype(int).tolist())
        for s, d in every(a, "dense").items()
    }
    assert {s: len(r) for s, r in rows.items()} == {"train": 40, "val": 5, "test": 5}
    assert sorted(rows["train"] + rows["val"] + rows["test"]) == list(range(50))
    assert prepare(raw, "random-811").fingerprint == a.fingerprint
    other = prepare(raw, "random-811", split_seed=1)
    assert other.fingerprint != a.fingerprint


def test_fingerprint_same_input_same_chunking_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [row(i % 2, {1: i % 7, 2: ""}, {3: f"{i % 11:08x}", 4: ""}) for i in range(300)]
    raw = write(tmp_path / "train.txt", lines)
    first = prepare(raw, "random-811", min_count=2)
    assert prepare(raw, "random-811", min_count=2).fingerprint == first.fingerprint
    monkeypatch.setattr(raw_module, "BLOCK_BYTES", 700)  # many small blocks
    assert prepare(raw, "random-811", min_count=2).fingerprint == first.fingerprint
    (tmp_path / "gz").mkdir()
    write(tmp_path / "gz" / "train.txt.gz", lines, compress=True)
    zipped = prepare(tmp_path / "gz", "random-811", min_count=2)
    assert zipped.fingerprint == first.fingerprint
    assert zipped.manifest["sources"][0]["name"] == "train.txt.gz"
    lines[17] = row(1, {1: 3}, {3: "deadbeef"})
    changed = prepare(write(tmp_path / "train.txt", lines), "random-811", min_count=2)
    assert changed.fingerprint != first.fingerprint


def test_manifest_records_sources_and_rows(tmp_path: Path) -> None:
    raw = ids_file(tmp_path)
    data = prepare(raw, "dlrm")
    source = data.manifest["sources"][0]
    assert source == {
        "name": "train.txt",
        "bytes": raw.stat().st_size,
        "sha256": hashlib.sha256(raw.read_bytes()).hexdigest(),
        "rows": 14,
    }
    assert data.manifest["rows"] == {"train": 12, "val": 1, "test": 1}
    assert data.manifest["dataset"] == "criteo-kaggle" and data.manifest["protocol"] == "dlrm"
    assert data.manifest["options"]["min_count"] == 1
    assert data.manifest["bad_rows"]["total"] == 0
    assert "suite_version" in data.manifest


@pytest.mark.parametrize(
    ("line", "content", "needle"),
    [
        (5, "\t".join(row().split("\t")[:-1]), "expected 40 columns, got 39"),
        (3, row(0, {2: "abc"}), "column I2"),
        (4, row(0, cats={7: "\udcff\udcfe"}), "UTF-8"),
        (2, row(2), "label must be 0 or 1"),
        (6, row(""), "label must be 0 or 1"),
        (3, "", "empty line"),
    ],
)
def test_bad_row_names_file_and_line(tmp_path: Path, line: int, content: str, needle: str) -> None:
    lines = [row(i % 2) for i in range(8)]
    lines[line - 1] = content
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
    (tmp_path / "train.txt").write_bytes(data)
    with pytest.raises(DataError, match=rf"train\.txt:{line}: .*{needle}"):
        prepare(tmp_path / "train.txt")


def test_bad_row_found_in_a_late_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raw_module, "BLOCK_BYTES", 500)
    lines = [row(i % 2) for i in range(60)]
    lines[47] = row(0, {5: "1.5"})
    with pytest.raises(DataError, match=r"train\.txt:48: column I5"):
        prepare(write(tmp_path / "train.txt", lines))


def test_skip_bad_rows_counts_them_and_keeps_days(tmp_path: Path) -> None:
    lines = [row(i % 2, {1: i}) for i in range(14)]
    lines[1] = "\t".join(lines[1].split("\t")[:20])
    lines[4] = row(0, {1: 4, 3: "x"})
    lines[13] = row(0, {1: 13}, {2: "\udcff"})
    raw = tmp_path / "train.txt"
    raw.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    data = prepare(raw, "dlrm", on_bad_rows="skip")
    bad = data.manifest["bad_rows"]
    assert bad["total"] == 3 and bad["by_source"] == {"train.txt": 3}
    assert [e["where"] for e in bad["examples"]] == ["train.txt:2", "train.txt:5", "train.txt:14"]
    dense = every(data, "dense")
    # days still cut by raw line: rows 0-11 train (minus 1 and 4), row 12 test, row 13 (bad) val
    assert np.round(np.expm1(dense["train"][:, 0])).astype(int).tolist() == [
        0,
        2,
        3,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
    ]
    assert np.round(np.expm1(dense["test"][:, 0])).astype(int).tolist() == [12]
    assert data.manifest["rows"] == {"train": 10, "val": 0, "test": 1}


def test_empty_and_truncated_files(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "train.txt").write_bytes(b"")
    with pytest.raises(DataError, match=r"train\.txt: empty file"):
        prepare(tmp_path / "e")
    data = gzip.compress(("\n".join(row(i % 2, {1: i}) for i in range(3000)) + "\n").encode())
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "train.txt.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"train\.txt\.gz: truncated gzip stream"):
        prepare(tmp_path / "t", on_bad_rows="skip")
    with pytest.raises(DataError, match="expected a file, or a directory holding one of train.txt"):
        prepare(tmp_path / "nothing-here")


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob(".*") if p.is_dir())


def test_failed_prepare_publishes_nothing_and_keeps_the_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = write(tmp_path / "train.txt", [row(i % 2, {1: i}) for i in range(30)])
    good = prepare(raw, "random-811")
    target = prepared_dir(spec("criteo-kaggle", raw, "random-811"))
    assert good.path == target
    lines = [row(i % 2, {1: i}) for i in range(30)]
    lines[20] = row(0, {2: "oops"})
    write(raw, lines)
    with pytest.raises(DataError):
        prepare(raw, "random-811")
    assert (target / "manifest.json").is_file()
    assert load_prepared(target).fingerprint == good.fingerprint
    # a run naming the changed file is refused instead of using the old data silently
    with pytest.raises(DataError, match="was prepared from a train.txt of"):
        get_prepared(spec("criteo-kaggle", raw, "random-811"), progress=False)

    # killed while writing the arrays: no new directory, no temporary directories left
    write(raw, [row(i % 2, {1: i}) for i in range(30)])
    calls = {"n": 0}
    original = PreparedWriter.append

    def dying_append(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 4:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PreparedWriter, "append", dying_append)
    with pytest.raises(KeyboardInterrupt):
        prepare(raw, "dlrm")
    assert not prepared_dir(spec("criteo-kaggle", raw, "dlrm")).exists()
    assert _leftovers(tmp_path / "cache") == []


def test_cli_prepare_then_run_finds_the_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(600):
        click = int(rng.random() < 0.3)
        lines.append(
            row(
                click,
                {1: int(rng.integers(0, 9)) + 5 * click},
                {3: f"{int(rng.integers(0, 20)):08x}"},
            )
        )
    raw = write(tmp_path / "train.txt", lines)
    assert (
        main(
            [
                "prepare",
                "criteo-kaggle",
                "--raw",
                str(raw),
                "--protocol",
                "random-811",
                "--set",
                "min_count=2",
                "--quiet",
            ]
        )
        == 0
    )
    assert "fingerprint" in capsys.readouterr().out
    config = build_config(
        components={"dataset": "criteo-kaggle"},
        values={
            "dataset.protocol": "random-811",
            "train.batch_size": 64,
            "train.progress": False,
            "tracking.enabled": False,
            "train.threads": 1,
        },
        overrides=["dataset.options.min_count=2"],
    )
    result = execute(config)
    assert 0.0 <= result.metrics["test_auc"] <= 1.0
    assert result.data_fingerprint == get_prepared(config.dataset, progress=False).fingerprint


def terabyte_dir(tmp_path: Path, days: int, rows: int) -> Path:
    directory = tmp_path / "tb"
    directory.mkdir()
    for d in range(days):
        lines = [row(int(i % 4 == 0), {1: i, 2: d}, {1: f"{(i + d) % 5:08x}"}) for i in range(rows)]
        write(directory / (f"day_{d}.gz" if d == 1 else f"day_{d}"), lines, compress=d == 1)
    return directory


def test_terabyte_days_halves_and_downsampling(tmp_path: Path) -> None:
    directory = terabyte_dir(tmp_path, 3, 41)
    data = prepare(directory, name="criteo-terabyte", days=3)
    dense = every(data, "dense")
    day = {s: np.round(np.expm1(d[:, 1])).astype(int) for s, d in dense.items()}
    assert set(day["train"].tolist()) == {0, 1} and len(day["train"]) == 82
    assert set(day["val"].tolist()) == {2} == set(day["test"].tolist())
    test_rows = np.round(np.expm1(dense["test"][:, 0])).astype(int).tolist()
    assert test_rows == list(range(21)) and len(dense["val"]) == 20
    assert [s["name"] for s in data.manifest["sources"]] == ["day_0", "day_1.gz", "day_2"]

    sampled = prepare(directory, name="criteo-terabyte", days=3, negative_downsampling=0.5)
    labels = every(sampled, "label")
    train_rows = np.round(np.expm1(every(sampled, "dense")["train"][:, 0])).astype(int)
    assert labels["train"].sum() == 22  # every positive kept (i % 4 == 0 for 11 of 41, two days)
    negatives = int((labels["train"] == 0).sum())
    assert 10 < negatives < 50 and negatives != 60
    assert set(train_rows[labels["train"] == 1].tolist()) == set(range(0, 41, 4))
    assert len(labels["val"]) == 20 and len(labels["test"]) == 21  # val/test never downsampled
    assert (
        prepare(directory, name="criteo-terabyte", days=3, negative_downsampling=0.5).fingerprint
        == sampled.fingerprint
    )
    assert sampled.manifest["dropped_rows"] == 60 - negatives


def test_terabyte_missing_day(tmp_path: Path) -> None:
    directory = terabyte_dir(tmp_path, 2, 5)
    with pytest.raises(DataError, match="missing day files day_2"):
        prepare(directory, name="criteo-terabyte", days=3)


def test_keys_counter_and_vocabulary_units() -> None:
    import pyarrow as pa

    from suite.data.vocab import VocabCounter, Vocabulary, string_keys, to_numpy

    keys = string_keys(pa.array(["0000000a", "0000000b", "ab", "a" * 20, "é", "a\x00"]))
    assert keys[0] < keys[1] and keys[0] == int.from_bytes(b"0000000a", "big")
    assert keys[2] == int.from_bytes(b"ab".ljust(8, b"\0"), "big")
    assert all(k >= 2**63 for k in keys[3:])  # long, non-ASCII, NUL: hashed space
    assert len(set(keys.tolist())) == 6
    sliced = pa.array([5, None, 7, None, 9], type=pa.int64()).slice(1, 4)
    assert to_numpy(sliced, fill=0).tolist() == [0, 7, 0, 9]
    counter = VocabCounter()
    for chunk in ([3, 1, 3], [2, 3], [1]):
        counter.add(np.array(chunk, dtype=np.uint64), np.ones(len(chunk), dtype=np.int64))
    k, c, first = counter.finish()
    assert k.tolist() == [1, 2, 3] and c.tolist() == [2, 1, 3] and first.tolist() == [1, 3, 0]
    vocab = Vocabulary.build(k, c, first, min_count=2)
    assert vocab.lookup(np.array([3, 1, 2, 99], dtype=np.uint64)).tolist() == [2, 3, 1, 1]
    assert vocab.size == 4


def test_stray_carriage_return_is_a_bad_row(tmp_path: Path) -> None:
    lines = [row(i % 2) for i in range(6)]
    lines[2] = row(0, {3: "4\r5"})
    with pytest.raises(DataError, match=r"train\.txt:3: "):
        prepare(write(tmp_path / "train.txt", lines))
    data = prepare(write(tmp_path / "train.txt", lines), on_bad_rows="skip")
    assert data.manifest["bad_rows"]["total"] == 1 and sum(data.manifest["rows"].values()) == 5


def test_a_bad_row_deep_in_the_file_stops_every_reader_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prepare parses on a thread of its own, ahead of the encoding: a bad row found there
    must reach the caller with its line, and no reader or parser thread may outlive it."""
    import threading

    import suite.data.raw as raw_module

    monkeypatch.setattr(raw_module, "BLOCK_BYTES", 2000)  # many blocks, the bad one late
    lines = [row(i % 2, cats={1: f"{i:08x}"}) for i in range(400)]
    lines[350] = "\t".join(lines[350].split("\t")[:-1])  # one column short
    raw = write(tmp_path / "train.txt", lines)
    with pytest.raises(DataError, match=r"train\.txt:351: expected 40 columns, got 39"):
        prepare(raw)
    names = {t.name for t in threading.enumerate()}
    assert not any(n.startswith(("raw-reader", "prepare-parse")) for n in names), names


def test_prefetch_closes_an_iterator_left_early_on_its_own_thread() -> None:
    """A consumer that stops early leaves nothing running: the producer's iterator is
    closed (its clean-up runs) on the producer's thread before ``prefetch`` returns."""
    import threading

    from suite.data.raw import prefetch

    closed_on: list[str] = []

    def numbers():
        try:
            yield from range(1000)
        finally:
            closed_on.append(threading.current_thread().name)

    held = numbers()  # referenced here too, as a PrepareJob holds its chunks
    stream = prefetch(lambda: held, name="test-prefetch")
    assert [next(stream), next(stream)] == [0, 1]
    stream.close()
    assert closed_on == ["test-prefetch"]

    def failing():
        yield 1
        raise ValueError("block 2 is bad")

    with pytest.raises(ValueError, match="block 2"):
        list(prefetch(failing))
