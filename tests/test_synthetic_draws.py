"""Synthetic data drawn per run seed (``dataset.options.draw: per_seed``): two seeds of a
config see different data, two methods under one seed the same (paired); the default
(``draw: fixed``) keeps every stored run's config hash and data fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from suite.config import DatasetSpec, RunConfig, build_config, validate_config
from suite.data.location import prepared_dir
from suite.data.source import get_prepared
from suite.errors import ConfigError
from suite.runs.multiseed import seedless_hash
from suite.runs.single import execute
from tests.conftest import tiny_config
from tests.test_fingerprint_stability import FINGERPRINTS, SMALL

ROOT = Path(__file__).resolve().parent.parent
STORED = sorted((ROOT / "results" / "quick" / "runs").glob("*/seed-0.json"))
PER_SEED = ["dataset.options.draw=per_seed"]


def small(seed: int, embedding: str = "full", extra: list[str] | None = None) -> RunConfig:
    """criteo-synth at the fingerprint-stability test's size, run seed ``seed``."""
    return build_config(
        components={"dataset": "criteo-synth", "embedding": embedding},
        values={"seed": seed},
        overrides=[f"dataset.options.{k}={v}" for k, v in SMALL.items()] + (extra or []),
    )


@pytest.mark.skipif(not STORED, reason="no stored runs under results/quick/runs")
def test_default_draw_keeps_stored_hashes_and_fingerprint() -> None:
    """Every stored quick run's config re-resolves to its stored identity and hash; the
    smallest of their datasets regenerates to its stored fingerprint."""
    smallest: tuple[int, RunConfig, str] | None = None
    for path in STORED:
        stored = json.loads(path.read_text())
        config = validate_config({**stored["config"], "seed": stored["seed"]})
        assert config.identity() == stored["config"], path
        assert config.config_hash() == stored["config_hash"], path
        assert "draw" not in config.dataset.options  # the cache key's input, too
        options = config.dataset.options
        rows = options["train_rows"] + options["val_rows"] + options["test_rows"]
        if smallest is None or rows < smallest[0]:
            smallest = (rows, config, stored["data_fingerprint"])
    assert smallest is not None
    _, config, fingerprint = smallest
    assert get_prepared(config.dataset, progress=False).fingerprint == fingerprint


def test_fixed_draw_is_the_old_data_for_every_run_seed() -> None:
    """``draw: fixed`` (the default, spelled out or not) is the data recorded before the
    option, whatever the run's seed."""
    for seed in (0, 3):
        for extra in ([], ["dataset.options.draw=fixed"]):
            spec = small(seed, extra=extra).dataset
            assert spec.options == small(0).dataset.options
            assert get_prepared(spec, progress=False).fingerprint == FINGERPRINTS["criteo-synth"]


def test_per_seed_draws_differ_by_seed_and_pair_methods() -> None:
    seed0, seed1 = small(0, extra=PER_SEED), small(1, extra=PER_SEED)
    seed1_qr = small(1, "qr", extra=PER_SEED)
    # the reproduction runner prepares once per distinct dataset spec (its JSON)
    assert seed1.dataset.model_dump_json() == seed1_qr.dataset.model_dump_json()
    assert seed0.dataset.model_dump_json() != seed1.dataset.model_dump_json()
    assert prepared_dir(seed1.dataset) == prepared_dir(seed1_qr.dataset)
    assert prepared_dir(seed0.dataset) != prepared_dir(seed1.dataset)
    prints = [get_prepared(c.dataset, progress=False).fingerprint for c in (seed0, seed1, seed1_qr)]
    assert prints[0] != prints[1]
    assert prints[1] == prints[2]
    assert FINGERPRINTS["criteo-synth"] not in prints  # its own draws, not the fixed one
    train0 = get_prepared(seed0.dataset, progress=False).split("train")
    train1 = get_prepared(seed1.dataset, progress=False).split("train")
    assert not np.array_equal(train0.sparse, train1.sparse)  # the sample differs
    assert not np.array_equal(train0.label, train1.label)


def test_per_seed_keeps_one_seedless_identity() -> None:
    """The dataset's draw_seed is the run's seed: left out of the identity, so a config's
    seeds share their seedless hash and a recorded identity re-resolves to the run."""
    seed0, seed1 = small(0, extra=PER_SEED), small(1, extra=PER_SEED)
    assert seed0.dataset.options["draw_seed"] == 0
    assert seed1.dataset.options["draw_seed"] == 1
    assert "draw_seed" not in seed1.identity()["dataset"]["options"]
    assert seed1.identity()["dataset"]["options"]["draw"] == "per_seed"
    assert seedless_hash(seed0) == seedless_hash(seed1)
    assert seed0.config_hash() != seed1.config_hash()
    assert seed0.with_overrides({"seed": 1}) == seed1
    again = validate_config({**seed1.identity(), "seed": 1})
    assert again.dataset.options == seed1.dataset.options
    assert again.config_hash() == seed1.config_hash()
    # a config without per_seed draws differs from it
    assert seedless_hash(small(0)) != seedless_hash(seed0)


def test_draw_seed_without_per_seed_is_refused() -> None:
    with pytest.raises(ConfigError, match="draw_seed"):
        small(0, extra=["dataset.options.draw_seed=3"])


def test_per_seed_outside_a_run_config_is_refused() -> None:
    """A dataset spec alone has no run seed to draw with: preparing it says so."""
    spec = DatasetSpec.model_validate(
        {"name": "criteo-synth", "options": {**SMALL, "draw": "per_seed"}}
    )
    with pytest.raises(ConfigError, match="draw_seed"):
        get_prepared(spec, progress=False)


def test_per_seed_runs_pair_methods_within_a_seed() -> None:
    """Down the one run path: the result's data fingerprint is one per seed, shared by the
    methods of that seed."""

    def run(seed: int, embedding: str) -> str:
        config = tiny_config(embedding=embedding, overrides=PER_SEED)
        return execute(config.with_overrides({"seed": seed})).data_fingerprint

    assert run(1, "full") == run(1, "hash")
    assert run(1, "full") != run(2, "full")


def test_per_seed_draws_the_criteo_regime_too() -> None:
    extra = [*PER_SEED, "dataset.options.regime=criteo"]
    one, two = small(1, extra=extra), small(2, extra=extra)
    assert (
        get_prepared(one.dataset, progress=False).fingerprint
        != get_prepared(two.dataset, progress=False).fingerprint
    )
