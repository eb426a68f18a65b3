"""One training step is one call: the embedding owns its sparse optimizer."""

from __future__ import annotations

import pytest
import torch

from suite.data.loader import BatchLoader
from suite.data.source import get_prepared
from suite.engine.build import build_model
from suite.engine.train import make_dense_optimizer, train_step
from tests.conftest import tiny_config


@pytest.mark.parametrize(
    ("embedding", "overrides"),
    [
        ("full", ["embedding.options.backend=torch"]),
        ("full", ["embedding.options.backend=fbgemm"]),
        ("qr", ["embedding.options.backend=torch"]),
        ("fiited", []),
    ],
)
def test_train_step_alone_updates_the_embedding(embedding: str, overrides: list[str]) -> None:
    """``train_step`` applies the sparse update (torch tables' own optimizer, fbgemm's fused
    one, FIITED's) with nothing else called; the learning rate comes from the config once."""
    config = tiny_config(embedding=embedding, overrides=overrides)
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    batch = next(iter(BatchLoader(data.split("train"), 64)))
    model.eval()
    with torch.no_grad():
        before = model.embedding(batch.sparse).clone()
    model.train()
    train_step(model, batch, make_dense_optimizer(model.dense_parameters(), config.train), 1)
    model.eval()
    with torch.no_grad():
        after = model.embedding(batch.sparse)
    moved = (after - before).abs().amax(dim=2) > 0
    assert moved.float().mean() > 0.9
