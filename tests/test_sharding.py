"""The ``sharding`` task: TorchRec's planner and the baselines on Criteo-shaped tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torchrec", reason="torchrec is installed by the nox sessions")

from suite.datasets.criteo import CRITEO_CARDINALITIES
from suite.runs.single import execute
from tests.conftest import tiny_config


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("sharding")
    config = tiny_config(task="sharding").with_overrides(
        {
            "task.options.world_sizes": [2, 4],
            "task.options.measure": False,  # tests/test_sharding_measure.py runs the plans
            "tracking.results_dir": str(out / "results"),
        }
    )
    return execute(config)


def test_every_plan_places_every_full_size_table(result) -> None:
    rows = result.details["tables"]["rows"]
    assert rows == CRITEO_CARDINALITIES  # full-size: the Kaggle vocabularies, not the tiny ones
    for world, plans in result.details["plans"].items():
        for planner, plan in plans.items():
            names = sorted(t["table"] for t in plan["tables"])
            assert names == sorted(f"t{i}" for i in range(len(rows))), (world, planner)
            assert all(0 <= r < int(world) for t in plan["tables"] for r in t["ranks"])
            assert plan["fits"]


def test_imbalance_is_max_over_mean_and_greedy_keeps_its_bound(result) -> None:
    for world, plans in result.details["plans"].items():
        for plan in plans.values():
            costs = plan["rank_cost"]
            assert plan["imbalance"] == pytest.approx(max(costs) / (sum(costs) / len(costs)))
        greedy = plans["lookup-greedy"]
        m = int(world)
        mean = sum(greedy["rank_cost"]) / m
        heaviest_table = max(t["cost"] for t in greedy["tables"])
        # list scheduling: the slowest rank exceeds the mean by at most (1 - 1/m) of a table
        assert max(greedy["rank_cost"]) <= mean + (1 - 1 / m) * heaviest_table + 1e-12
        assert sum(greedy["rank_cost"]) == pytest.approx(sum(t["cost"] for t in greedy["tables"]))
    assert result.metrics["torchrec/w2/fits"] == 1.0
    assert Path(result.details["plots"][0]).exists()


def test_torchrec_plan_is_made_once_for_all_seeds() -> None:
    from suite.tasks.sharding import ShardingOptions, _torchrec_plan, plan_world

    options = ShardingOptions(world_sizes=[2], planners=["torchrec", "random"], measure=False)
    rows = [1000, 50, 20000, 300]
    _torchrec_plan.cache_clear()
    first = plan_world(rows, 16, 2, options, 512, seed=0)
    second = plan_world(rows, 16, 2, options, 512, seed=1)
    assert _torchrec_plan.cache_info().hits == 1
    assert first["torchrec"] == second["torchrec"]
    assert set(first) == {"torchrec", "random"}
    # what the cache hands back is what planning from scratch gives
    fresh = _torchrec_plan.__wrapped__(tuple(rows), 16, 2, options.model_dump_json(), 512)
    assert json.loads(fresh) == first["torchrec"]
