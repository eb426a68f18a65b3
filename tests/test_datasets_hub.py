"""BARS (reczoo) datasets from a local split directory and from a (faked) hub repo id.

No network: the hub path is exercised with ``datasets.load_dataset`` replaced by a
function returning an in-memory ``DatasetDict``.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np
import pytest

from suite.config import build_config
from suite.data.prepared import PreparedDataset
from suite.data.source import get_prepared
from suite.errors import DataError

# MovielensLatest_x1 layout: label, user_id, item_id, tag_id
SPLITS = {
    "train": [(1, 5, 7, 100), (0, 5, 8, 101), (1, 6, 7, 100), (0, 9, 8, 102), (1, 5, 7, 100)],
    "valid": [(1, 6, 8, 100), (0, 42, 7, 103)],
    "test": [(0, 9, 9, 101)],
}
COLUMNS = ["label", "user_id", "item_id", "tag_id"]


def write_split_dir(directory: Path, splits: dict[str, list[tuple]] = SPLITS) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, rows in splits.items():
        lines = [",".join(COLUMNS)] + [",".join(map(str, r)) for r in rows]
        (directory / f"{name}.csv").write_text("\n".join(lines) + "\n")
    return directory


def prepare(name: str, raw: Path | str, **options: object) -> PreparedDataset:
    # hand-made fixtures: splits of a few rows, one slot prepared from several files
    options = {"both_labels": False, "min_split_rows": 0, **options}
    spec = build_config(
        components={"dataset": name},
        values={"dataset.raw": str(raw)},
        overrides=[f"dataset.options.{k}={v}" for k, v in options.items()],
    ).dataset
    return get_prepared(spec, progress=False, rebuild=True, force=True)


def test_local_split_directory_keeps_the_given_splits(tmp_path: Path) -> None:
    data = prepare("bars-movielenslatest-x1", write_split_dir(tmp_path / "MovielensLatest_x1"))
    assert data.manifest["protocol"] == "given"
    assert data.manifest["rows"] == {"train": 5, "val": 2, "test": 1}
    assert data.schema.sparse == ["user_id", "item_id", "tag_id"] and data.schema.num_dense == 0
    train = np.asarray(data.split("train").sparse)
    # user 5 x3 -> 2; 6, 9 x1 (tie by value) -> 3, 4. Counted on train only.
    assert train[:, 0].tolist() == [2, 2, 3, 4, 2]
    assert np.asarray(data.split("val").sparse)[:, 0].tolist() == [3, 1]  # user 42 unseen -> 1
    assert train[:, 2].tolist() == [2, 3, 2, 4, 2]  # tag 100 x3, 101, 102
    assert np.asarray(data.split("val").label).tolist() == [1, 0]
    assert [s["name"] for s in data.manifest["sources"]] == ["train.csv", "valid.csv", "test.csv"]
    assert data.manifest["split"]["files"] == {
        "train.csv": "train",
        "valid.csv": "val",
        "test.csv": "test",
    }


def test_criteo_x1_dense_kept_as_given(tmp_path: Path) -> None:
    header = ["label", *(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))]
    directory = tmp_path / "Criteo_x1"
    directory.mkdir()
    for name, values in (("train", ["0.5", ""]), ("valid", ["0.25"]), ("test", ["1"])):
        rows = [
            ",".join([str(i % 2), v, *["0.1"] * 12, *(str(14 + c) for c in range(26))])
            for i, v in enumerate(values)
        ]
        (directory / f"{name}.csv").write_text(",".join(header) + "\n" + "\n".join(rows) + "\n")
    data = prepare("bars-criteo-x1", directory)
    assert data.schema.num_dense == 13 and data.schema.num_sparse == 26
    np.testing.assert_allclose(np.asarray(data.split("train").dense)[:, 0], [0.5, 0.0])
    np.testing.assert_allclose(np.asarray(data.split("val").dense)[:, 1], [0.1], rtol=1e-6)
    assert np.asarray(data.split("test").sparse).tolist() == [[2] * 26]


def test_hub_repo_id_matches_the_local_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = prepare("bars-movielenslatest-x1", write_split_dir(tmp_path / "local"))
    calls = []

    def fake_load_dataset(
        repo: str, revision: str | None = None, **_: object
    ) -> datasets.DatasetDict:
        calls.append((repo, revision))
        return datasets.DatasetDict(
            {
                name: datasets.Dataset.from_dict(
                    {c: [r[i] for r in rows] for i, c in enumerate(COLUMNS)}
                )
                for name, rows in SPLITS.items()
            }
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the fake stands for a copy in the hub cache
    hub = prepare("bars-movielenslatest-x1", "reczoo/MovielensLatest_x1", revision="main")
    assert calls == [("reczoo/MovielensLatest_x1", "main")]
    assert hub.fingerprint == local.fingerprint
    assert hub.manifest["origin"] == {"hub_repo": "reczoo/MovielensLatest_x1", "revision": "main"}
    assert [s["name"] for s in hub.manifest["sources"]] == [
        "reczoo/MovielensLatest_x1:train",
        "reczoo/MovielensLatest_x1:val",
        "reczoo/MovielensLatest_x1:test",
    ]
    assert all(len(s["sha256"]) == 64 for s in hub.manifest["sources"])

    def only_train(repo: str, revision: str | None = None, **_: object) -> datasets.DatasetDict:
        return datasets.DatasetDict({"train": datasets.Dataset.from_dict({"label": [1]})})

    monkeypatch.setattr(datasets, "load_dataset", only_train)
    with pytest.raises(DataError, match=r"has splits \['train'\]; expected train, valid"):
        prepare("bars-movielenslatest-x1", "reczoo/MovielensLatest_x1")


def test_bad_layouts(tmp_path: Path) -> None:
    directory = write_split_dir(tmp_path / "d")
    (directory / "valid.csv").unlink()
    with pytest.raises(DataError, match=r"missing valid\.csv"):
        prepare("bars-movielenslatest-x1", directory)
    write_split_dir(directory)
    (directory / "test.csv").write_text("label,user_id,item_id\n1,2,3\n")
    with pytest.raises(DataError, match=r"test\.csv:1: header lacks columns \['tag_id'\]"):
        prepare("bars-movielenslatest-x1", directory)
    write_split_dir(directory)
    (directory / "train.csv").write_text("label,user_id,item_id,tag_id\n1,2,3,4\n3,2,3,4\n")
    with pytest.raises(DataError, match=r"train\.csv:3: label must be 0 or 1"):
        prepare("bars-movielenslatest-x1", directory)
    data = prepare("bars-movielenslatest-x1", directory, on_bad_rows="skip")
    assert data.manifest["bad_rows"]["total"] == 1


def test_unreachable_hub_fails_fast_and_names_the_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket
    import time

    with socket.socket() as probe:  # a local port nobody listens on: refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    started = time.perf_counter()
    with pytest.raises(DataError, match=r"cannot reach the Hugging Face hub.*--raw DIR"):
        prepare("bars-avazu-x1", "reczoo/Avazu_x1")
    assert time.perf_counter() - started < 10
