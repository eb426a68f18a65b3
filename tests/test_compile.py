"""``train.compile``: the Inductor-compiled backbone trains to the eager numbers."""

from __future__ import annotations

import pytest
import torch

from suite.data.loader import BatchLoader
from suite.data.source import get_prepared
from suite.engine.build import build_model
from suite.engine.train import make_dense_optimizer, train_step
from tests.conftest import tiny_config


def test_compile_is_in_the_identity_only_when_on() -> None:
    eager = tiny_config()
    assert "compile" not in eager.identity()["train"]  # hashes of earlier runs unchanged
    compiled = eager.with_overrides({"train.compile": True})
    assert compiled.identity()["train"]["compile"] is True
    assert compiled.config_hash() != eager.config_hash()


def test_compiled_backbone_keeps_eager_state_dict_keys() -> None:
    config = tiny_config(overrides=["train.compile=true"])
    data = get_prepared(config.dataset, progress=False)
    eager = build_model(config.with_overrides({"train.compile": False}), data)
    compiled = build_model(config, data)
    assert compiled.backbone._compiled_call_impl is not None
    assert eager.backbone._compiled_call_impl is None
    assert list(compiled.state_dict()) == list(eager.state_dict())


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_compiled_training_matches_eager(optimizer: str) -> None:
    """Same seed, same batches: losses and weights after 5 steps agree within float noise."""
    base = tiny_config(
        overrides=[
            "model.options.bottom_mlp=32-16",
            "model.options.top_mlp=32",
            f"train.dense_optimizer={optimizer}",
        ]
    )
    data = get_prepared(base.dataset, progress=False)
    runs = {}
    for compile_ in (False, True):
        config = base.with_overrides({"train.compile": compile_})
        model = build_model(config, data)
        dense_opt = make_dense_optimizer(model.dense_parameters(), config.train)
        loader = BatchLoader(data.split("train"), 128, shuffle=True, seed=0)
        losses = []
        for step, batch in enumerate(loader):
            losses.append(float(train_step(model, batch, dense_opt, step + 1).detach()))
            if step == 4:
                break
        runs[compile_] = (torch.tensor(losses), model.state_dict())
    (eager_loss, eager_state), (comp_loss, comp_state) = runs[False], runs[True]
    torch.testing.assert_close(comp_loss, eager_loss, rtol=1e-5, atol=1e-6)
    for key, value in eager_state.items():
        torch.testing.assert_close(comp_state[key], value, rtol=1e-4, atol=1e-5, msg=key)
