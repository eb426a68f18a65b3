"""Each task declares its metrics once (``MetricSpec``); results and the leaderboard read
the declarations instead of guessing from metric names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.leaderboard.metrics import primary_metric, required_metrics, spec_for
from suite.registry import TASKS
from suite.results import MetricSpec, directions, find_metric, repeatable_metrics
from suite.runs.single import execute
from suite.tasks.base import TaskOutput
from tests.conftest import tiny_config

RESULTS = Path(__file__).resolve().parent.parent / "results"


@pytest.mark.parametrize("task", TASKS.names())
def test_every_task_declares_its_metrics(task: str) -> None:
    specs = TASKS.get(task).metrics
    assert specs, f"task {task!r} declares no metrics"
    names = [s.name for s in specs]
    assert len(names) == len(set(names)), names
    assert sum(s.primary for s in specs) == 1, f"{task}: exactly one primary metric"
    for spec in specs:
        assert spec.label and "_" not in spec.label, spec  # a label, not the raw name
        assert spec.label.count("{}") == spec.name.count("*"), spec
        assert any(s.shown for s in specs)


def test_patterns_match_families_and_fill_labels() -> None:
    spec = MetricSpec("test_auc_*", True, "Test AUC {}", bounds=(0.0, 1.0))
    assert spec.matches("test_auc_int8") == "int8"
    assert spec.matches("test_auc") is None and spec.matches("test_auc_") is None
    assert spec.label_for("test_auc_int4") == "Test AUC int4"
    exact = MetricSpec("test_auc", True, "Test AUC")
    assert find_metric((spec, exact), "test_auc") is exact  # an exact name wins
    assert find_metric((spec, exact), "test_auc_fp16") is spec
    two = MetricSpec("*_batch*_ms", False, "{} batch of {}", "ms", "measured")
    assert two.parts("int8_batch512_ms") == ("int8", "512")
    assert two.label_for("int8_batch512_ms") == "int8 batch of 512"
    assert two.parts("int8_queries_per_s") is None
    figures = {"int8_batch512_ms": 1.5, "test_auc_int8": 0.75, "undeclared": 2.0}
    assert repeatable_metrics(figures, (spec, two)) == {"test_auc_int8": 0.75, "undeclared": 2.0}
    speed = MetricSpec("x_per_s_b*", True, "Speed, batch {}", "samples/s", "measured")
    assert speed.unit_label("x_per_s_b512") == "Speed, batch 512 (samples/s)"
    with pytest.raises(ValueError, match="'mystery' is not declared"):
        directions((exact,), ["mystery"])


def test_the_leaderboard_reads_the_declarations() -> None:
    assert primary_metric("accuracy") == "test_auc"
    assert primary_metric("memory") == "compression_ratio"
    assert set(required_metrics("accuracy")) == {
        "test_auc",
        "test_logloss",
        "val_auc",
        "val_logloss",
    }
    assert spec_for("throughput", "infer_latency_ms_p99_b2048").higher_is_better is False
    assert spec_for("throughput", "infer_latency_ms_p99_b2048").kind == "measured"
    assert spec_for("lowprec", "embedding_bytes_int4").kind == "size"
    # an undeclared metric falls back to its raw name, hidden by default
    fallback = spec_for("accuracy", "something_new", higher_is_better=False)
    assert (fallback.label, fallback.shown, fallback.higher_is_better) == (
        "something_new",
        False,
        False,
    )


def test_task_results_take_directions_from_the_declarations_alone() -> None:
    """A task's output carries figures only; each direction comes from its declaration,
    a family's pattern resolving names with parameters, and an undeclared name is an error."""
    output = TaskOutput({"compression_ratio": 4.0, "embedding_bytes": 10.0})
    assert TASKS.get("memory").higher_is_better(output) == {
        "compression_ratio": True,
        "embedding_bytes": False,
    }
    assert TASKS.get("tiered").directions(["hbm_dram/batch_lookup_ms", "a/top_tier_share"]) == {
        "hbm_dram/batch_lookup_ms": False,
        "a/top_tier_share": True,
    }
    with pytest.raises(ValueError, match="'extra' is not declared"):
        TASKS.get("memory").directions(["extra"])


def recorded_results() -> dict[str, list[dict]]:
    """The results stored under ``results/`` (reproductions, studies), by task."""
    found: dict[str, list[dict]] = {}
    for path in sorted(RESULTS.rglob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and {"task", "metrics", "higher_is_better"} <= set(data):
            found.setdefault(data["task"], []).append(data)
    return found


# tasks no stored result covers: each runs once, tiny, in the test below
UNRECORDED = {
    "memory": [],
    "scaling": ["task.options.presets=[dlrm-xs,dlrm-s,dlrm-m]", "task.options.plot=false"],
    "throughput": [
        "task.options.batch_sizes=[64]",
        "task.options.warmup_steps=1",
        "task.options.measure_steps=2",
    ],
}


def test_every_task_is_checked_for_directions() -> None:
    assert set(recorded_results()) | set(UNRECORDED) >= set(TASKS.names())


def test_stored_results_keep_the_directions_the_declarations_give() -> None:
    """Every metric of every stored result gets its direction from its task's declarations,
    the same direction the result recorded."""
    for task, results in recorded_results().items():
        for result in results:
            directions = TASKS.get(task).directions(result["metrics"])
            assert directions == result["higher_is_better"], (task, result["config_hash"])


@pytest.mark.parametrize("task", sorted(UNRECORDED))
def test_a_run_of_each_task_gets_every_direction_from_its_declarations(task: str) -> None:
    overrides = ["train.max_steps=2", *UNRECORDED[task]]
    result = execute(tiny_config(task=task, overrides=overrides))
    assert result.metrics and set(result.higher_is_better) == set(result.metrics)
    assert result.higher_is_better == TASKS.get(task).directions(result.metrics)


def test_an_accuracy_run_reports_only_declared_metrics() -> None:
    result = execute(tiny_config(overrides=["train.max_steps=5"]))
    specs = TASKS.get("accuracy").metrics
    assert set(result.higher_is_better) == set(result.metrics)
    for name, higher in result.higher_is_better.items():
        spec = find_metric(specs, name)
        assert spec is not None, f"{name} is not declared"
        assert higher is spec.higher_is_better
