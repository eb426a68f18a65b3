"""The real raw samples in ../shared/data: prepared, then one DLRM epoch through the run path.

Skipped (with the reason) where the shared folder is absent; the samples are never copied
into the repository.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from suite.config import build_config
from suite.data.source import get_prepared
from suite.runs.single import execute
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.real_data

# recorded with the suite before the manifest's format 2; the same raw files must keep them
FINGERPRINTS = {
    "criteo": "01e40570bf462c4ff2ac750143a9e7c1e64d4da7f372b182a4c9d951915c9e06",
    "avazu": "0b23268454dc2e088f8a13b10d206ac15e8c5fb61382213d5239e3640605e4c1",
    "movielens": "a5cb79e702b9b9bc8d9531fb355a5b780c8ba3f83533ff20e50eaef40504b534",
}
SAMPLES = {
    # dataset, raw path, protocol, options, expected rows read
    "criteo": ("criteo-kaggle", SHARED_DATA / "criteo" / "train.txt", "dlrm", {}, 8000),
    "avazu": ("avazu", SHARED_DATA / "avazu" / "train.csv", "random-811", {}, 8999),
    "movielens": (
        "movielens",
        SHARED_DATA / "movielens" / "ml-100k",
        "random-811",
        {"variant": "100k"},
        100_000,
    ),
}


def _config(dataset: str, raw: Path, protocol: str, options: dict[str, object]):
    return build_config(
        components={"model": "dlrm", "embedding": "full", "dataset": dataset, "task": "accuracy"},
        values={
            "dataset.raw": str(raw),
            "dataset.protocol": protocol,
            "train.batch_size": 512,
            "train.progress": False,
            "tracking.enabled": False,
            "train.threads": 1,
        },
        overrides=[f"dataset.options.{k}={v}" for k, v in options.items()],
    )


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_real_sample_prepares_and_trains_one_epoch(sample: str) -> None:
    dataset, raw, protocol, options, rows = SAMPLES[sample]
    if not raw.exists():
        pytest.skip(f"real sample {raw} is absent (../shared/data is only on development machines)")
    config = _config(dataset, raw, protocol, options)
    data = get_prepared(config.dataset, progress=False)
    manifest = data.manifest
    assert manifest["sources"][0]["rows"] == rows
    assert sum(manifest["rows"].values()) == rows and manifest["bad_rows"]["total"] == 0
    assert all(len(data.split(s)) > 0 for s in ("train", "val", "test"))
    for split in ("train", "val", "test"):
        sparse = np.asarray(data.split(split).sparse)
        assert (sparse >= 0).all() and (sparse < np.array(data.schema.cardinalities)).all()
        assert np.isfinite(np.asarray(data.split(split).dense)).all()
    again = get_prepared(config.dataset, progress=False, rebuild=True)
    assert again.fingerprint == data.fingerprint == FINGERPRINTS[sample]

    result = execute(config)  # finds the prepared cache by name, protocol and options
    assert result.data_fingerprint == data.fingerprint
    assert result.details["steps"] == math.ceil(len(data.split("train")) / 512)
    assert 0.0 < result.metrics["test_auc"] < 1.0 and math.isfinite(result.metrics["test_logloss"])
    if sample == "movielens":  # enough rows to learn something real in one epoch
        assert result.metrics["test_auc"] > 0.65
