"""Codecs of the embedding all-to-all payload: bounds kept, bytes counted, runs measured."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from suite.config import CommConfig
from suite.engine.comm_codec import CommCodec, decode, encode, table_bounds
from suite.runs.single import execute
from tests.conftest import tiny_config


@pytest.mark.parametrize("relative", [1e-4, 1e-3, 0.01, 0.1])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 300.0])
def test_lossy_codec_never_exceeds_its_bound(relative: float, scale: float) -> None:
    rng = np.random.default_rng(int(relative * 1e4) + int(scale))
    # tables of very different ranges, heavy-tailed values, an all-constant table
    values = (rng.standard_t(3, size=(257, 6, 16)) * scale).astype(np.float32)
    values[:, 2, :] *= 1e-3
    values[:, 5, :] = 0.25
    bounds = table_bounds(values, relative)
    decoded = decode(encode(values, bounds))
    error = np.abs(decoded.astype(np.float64) - values.astype(np.float64))
    # exact quantization keeps |x - x'| <= e; the float32 result adds at most half an ulp
    slack = np.abs(values.astype(np.float64)) * 2.0**-24
    assert (error <= bounds[None, :, None] + slack).all()
    assert bounds[2] < bounds[0]  # table-wise: each table's bound follows its own range


def test_compression_ratio_grows_with_the_bound() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(0, 0.05, size=(512, 26, 16)).astype(np.float32)
    ratios = []
    for relative in (1e-4, 1e-3, 1e-2):
        encoded = encode(values, table_bounds(values, relative))
        ratios.append(values.nbytes / encoded.nbytes)
    assert 1 < ratios[0] < ratios[1] < ratios[2]
    assert ratios[2] > 4


def test_the_codec_module_counts_bytes_and_passes_gradients_straight_through() -> None:
    pooled = torch.randn(32, 4, 8, requires_grad=True)
    half = CommCodec(CommConfig(codec="fp16"))
    out = half(pooled)
    out.sum().backward()
    assert torch.equal(pooled.grad, torch.ones_like(pooled))
    assert half.stats.wire_bytes * 2 == half.stats.raw_bytes == pooled.numel() * 4
    lossy = CommCodec(CommConfig(codec="lossy", error_bound=0.01), total_steps=10)
    assert lossy.scale() == pytest.approx(2.0)
    lossy(pooled)
    lossy.step = 9
    assert lossy.scale() == pytest.approx(0.5)  # iteration-wise: the bound shrinks
    figures = lossy.figures()
    assert figures["comm_compression_ratio"] > 1
    assert figures["comm_max_bound_excess"] <= 1e-6


def test_a_run_with_the_lossy_codec_reports_its_payload_and_stays_close() -> None:
    plain = execute(tiny_config())
    coded = execute(tiny_config(overrides=["comm.codec=lossy", "comm.error_bound=0.01"]))
    assert "comm_wire_bytes" not in plain.metrics
    m = coded.metrics
    assert m["comm_raw_bytes"] > m["comm_wire_bytes"] > 0
    assert m["comm_compression_ratio"] == pytest.approx(m["comm_raw_bytes"] / m["comm_wire_bytes"])
    assert abs(m["test_auc"] - plain.metrics["test_auc"]) < 0.02
    assert coded.config_hash != plain.config_hash
    # no codec leaves the config's identity (and so every earlier hash) unchanged
    assert "comm" not in tiny_config().identity()
