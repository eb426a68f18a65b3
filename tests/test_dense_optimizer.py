"""Adam and Adagrad run fused and follow the per-tensor loop's numbers."""

from __future__ import annotations

import pytest
import torch

from suite.config import TrainConfig
from suite.engine.train import make_dense_optimizer

REFERENCE = {"adam": torch.optim.Adam, "adagrad": torch.optim.Adagrad, "sgd": torch.optim.SGD}


def _params(seed: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    shapes = [(64, 13), (64,), (16, 64), (16,), (1, 16), (1,)]
    return [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]


@pytest.mark.parametrize("name", ["adam", "adagrad", "sgd"])
def test_fast_dense_optimizer_matches_the_loop(name: str) -> None:
    train = TrainConfig(dense_optimizer=name, dense_lr=0.01)
    fast_params, loop_params = _params(0), _params(0)
    fast = make_dense_optimizer(fast_params, train)
    loop = REFERENCE[name](loop_params, lr=0.01, foreach=False)
    assert fast is not None
    if name != "sgd":  # SGD keeps the loop: fused and foreach were no faster on CPU
        assert fast.defaults["fused"], "expected the fused optimizer"
    gen = torch.Generator().manual_seed(1)
    for _ in range(10):
        for a, b in zip(fast_params, loop_params, strict=True):
            a.grad = torch.randn(a.shape, generator=gen)
            b.grad = a.grad.clone()
        fast.step()
        loop.step()
    for a, b in zip(fast_params, loop_params, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
