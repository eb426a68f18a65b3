"""``benchmarks/bench_peak.py``: its Amdahl bound rests on both sides running the same GEMMs."""

from __future__ import annotations

import pytest

from benchmarks.bench_peak import plain_step, profiled_gemm_rate, suite_step
from suite.data.source import get_prepared
from tests.conftest import tiny_config

SGD_BOTH = [
    "train.dense_optimizer=sgd",
    "train.sparse_optimizer=sgd",
    "model.options.bottom_mlp=32-16",
    "model.options.top_mlp=32",
]


def test_suite_and_plain_steps_run_the_same_gemm_flops() -> None:
    config = tiny_config(overrides=SGD_BOTH)
    data = get_prepared(config.dataset, progress=False)
    suite_one, plain_one = suite_step(config, data, 64), plain_step(config, data, 64)
    assert suite_one() == 64 and plain_one() == 64
    suite_gemm = profiled_gemm_rate(suite_one, 64, steps=2)
    plain_gemm = profiled_gemm_rate(plain_one, 64, steps=2)
    assert suite_gemm["gemm_flops_per_step"] > 0
    assert suite_gemm["gemm_flops_per_step"] == pytest.approx(plain_gemm["gemm_flops_per_step"])
    for gemm in (suite_gemm, plain_gemm):
        assert 0 < gemm["gemm_seconds_share"] <= 1
