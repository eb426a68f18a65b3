from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from suite.config import build_config
from suite.data.loader import BatchLoader
from suite.data.prepared import PreparedWriter, load_prepared
from suite.data.schema import FeatureSchema
from suite.data.source import get_prepared, prepared_dir
from suite.errors import DataError
from tests.conftest import TINY_DATA


def _spec(**options: object):
    data = {**TINY_DATA, **options}
    return build_config(overrides=[f"dataset.options.{k}={v}" for k, v in data.items()]).dataset


def test_synthetic_schema_shapes_and_click_rate() -> None:
    criteo = get_prepared(_spec(), progress=False)
    assert criteo.schema.num_dense == 13 and criteo.schema.num_sparse == 26
    assert {k: len(v) for k, v in criteo.splits.items()} == {
        "train": 4000,
        "val": 1000,
        "test": 1000,
    }
    assert abs(float(np.mean(criteo.split("train").label)) - 0.256) < 0.03
    sparse = np.asarray(criteo.split("train").sparse)
    assert (sparse >= 0).all() and (sparse < np.array(criteo.schema.cardinalities)).all()
    # Zipf skew: the most frequent id of a large feature covers far more than 1/n of rows
    counts = np.bincount(sparse[:, 2])
    assert counts.max() / len(sparse) > 20 / criteo.schema.cardinalities[2]


def test_same_seed_same_fingerprint_other_seed_other(tmp_path: Path) -> None:
    a = get_prepared(_spec(), progress=False)
    again = get_prepared(_spec(), progress=False, rebuild=True)
    other = get_prepared(_spec(seed=1), progress=False)
    assert a.fingerprint == again.fingerprint
    assert a.fingerprint != other.fingerprint


def test_avazu_and_movielens_have_no_dense_features() -> None:
    for name, sparse in (("avazu-synth", 23), ("movielens-synth", 6)):
        spec = build_config(
            components={"dataset": name},
            overrides=[f"dataset.options.{k}={v}" for k, v in TINY_DATA.items()],
        ).dataset
        data = get_prepared(spec, progress=False)
        assert data.schema.num_dense == 0 and data.schema.num_sparse == sparse


def test_loader_is_seeded_and_covers_every_row_once() -> None:
    split = get_prepared(_spec(), progress=False).split("train")
    first = [b.label.clone() for b in BatchLoader(split, 300, shuffle=True, seed=7)]
    second = [b.label.clone() for b in BatchLoader(split, 300, shuffle=True, seed=7)]
    assert all((x == y).all() for x, y in zip(first, second, strict=True))
    dense_sum = sum(float(b.dense.sum()) for b in BatchLoader(split, 300, shuffle=True, seed=7))
    assert abs(dense_sum - float(np.asarray(split.dense, dtype=np.float64).sum())) < 1e-2
    batches = list(BatchLoader(split, 300))
    assert [len(b) for b in batches][-1] == 4000 - 13 * 300
    assert batches[0].sparse.dtype.is_floating_point is False and batches[0].sparse.shape == (
        300,
        26,
    )


def test_failed_prepare_publishes_nothing(tmp_path: Path) -> None:
    schema = FeatureSchema(dense=["a"], sparse=["b"], cardinalities=[3])
    out = tmp_path / "prepared"
    with pytest.raises(RuntimeError), PreparedWriter(out, schema) as writer:
        writer.append("train", np.zeros((2, 1)), np.zeros((2, 1)), np.zeros(2))
        raise RuntimeError("killed")
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".prepared")]


def test_truncated_array_is_refused(tmp_path: Path) -> None:
    data = get_prepared(_spec(), progress=False)
    path = prepared_dir(_spec())
    assert data.path == path
    victim = path / "train.label.f32"
    os.truncate(victim, victim.stat().st_size - 4)
    with pytest.raises(DataError, match="wrong size"):
        load_prepared(path)
