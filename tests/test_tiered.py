"""The ``tiered`` task: tier shares checked by brute-force replay, times and costs by hand."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from suite.data.access import AccessStream, stack_distances
from suite.errors import ConfigError
from suite.runs.single import execute
from suite.tasks.tiered import Level, Placement, Tier, load_tiers, simulate_placement
from tests.conftest import tiny_config


def brute_two_level_lru(keys: np.ndarray, top: int, middle: int) -> tuple[float, float, float]:
    """Exclusive LRU hierarchy: misses fill the top tier, its victims drop to the middle."""
    upper: OrderedDict[int, None] = OrderedDict()
    lower: OrderedDict[int, None] = OrderedDict()
    served = [0, 0, 0]
    for key in keys.tolist():
        if key in upper:
            served[0] += 1
            upper.move_to_end(key)
            continue
        if key in lower:
            served[1] += 1
            del lower[key]
        else:
            served[2] += 1
        upper[key] = None
        if len(upper) > top:
            victim, _ = upper.popitem(last=False)
            lower[victim] = None
            if len(lower) > middle:
                lower.popitem(last=False)
    n = len(keys)
    return served[0] / n, served[1] / n, served[2] / n


def stream_of(keys: np.ndarray, rows: int) -> AccessStream:
    n = keys.shape[0]
    return AccessStream(
        keys.astype(np.int64),
        np.zeros(n, dtype=np.int32),
        np.arange(n, dtype=np.int64),
        np.array([rows]),
    )


FLAT = Tier(latency_ns=100, bandwidth_gbps=1.0, block_bytes=64, parallelism=1, usd_per_gb=1.0)


def test_lru_tier_shares_equal_a_brute_force_replay_of_the_hierarchy() -> None:
    rng = np.random.default_rng(3)
    rows = 400
    keys = rng.zipf(1.25, 8000) % rows
    stream = stream_of(keys, rows)
    placement = Placement(
        name="three tiers",
        levels=[Level(tier="a", share=0.02), Level(tier="b", share=0.08), Level(tier="c")],
    )
    tiers = {"a": FLAT, "b": FLAT, "c": FLAT}
    result = simulate_placement(placement, tiers, stream, stack_distances(stream.keys), 64, 100)
    simulated = [level["lookup_share"] for level in result["levels"]]
    expected = brute_two_level_lru(keys, top=8, middle=32)  # 2% and 8% of 400 rows
    np.testing.assert_allclose(simulated, expected, rtol=0, atol=1e-12)


def test_time_and_cost_by_hand() -> None:
    # 10 lookups of 2 rows: row 0 nine times; LFU top tier of 1 row holds row 0
    keys = np.array([0] * 9 + [1])
    stream = stream_of(keys, 2)
    fast = Tier(latency_ns=100, bandwidth_gbps=1.0, block_bytes=64, parallelism=2, usd_per_gb=10)
    slow = Tier(
        latency_ns=10_000, bandwidth_gbps=1.0, block_bytes=4096, parallelism=1, usd_per_gb=1
    )
    placement = Placement(
        name="p", levels=[Level(tier="fast", share=0.5), Level(tier="slow")], policy="lfu"
    )
    result = simulate_placement(
        placement, {"fast": fast, "slow": slow}, stream, stack_distances(keys), 128, 10
    )
    top, bottom = result["levels"]
    assert top["lookup_share"] == pytest.approx(0.8)  # 8 repeat lookups of row 0
    assert bottom["lookup_share"] == pytest.approx(0.2)  # first lookups of rows 0 and 1
    # per batch of 10 lookups: fast 8 * 100 ns / 2 + 8 * 128 B / 1 GB/s
    assert top["seconds_per_batch"] == pytest.approx(8 * 100e-9 / 2 + 8 * 128 / 1e9)
    # slow 2 * 10 us + 2 * 4096 B / 1 GB/s (a lookup reads a whole block)
    assert bottom["seconds_per_batch"] == pytest.approx(2 * 10e-6 + 2 * 4096 / 1e9)
    assert result["batch_lookup_seconds"] == pytest.approx(bottom["seconds_per_batch"])
    # fast holds 1 row, slow all 2 rows, 128 B each
    assert result["memory_cost_usd"] == pytest.approx(128 / 1e9 * 10 + 256 / 1e9 * 1)


def test_the_built_in_tier_preset_loads_and_a_bad_one_names_the_field(tmp_path: Path) -> None:
    tiers = load_tiers(None)
    assert {"hbm", "dram", "scm", "nand"} <= set(tiers)
    assert tiers["nand"].latency_ns > tiers["scm"].latency_ns > tiers["dram"].latency_ns
    bad = tmp_path / "tiers.yaml"
    bad.write_text(
        "tiers:\n  dram: {latency_ns: -1, bandwidth_gbps: 1, block_bytes: 64,"
        " parallelism: 1, usd_per_gb: 1}\n"
    )
    with pytest.raises(ConfigError, match=r"tiers.yaml: tiers\.dram\.latency_ns"):
        load_tiers(bad)


def test_a_placement_naming_an_unknown_tier_fails_before_any_work() -> None:
    config = tiny_config(task="tiered").with_overrides(
        {"task.options.placements": [{"name": "x", "levels": [{"tier": "optane"}]}]}
    )
    with pytest.raises(ConfigError, match="names tier 'optane'"):
        execute(config)


def test_tiered_task_end_to_end(tmp_path: Path) -> None:
    config = tiny_config(task="tiered").with_overrides(
        {"tracking.results_dir": str(tmp_path / "results")}
    )
    result = execute(config)
    placements = {p["name"]: p for p in result.details["placements"]}
    dram_only = placements["dram only"]
    assert dram_only["levels"][0]["lookup_share"] == pytest.approx(1.0)
    # a bigger DRAM cache in front of NAND serves more and waits less
    small, large = placements["dram 1% + nand (lru)"], placements["dram 10% + nand (lru)"]
    assert large["levels"][0]["lookup_share"] >= small["levels"][0]["lookup_share"]
    assert large["batch_lookup_seconds"] <= small["batch_lookup_seconds"]
    assert all(Path(p).exists() for p in result.details["plots"])
    # metric names are plain slugs that reproduction specs can reference
    assert "dram_10pct_scm_lru/top_tier_share" in result.metrics
    assert "dram_only/memory_cost_usd" in result.metrics
