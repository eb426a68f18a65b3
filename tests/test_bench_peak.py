"""``benchmarks/bench_peak.py``: its Amdahl bound rests on both sides running the same GEMMs."""

from __future__ import annotations

import pytest
import torch

from benchmarks.bench_peak import (
    gemm_peak,
    onednn_linear,
    plain_step,
    profiled_gemm_rate,
    step_gemm_shapes,
    suite_step,
)
from suite.data.source import get_prepared
from suite.engine.build import build_model
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


def test_gemm_peak_is_the_best_of_torch_mm_and_onednn_at_the_step_shapes() -> None:
    config = tiny_config(overrides=SGD_BOTH)
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    peak = gemm_peak(model, 16, seconds=0.01)
    assert set(peak["per_shape"]) == {f"{m}x{k}x{n}" for m, k, n in step_gemm_shapes(model, 16)}
    libraries = {"torch.mm"} | ({"onednn"} if onednn_linear() is not None else set())
    assert set(peak["peak_by_library"]) == libraries
    for rates in peak["per_shape"].values():
        assert set(rates) == libraries and all(r > 0 for r in rates.values())
    best = max(r for rates in peak["per_shape"].values() for r in rates.values())
    assert peak["peak_flops"] == best == max(peak["peak_by_library"].values())


def test_the_timed_onednn_call_is_the_same_product() -> None:
    """``onednn_gemm_rate`` times ``[m,k] x [k,n]`` as a linear with a ``[n,k]`` weight."""
    linear = onednn_linear()
    if linear is None:
        pytest.skip("torch without oneDNN")
    a, b = torch.randn(24, 40), torch.randn(40, 8)
    torch.testing.assert_close(linear(a, b.t().contiguous(), None, "none", [], ""), a @ b)
