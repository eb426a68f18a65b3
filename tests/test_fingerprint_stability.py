"""Prepared fingerprints are a contract: the same raw input (or generator options) must give
the same fingerprint across suite versions, or every recorded result and leaderboard entry
loses its data identity. These values were recorded with the suite before the manifest's
format 2 (checksums, ranges, duplicates); a change here needs a reason in the commit."""

from __future__ import annotations

import pytest

from suite.config import build_config
from suite.data.source import get_prepared

SMALL = {"train_rows": 2000, "val_rows": 500, "test_rows": 500}
FINGERPRINTS = {
    "criteo-synth": "bf9edf920fab5b9fdb781b5c8f7d0cd545d45680e35f9cdefe9064d82c1d43ca",
    "avazu-synth": "3e3e379dcbc6f00e44bd8e9e6b782a2c31389545b2078c61a018317cb8dd7c44",
    "movielens-synth": "b8d46f8ffcb50a3eeef4a83930f5fc048b17ec01e4ab0556c31919fa8ba89b52",
}


@pytest.mark.parametrize("dataset", sorted(FINGERPRINTS))
def test_synthetic_fingerprints_are_stable(dataset: str) -> None:
    spec = build_config(
        components={"dataset": dataset},
        overrides=[f"dataset.options.{k}={v}" for k, v in SMALL.items()],
    ).dataset
    assert get_prepared(spec, progress=False).fingerprint == FINGERPRINTS[dataset]
