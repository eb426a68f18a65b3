"""Embedding methods: each one's math against a naive reference, and the contract every
method x backbone x backend honours (shapes, gradient flow, honest memory)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from suite.data.loader import BatchLoader
from suite.data.source import get_prepared
from suite.embeddings.base import ComposedEmbedding, EmbeddingContext
from suite.embeddings.hashing import HashEmbedding, HashOptions, hashed_rows
from suite.embeddings.mixed_dim import (
    MixedDimEmbedding,
    MixedDimOptions,
    alpha_power_dims,
    feature_popularity,
)
from suite.embeddings.qr import QREmbedding, QROptions
from suite.embeddings.tables import RowwiseAdagrad
from suite.engine.build import build_model
from suite.engine.train import make_dense_optimizer, train_step
from suite.errors import ConfigError
from suite.registry import EMBEDDINGS, MODELS
from tests.conftest import tiny_config

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory):
    """The tiny criteo-synth dataset, prepared once for this module."""
    spec = tiny_config().dataset.model_copy(
        update={"cache_dir": str(tmp_path_factory.mktemp("prepared"))}
    )
    return get_prepared(spec, progress=False)


def first_batch(data, size: int = 64):
    return next(iter(BatchLoader(data.split("train"), size)))


def context(cards: list[int], seed: int = 0, counts=None) -> EmbeddingContext:
    return EmbeddingContext(
        cardinalities=cards,
        device=CPU,
        seed=seed,
        feature_counts=(lambda: counts) if counts is not None else None,
    )


def method_cases() -> list[tuple[str, str]]:
    """Every registered method; composed ones on both backends."""
    cases = []
    for name in EMBEDDINGS.names():
        composed = issubclass(EMBEDDINGS.get(name), ComposedEmbedding)
        cases += [(name, b) for b in (("fbgemm", "torch") if composed else ("fbgemm",))]
    return cases


# ------------------------------------------------------------------ contract, every method


@pytest.mark.parametrize("model_name", MODELS.names())
@pytest.mark.parametrize(("method", "backend"), method_cases())
def test_shape_and_gradient_flow(tiny_data, model_name: str, method: str, backend: str) -> None:
    config = tiny_config(
        model=model_name, embedding=method, overrides=[f"embedding.options.backend={backend}"]
    )
    model = build_model(config, tiny_data)
    batch = first_batch(tiny_data)
    schema = tiny_data.schema
    embedded = model.embedding(batch.sparse)
    assert embedded.shape == (len(batch), schema.num_sparse, model.embedding.dim)
    assert embedded.dtype == torch.float32

    model.eval()
    with torch.no_grad():
        before = model.embedding(batch.sparse).clone()
    dense_before = [p.detach().clone() for p in model.dense_parameters()]
    model.train()
    # one step exactly as suite.engine.train does it
    dense_opt = make_dense_optimizer(model.dense_parameters(), config.train)
    loss = train_step(model, batch, dense_opt, 1)
    assert torch.isfinite(loss)
    for p in model.dense_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()
    model.eval()
    with torch.no_grad():
        after = model.embedding(batch.sparse)
    # every looked-up vector moved (gradient reached the embedding storage)
    moved = (after - before).abs().amax(dim=2) > 0
    assert moved.float().mean() > 0.9, f"{method}: only {moved.float().mean():.2f} of lookups moved"
    assert any(
        not torch.equal(a, b) for a, b in zip(dense_before, model.dense_parameters(), strict=True)
    )


@pytest.mark.parametrize(("method", "backend"), method_cases())
def test_memory_equals_storage_tensors(tiny_data, method: str, backend: str) -> None:
    config = tiny_config(embedding=method, overrides=[f"embedding.options.backend={backend}"])
    model = build_model(config, tiny_data)
    emb = model.embedding
    memory, tensors = emb.memory(), emb.storage_tensors()
    assert set(tensors) == {"parameters", "auxiliary", "optimizer"}
    assert memory.parameters == sum(t.nbytes for t in tensors["parameters"]) > 0
    assert memory.auxiliary == sum(t.nbytes for t in tensors["auxiliary"])
    # the embedding owns its sparse optimizer (fused kernel or torch), state included
    assert memory.optimizer == sum(t.nbytes for t in tensors["optimizer"]) > 0
    if emb.sparse_parameters():
        assert isinstance(emb.tables.optimizer, RowwiseAdagrad)
        assert memory.optimizer == emb.tables.optimizer.state_bytes()
    if isinstance(emb, ComposedEmbedding):  # no storage counted twice, none missed
        full_floats = sum(w.numel() for w in emb.tables.weights())
        assert sum(t.numel() for t in tensors["parameters"]) >= full_floats


def test_compressed_methods_are_smaller_than_full(tiny_data) -> None:
    sizes = {
        name: build_model(tiny_config(embedding=name), tiny_data).embedding.memory().parameters
        for name in ("full", "hash", "qr", "mixed_dim")
    }
    assert all(sizes[name] < sizes["full"] for name in ("hash", "qr", "mixed_dim"))


# ------------------------------------------------------------------ hash


def test_hashed_rows_follow_ratio_rows_and_threshold() -> None:
    cards = [3, 200, 201, 1000, 10_001]
    assert hashed_rows(cards, HashOptions()) == [3, 200, 51, 250, 2501]
    assert hashed_rows(cards, HashOptions(ratio=10, threshold=0)) == [1, 20, 21, 100, 1001]
    assert hashed_rows(cards, HashOptions(rows=64)) == [3, 200, 64, 64, 64]


@pytest.mark.parametrize("backend", ["fbgemm", "torch"])
def test_hash_lookup_is_id_modulo_rows(backend: str) -> None:
    cards = [50, 500, 1234]
    options = HashOptions(ratio=7, threshold=100, dim=8, backend=backend)
    emb = HashEmbedding(options, context(cards, seed=3))
    weights = [w.detach() for w in emb.tables.weights()]
    assert [w.shape[0] for w in weights] == [50, math.ceil(500 / 7), math.ceil(1234 / 7)]
    gen = torch.Generator().manual_seed(0)
    sparse = torch.stack([torch.randint(0, n, (100,), generator=gen) for n in cards], dim=1)
    out = emb(sparse).detach()
    for f, w in enumerate(weights):
        expected = w[sparse[:, f] % w.shape[0]]
        torch.testing.assert_close(out[:, f], expected)


def test_fbgemm_dim_is_validated() -> None:
    with pytest.raises(ConfigError, match="dim"):
        tiny_config(embedding="hash", overrides=["embedding.options.dim=6"])
    tiny_config(
        embedding="hash", overrides=["embedding.options.dim=6", "embedding.options.backend=torch"]
    )
    with pytest.raises(ConfigError, match="divisible by 8"):
        tiny_config(
            embedding="qr",
            overrides=["embedding.options.operation=concat", "embedding.options.dim=12"],
        )


# ------------------------------------------------------------------ qr


@pytest.mark.parametrize("backend", ["fbgemm", "torch"])
@pytest.mark.parametrize("operation", ["mult", "add", "concat"])
def test_qr_equals_composition_of_two_plain_lookups(backend: str, operation: str) -> None:
    cards, c, dim = [30, 300, 1001], 7, 16
    options = QROptions(collisions=c, operation=operation, threshold=100, dim=dim, backend=backend)
    emb = QREmbedding(options, context(cards, seed=1))
    weights = [w.detach() for w in emb.tables.weights()]
    # feature 0 stays full; features 1 and 2 get a quotient and a remainder table
    half = (math.ceil(dim / 2), dim // 2) if operation == "concat" else (dim, dim)
    assert [tuple(w.shape) for w in weights] == [
        (30, dim),
        (math.ceil(300 / c), half[0]),
        (c, half[1]),
        (math.ceil(1001 / c), half[0]),
        (c, half[1]),
    ]
    gen = torch.Generator().manual_seed(2)
    sparse = torch.stack([torch.randint(0, n, (128,), generator=gen) for n in cards], dim=1)
    out = emb(sparse).detach()
    torch.testing.assert_close(out[:, 0], weights[0][sparse[:, 0]])
    for f, (q, r) in ((1, (1, 2)), (2, (3, 4))):
        a, b = weights[q][sparse[:, f] // c], weights[r][sparse[:, f] % c]
        expected = {"mult": a * b, "add": a + b, "concat": torch.cat([a, b], dim=1)}[operation]
        torch.testing.assert_close(out[:, f], expected)


@pytest.mark.parametrize("operation", ["mult", "concat", "add"])
def test_qr_distinct_ids_get_distinct_embeddings(operation: str) -> None:
    """Property: complementary partitions give every id its own vector (random cases)."""
    rng = random.Random(operation)
    for _ in range(25):
        n, c = rng.randint(2, 3000), rng.randint(1, 64)
        dim = rng.choice([8, 16, 32])
        options = QROptions(collisions=c, operation=operation, threshold=0, dim=dim)
        emb = QREmbedding(options, context([n], seed=rng.randint(0, 10**6)))
        with torch.no_grad():
            vectors = emb(torch.arange(n).unsqueeze(1))[:, 0]
        assert torch.unique(vectors, dim=0).shape[0] == n, (n, c, dim)


# ------------------------------------------------------------------ mixed dim


def test_alpha_rule_on_known_counts() -> None:
    cards = [10, 100, 1000, 4]
    counts = [
        np.full(10, 100),  # 1000 accesses over 10 rows: 100 per row
        np.r_[np.full(50, 20), np.zeros(50)],  # 1000 over the 50 rows seen: 20 per row
        np.r_[np.full(500, 2), np.zeros(500)],  # 2 per row
        np.full(4, 250),  # most popular: 250 per row
    ]
    popularity = feature_popularity(cards, [c.astype(np.int64) for c in counts])
    np.testing.assert_allclose(popularity, [100, 20, 2, 250])
    naive = [16 * (p / 250) ** 0.5 for p in popularity]  # d = D * (p / p_max) ** alpha
    assert [round(d, 2) for d in naive] == [10.12, 4.53, 1.43, 16.0]
    assert alpha_power_dims(popularity, 0.5, 16) == [10, 5, 1, 16]
    assert alpha_power_dims(popularity, 0.5, 16, round_dims=True) == [8, 4, 2, 16]
    assert alpha_power_dims(popularity, 0.5, 16, multiple=4) == [12, 4, 4, 16]  # nearest x4
    assert alpha_power_dims(popularity, 0.5, 16, min_dim=3) == [10, 5, 3, 16]
    assert alpha_power_dims(popularity, 0.0, 16) == [16, 16, 16, 16]

    options = MixedDimOptions(alpha=0.5, dim=16, backend="torch")
    emb = MixedDimEmbedding(options, context(cards, counts=[c.astype(np.int64) for c in counts]))
    assert emb.dims == [10, 5, 1, 16]
    assert sorted(w.shape[1] for w in emb.tables.weights()) == [1, 5, 10, 16]
    fbgemm = MixedDimEmbedding(
        MixedDimOptions(alpha=0.5, dim=16),
        context(cards, counts=[c.astype(np.int64) for c in counts]),
    )
    assert fbgemm.dims == [12, 4, 4, 16]


def test_alpha_rule_without_counts_uses_cardinality() -> None:
    cards = [4, 400, 40_000]
    emb = MixedDimEmbedding(MixedDimOptions(alpha=0.5, dim=16, backend="torch"), context(cards))
    # popularity 1 / n: d = 16 * (4 / n) ** 0.5
    assert emb.dims == [16, round(16 * 0.1), max(1, round(16 * 0.01))]


def test_alpha_rule_param_budget() -> None:
    cards = [10, 100, 1000, 5000]
    pop = feature_popularity(cards)
    for budget in (7000, 20_000, 60_000, 200_000):
        dims = alpha_power_dims(pop, 0.3, 32, rows=cards, param_budget=budget)
        used = sum(n * d for n, d in zip(cards, dims, strict=True))
        assert used <= budget
        bigger = alpha_power_dims(pop, 0.3, 32, rows=cards, param_budget=int(used * 1.2) + 50)
        assert sum(n * d for n, d in zip(cards, bigger, strict=True)) >= used
    assert alpha_power_dims(pop, 0.3, 32, rows=cards, param_budget=10**9) == [32] * 4
    with pytest.raises(ConfigError, match="param_budget"):
        alpha_power_dims(pop, 0.3, 32, rows=cards, param_budget=100)


@pytest.mark.parametrize("backend", ["fbgemm", "torch"])
def test_mixed_dim_lookup_is_table_row_times_projection(backend: str) -> None:
    cards = [8, 30, 100_000]
    emb = MixedDimEmbedding(MixedDimOptions(alpha=0.3, dim=16, backend=backend), context(cards))
    assert emb.dims[0] == 16 and emb.dims[2] < emb.dims[1] < 16
    by_dim = {w.shape[0]: w.detach() for w in emb.tables.weights()}  # rows are distinct here
    gen = torch.Generator().manual_seed(5)
    sparse = torch.stack([torch.randint(0, n, (64,), generator=gen) for n in cards], dim=1)
    out = emb(sparse).detach()
    projections = iter(emb.combine.projections)  # groups in descending dim order
    torch.testing.assert_close(out[:, 0], by_dim[8][sparse[:, 0]])
    for f in (1, 2):
        expected = by_dim[cards[f]][sparse[:, f]] @ next(projections).detach()[0]
        torch.testing.assert_close(out[:, f], expected)
    assert emb.flops_per_example() == 2 * 16 * (emb.dims[1] + emb.dims[2])
    # projections are dense parameters: the dense optimizer sees them
    assert all(p.requires_grad for p in emb.combine.projections)
