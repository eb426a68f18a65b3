"""The ``sharding`` task's measured plans: 2 real gloo processes run every plan with DMP."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torchrec", reason="torchrec is installed by the nox sessions")

from suite.runs.single import execute
from tests.conftest import tiny_config


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("sharding-measured")
    config = tiny_config(task="sharding").with_overrides(
        {
            "task.options.world_sizes": [2],
            "task.options.tables": "prepared",
            "task.options.measure_steps": 2,
            "task.options.measure_max_rows": 50,
            "tracking.results_dir": str(out / "results"),
        }
    )
    return execute(config)


def test_every_plan_is_measured_per_rank_beside_its_estimate(result) -> None:
    measured = result.details["measured"]
    assert measured["world"] == 2 and measured["batch_size_per_rank"] == 128
    plans = result.details["plans"]["2"]
    assert set(measured["plans"]) == set(plans)
    for planner, figures in measured["plans"].items():
        assert len(figures["rank_compute_ms"]) == len(figures["rank_step_ms"]) == 2
        assert all(ms > 0 for ms in figures["rank_compute_ms"] + figures["rank_step_ms"])
        assert figures["rank_estimated_cost"] == plans[planner]["rank_cost"]
        assert figures["measured_imbalance"] >= 1.0
        assert figures["estimated_imbalance"] == pytest.approx(plans[planner]["imbalance"])
        for r in range(2):
            assert result.metrics[f"{planner}/w2/rank{r}/measured_ms"] > 0
        assert result.metrics[f"{planner}/w2/measured_imbalance"] >= 1.0
        assert result.metrics[f"{planner}/w2/step_ms"] > 0
    assert measured["capped_tables"] > 0  # the tiny dataset still has tables over 50 rows
    assert all(Path(p).exists() for p in result.details["plots"])


def test_dmp_placed_each_table_where_the_plan_said(result) -> None:
    plans = result.details["plans"]["2"]
    for planner, figures in result.details["measured"]["plans"].items():
        for table in plans[planner]["tables"]:
            holders = [r for r in range(2) if table["table"] in figures["rank_tables"][r]]
            if table["sharding_type"] == "data_parallel":
                assert holders == [], (planner, table)  # replicated, not sharded
            else:
                assert holders == table["ranks"], (planner, table)


def test_every_sharding_type_runs_on_two_ranks() -> None:
    import numpy as np

    from suite.engine.sharding_measure import measure_plans

    kinds = {
        "t0": ("table_wise", [1]),
        "t1": ("row_wise", [0, 1]),
        "t2": ("column_wise", [0, 1]),
        "t3": ("table_row_wise", [0, 1]),
        "t4": ("data_parallel", [0, 1]),
    }
    plan = [{"table": t, "sharding_type": k, "shard_ranks": r} for t, (k, r) in kinds.items()]
    sparse = np.random.default_rng(0).integers(0, 1000, size=(400, 3))
    rows = [300, 1000, 40, 500, 7]
    figures = measure_plans({"mixed": plan}, rows, 8, 32, sparse, 3, steps=1, max_rows=200)
    ranks = figures["mixed"]
    assert all(r["compute_ms"] > 0 and r["step_ms"] > 0 for r in ranks)
    held = [set(r["tables"]) for r in ranks]
    assert held[0] == {"t1", "t2", "t3"} and held[1] == {"t0", "t1", "t2", "t3"}
