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

# recorded when ids became first-appearance order (issue 32); the same raw files must keep them
FINGERPRINTS = {
    "criteo": "3ee9be7f3677bb76ed4c752222953bed15c7cc3e464ac851b359f607526396c0",
    "avazu": "7c6e5d08ddf68e60b2be6b44f7a7824a5c301768b3b3e48820bb691a6bede984",
    "movielens": "5e80c6782b809e5216de0a15dbd5d785cc9cff9e8a2850d0287e2411674a5f3d",
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
