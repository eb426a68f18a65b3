"""The ``serving`` task: query streams, the queue by hand, throughput at a latency target."""

from __future__ import annotations

import numpy as np
import pytest

from suite.errors import ConfigError
from suite.runs.single import execute
from suite.tasks.serving import (
    ServingOptions,
    query_service_seconds,
    query_sizes,
    rate_at_target,
    simulate_latencies,
)
from tests.conftest import tiny_config


def test_default_query_sizes_are_heavy_tailed_with_the_asked_mean() -> None:
    options = ServingOptions(queries=20000)
    sizes = query_sizes(options, np.random.default_rng(0))
    assert sizes.mean() == pytest.approx(64, rel=0.05)
    assert np.percentile(sizes, 99) > 5 * np.median(sizes)
    fixed = query_sizes(
        ServingOptions(size_distribution="fixed", mean_size=8), np.random.default_rng(0)
    )
    assert set(fixed.tolist()) == {8}


def test_a_query_is_split_by_the_batching_policy() -> None:
    times = {1: 1.0, 2: 2.0, 4: 3.0}
    # 9 samples with max batch 4: two full batches (3 s each) and one of 1 sample (1 s);
    # 3 samples: interpolated between 2 and 4 -> 2.5 s
    service = query_service_seconds(np.array([9, 3]), times, max_batch=4)
    np.testing.assert_allclose(service, [7.0, 2.5])


def test_queue_latencies_by_hand() -> None:
    gaps = np.array([1.0, 1.0, 1.0])  # arrivals at 1, 2, 3 (rate 1)
    service = np.array([2.5, 0.5, 1.0])
    # one worker: finishes at 3.5, 4.0, 5.0 -> latencies 2.5, 2.0, 2.0
    np.testing.assert_allclose(simulate_latencies(gaps, service, 1.0, 1), [2.5, 2.0, 2.0])
    # two workers: the second query starts at once -> 2.5, 0.5, then 3 starts at 3 -> 1.0
    np.testing.assert_allclose(simulate_latencies(gaps, service, 1.0, 2), [2.5, 0.5, 1.0])
    # twice the rate halves the gaps: arrivals 0.5, 1.0, 1.5 finish at 3.0, 3.5, 4.5
    np.testing.assert_allclose(simulate_latencies(gaps, service, 2.0, 1), [2.5, 2.5, 3.0])


def test_rate_at_target_is_the_edge_of_the_target() -> None:
    rng = np.random.default_rng(1)
    options = ServingOptions(queries=2000, target_ms=5.0, percentile=99)
    gaps = rng.exponential(1.0, options.queries)
    service = np.full(options.queries, 1e-3)  # 1 ms per query: capacity 1000 q/s
    rate = rate_at_target(gaps, service, options, capacity=1000.0)
    assert 0 < rate < 1000

    def p99(r: float) -> float:
        return float(np.percentile(simulate_latencies(gaps, service, r, 1), 99))

    assert p99(rate) <= 5e-3 < p99(rate * 1.01)
    # an impossible target gives no throughput at all
    assert rate_at_target(gaps, service, ServingOptions(target_ms=0.5), 1000.0) == 0.0


def test_serving_reports_throughput_at_the_target_for_fp32_and_int8() -> None:
    config = tiny_config(task="serving").with_overrides(
        {
            "task.options": {
                "precisions": ["fp32", "int8"],
                "queries": 300,
                "max_batch": 64,
                "repeats": 3,
                "target_ms": 50,
                "plot": False,
            }
        }
    )
    result = execute(config)
    m = result.metrics
    for precision in ("fp32", "int8"):
        assert m[f"{precision}_queries_per_s_at_target"] > 0
        curve = result.details["precisions"][precision]["curve"]
        p99 = [point["p99_ms"] for point in curve]
        assert p99 == sorted(p99)  # more load, longer tail
    assert m["int8_speedup_at_target"] == pytest.approx(
        m["int8_queries_per_s_at_target"] / m["fp32_queries_per_s_at_target"]
    )


def test_serving_refuses_to_quantize_a_method_without_plain_tables() -> None:
    config = tiny_config(task="serving", embedding="fiited")
    with pytest.raises(ConfigError, match="no plain tables"):
        execute(config)
