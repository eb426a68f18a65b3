"""Each task declares its metrics once (``MetricSpec``); results and the leaderboard read
the declarations instead of guessing from metric names."""

from __future__ import annotations

import pytest

from suite.leaderboard.metrics import primary_metric, required_metrics, spec_for
from suite.registry import TASKS
from suite.results import MetricSpec, directions, find_metric
from suite.runs.single import execute
from suite.tasks.base import TaskOutput
from tests.conftest import tiny_config


@pytest.mark.parametrize("task", TASKS.names())
def test_every_task_declares_its_metrics(task: str) -> None:
    specs = TASKS.get(task).metrics
    assert specs, f"task {task!r} declares no metrics"
    names = [s.name for s in specs]
    assert len(names) == len(set(names)), names
    assert sum(s.primary for s in specs) == 1, f"{task}: exactly one primary metric"
    for spec in specs:
        assert spec.label and "_" not in spec.label, spec  # a label, not the raw name
        assert spec.name.count("*") <= 1
        assert ("{}" in spec.label) == ("*" in spec.name), spec
        assert any(s.shown for s in specs)


def test_patterns_match_families_and_fill_labels() -> None:
    spec = MetricSpec("test_auc_*", True, "Test AUC {}", bounds=(0.0, 1.0))
    assert spec.matches("test_auc_int8") == "int8"
    assert spec.matches("test_auc") is None and spec.matches("test_auc_") is None
    assert spec.label_for("test_auc_int4") == "Test AUC int4"
    exact = MetricSpec("test_auc", True, "Test AUC")
    assert find_metric((spec, exact), "test_auc") is exact  # an exact name wins
    assert find_metric((spec, exact), "test_auc_fp16") is spec
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


def test_task_results_take_directions_from_the_declarations() -> None:
    """A direction the task's output got wrong is corrected by its declaration; a metric
    it does not declare keeps the output's."""
    task = TASKS.get("memory")
    output = TaskOutput(
        {"compression_ratio": 4.0, "embedding_bytes": 10.0, "extra": 1.0},
        {"compression_ratio": False, "embedding_bytes": True, "extra": True},
    )
    assert task.higher_is_better(output) == {
        "compression_ratio": True,
        "embedding_bytes": False,
        "extra": True,
    }


def test_an_accuracy_run_reports_only_declared_metrics() -> None:
    result = execute(tiny_config(overrides=["train.max_steps=5"]))
    specs = TASKS.get("accuracy").metrics
    assert set(result.higher_is_better) == set(result.metrics)
    for name, higher in result.higher_is_better.items():
        spec = find_metric(specs, name)
        assert spec is not None, f"{name} is not declared"
        assert higher is spec.higher_is_better
