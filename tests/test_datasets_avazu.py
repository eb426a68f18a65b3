"""avazu on tiny raw train.csv files written here, checked by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from suite.config import build_config
from suite.data.prepared import PreparedDataset
from suite.data.source import get_prepared
from suite.datasets.avazu import AVAZU_FIELDS
from suite.errors import DataError

HEADER = (
    "id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,app_domain,app_category,"
    "device_id,device_ip,device_model,device_type,device_conn_type,C14,C15,C16,C17,C18,C19,C20,C21"
)
RAW_FIELDS = HEADER.split(",")[3:]


def row(i: int, click: int, hour: str, **fields: str) -> str:
    values = {name: f"{name[:2]}{i % 3}" for name in RAW_FIELDS} | fields
    return ",".join([f"1000{i}", str(click), hour, *(values[n] for n in RAW_FIELDS)])


def write(tmp_path: Path, lines: list[str], header: str = HEADER) -> Path:
    path = tmp_path / "train.csv"
    path.write_text(header + "\n" + "\n".join(lines) + "\n")
    return path


def prepare(raw: Path, protocol: str | None = None, **options: object) -> PreparedDataset:
    # hand-made fixtures: splits of a few rows, one slot prepared from several files
    options = {"both_labels": False, "min_split_rows": 0, **options}
    spec = build_config(
        components={"dataset": "avazu"},
        values={"dataset.raw": str(raw), "dataset.protocol": protocol},
        overrides=[f"dataset.options.{k}={v}" for k, v in options.items()],
    ).dataset
    return get_prepared(spec, progress=False, rebuild=True, force=True)


def column(data: PreparedDataset, split: str, name: str) -> list[int]:
    return np.asarray(data.split(split).sparse[:, AVAZU_FIELDS.index(name)]).tolist()


# four days: Tue 21 Oct 2014 (4 rows), Wed 22 (3), Thu 23 (2), Fri 24 (1)
HOURS = ["14102100"] * 4 + ["14102205"] * 3 + ["14102317"] * 2 + ["14102423"]


def days_file(tmp_path: Path) -> Path:
    lines = [row(i, i % 2, h, C1="1005" if i < 6 else "1002") for i, h in enumerate(HOURS)]
    return write(tmp_path, lines)


def test_by_day_split_and_derived_hour_features(tmp_path: Path) -> None:
    data = prepare(days_file(tmp_path), "by-day")
    assert data.schema.sparse == AVAZU_FIELDS and data.schema.num_dense == 0
    assert data.manifest["rows"] == {"train": 7, "val": 2, "test": 1}
    # train: hour 00 x4 -> 2, hour 05 x3 -> 3; validation's hour 17 is unseen -> 1
    assert column(data, "train", "hour_of_day") == [2, 2, 2, 2, 3, 3, 3]
    assert column(data, "val", "hour_of_day") == [1, 1]
    # weekday: Tuesday x4 -> 2, Wednesday x3 -> 3; Thursday and Friday unseen -> 1
    assert column(data, "train", "weekday") == [2, 2, 2, 2, 3, 3, 3]
    assert column(data, "test", "weekday") == [1]
    # C1: 1005 x6 rows of train... the 7th train row is 1002 -> 3
    assert column(data, "train", "C1") == [2] * 6 + [3]
    assert column(data, "test", "C1") == [3]
    assert np.asarray(data.split("train").label).tolist() == [0, 1, 0, 1, 0, 1, 0]
    split = data.manifest["split"]
    assert (split["val_day"], split["test_day"]) == (16366, 16367)  # days since 1970-01-01


def test_weekday_values_are_monday_zero(tmp_path: Path) -> None:
    # counted over all rows so every weekday gets its own id; sizes tell the distinct values
    hours = ["14102000", "14102100", "14102100", "14102600"]  # Mon, Tue, Tue, Sun
    data = prepare(
        write(tmp_path, [row(i, 0, h) for i, h in enumerate(hours)]),
        "random-811",
        vocab_split="all",
    )
    assert data.manifest["vocab"]["weekday"]["distinct"] == 3
    from suite.datasets.avazu import decode_hours

    hour, weekday, day, bad = decode_hours(np.array([14102000, 14102623, 14103199, 14022900]))
    assert hour.tolist()[:2] == [0, 23] and weekday.tolist()[:2] == [0, 6]
    assert bad.tolist() == [False, False, True, True]  # hour 99; 29 Feb 2014 does not exist
    assert day[1] - day[0] == 6


def test_random_splits_exact_and_seeded(tmp_path: Path) -> None:
    raw = write(tmp_path, [row(i, i % 2, "14102100") for i in range(20)])
    assert prepare(raw).manifest["rows"] == {"train": 16, "val": 2, "test": 2}
    a = prepare(raw, "random-712")
    assert a.manifest["rows"] == {"train": 14, "val": 2, "test": 4}
    assert prepare(raw, "random-712").fingerprint == a.fingerprint
    assert prepare(raw, "random-712", split_seed=3).fingerprint != a.fingerprint


def test_by_day_needs_three_days(tmp_path: Path) -> None:
    raw = write(tmp_path, [row(i, 0, "1410210" + str(i % 2)) for i in range(6)])
    with pytest.raises(DataError, match="at least 3 days"):
        prepare(raw, "by-day")


def test_bad_header_and_bad_rows(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"train\.csv:1: unexpected header"):
        prepare(write(tmp_path, [row(0, 0, "14102100")], header=HEADER.replace("click", "clicked")))
    lines = [row(i, 0, "14102100") for i in range(6)]
    lines[3] = row(3, 0, "14132100")  # month 13
    with pytest.raises(DataError, match=r"train\.csv:5: hour must be YYMMDDHH"):
        prepare(write(tmp_path, lines))
    lines[3] = row(3, 0, "14102100")
    lines[4] = row(4, 0, "1410x100")
    with pytest.raises(DataError, match=r"train\.csv:6: column hour"):
        prepare(write(tmp_path, lines))
    lines[1] = ",".join(row(1, 1, "14102100").split(",")[:-2])
    data = prepare(write(tmp_path, lines), on_bad_rows="skip")
    assert data.manifest["bad_rows"]["total"] == 2
    assert [e["where"] for e in data.manifest["bad_rows"]["examples"]] == [
        "train.csv:3",
        "train.csv:6",
    ]
    assert sum(data.manifest["rows"].values()) == 4


def test_fingerprint_follows_content(tmp_path: Path) -> None:
    raw = days_file(tmp_path)
    first = prepare(raw, "by-day")
    assert prepare(raw, "by-day").fingerprint == first.fingerprint
    text = raw.read_text().replace(",1005,", ",1007,", 1)
    raw.write_text(text)
    assert prepare(raw, "by-day").fingerprint != first.fingerprint
