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
from suite.data.synthetic_dataset import SyntheticOptions
from suite.data.teacher import scaled_cardinalities
from suite.datasets.criteo import CRITEO_CARDINALITIES
from suite.embeddings.base import ComposedEmbedding, EmbeddingContext, EmbeddingOptions
from suite.embeddings.full import FullEmbedding
from suite.embeddings.hashing import HashEmbedding, HashOptions, hashed_rows
from suite.embeddings.mixed_dim import (
    MixedDimEmbedding,
    MixedDimOptions,
    md_dims,
    rows_per_query,
)
from suite.embeddings.qr import QREmbedding, QROptions
from suite.embeddings.quantize import quantizable_methods
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
    # the embedding owns its sparse optimizer (fused kernel or torch), state included;
    # storage that is all dense parameters (dhe's network) has the dense optimizer's state
    assert memory.optimizer == sum(t.nbytes for t in tensors["optimizer"])
    dense = {id(p) for p in model.dense_parameters()}
    assert memory.optimizer > 0 or all(id(t) in dense for t in tensors["parameters"])
    if emb.sparse_parameters():
        # tables off the kernel: the tables' own torch optimizer holds their share
        assert isinstance(emb.tables.optimizer, RowwiseAdagrad)
        assert 0 < emb.tables.optimizer.state_bytes() <= memory.optimizer
    if isinstance(emb, ComposedEmbedding):  # no storage counted twice, none missed
        full_floats = sum(w.numel() for w in emb.tables.weights())
        assert sum(t.numel() for t in tensors["parameters"]) >= full_floats


def test_compressed_methods_are_smaller_than_full(tiny_data) -> None:
    sizes = {  # the methods over plain tables (every ComposedEmbedding)
        name: build_model(tiny_config(embedding=name), tiny_data).embedding.memory().parameters
        for name in quantizable_methods()
    }
    assert all(sizes[name] < sizes["full"] for name in sizes if name != "full")


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


def test_md_dims_equal_the_reference_md_solver_by_hand() -> None:
    """Values worked out by hand from the reference's ``md_solver``/``alpha_power_rule``:
    ``lambda = d0 * n_min ** alpha``; ``d = max(1, lambda * n ** -alpha)`` rounded, the
    smallest table gets ``d0``; ``pow_2_round`` is ``2 ** round(log2 d)``."""
    rows = [3, 150, 300, 700, 1000, 2500, 5000, 50_000, 2_000_000]
    # alpha 0.3, d0 16: lambda = 16 * 3 ** 0.3 = 16 * 1.390389 = 22.24623
    #   n=150:  150 ** 0.3 = 4.49590  -> 4.948  (below the threshold: keeps 16)
    #   n=300:  300 ** 0.3 = 5.53541  -> 4.019  -> 4  (pow2: 4)
    #   n=700:  700 ** 0.3 = 7.13782  -> 3.117  -> 3  (pow2: log2 3 = 1.58 -> 4)
    #   n=1000: 1000 ** 0.3 = 7.94328 -> 2.801  -> 3  (pow2: 4)
    #   n=2500: 2500 ** 0.3 = 10.4564 -> 2.128  -> 2  (pow2: 2)
    #   n=5000: 5000 ** 0.3 = 12.8726 -> 1.728  -> 2  (pow2: 2)
    #   n=5e4:  5e4 ** 0.3 = 25.6852  -> 0.866  -> 1 (the floor)
    #   n=2e6:  -> 0.28 -> 1
    assert md_dims(rows, 0.3, 16) == [16, 16, 4, 3, 3, 2, 2, 1, 1]
    assert md_dims(rows, 0.3, 16, round_dims=True) == [16, 16, 4, 4, 4, 2, 2, 1, 1]
    # threshold 0: the solver's own dim for n=150 (4.948 -> 5; pow2: log2 5 = 2.32 -> 4)
    assert md_dims(rows, 0.3, 16, threshold=0)[:2] == [16, 5]
    assert md_dims(rows, 0.3, 16, threshold=0, round_dims=True)[:2] == [16, 4]
    # alpha 0.5: lambda = 16 * sqrt(3) = 27.7128; n=300: 27.7128 / 17.3205 = 1.600 -> 2;
    # n=1000: 27.7128 / 31.6228 = 0.876 -> 1
    half = md_dims(rows, 0.5, 16)
    assert half[2] == 2 and half[4] == 1
    assert md_dims(rows, 0.0, 16) == [16] * len(rows)
    assert md_dims(rows, 0.3, 16, min_dim=2) == [16, 16, 4, 3, 3, 2, 2, 2, 2]
    # the order of the tables does not matter (the solver sorts and unsorts)
    assert md_dims(rows[::-1], 0.3, 16) == md_dims(rows, 0.3, 16)[::-1]


def test_md_embedding_takes_the_solver_dims_and_never_widens() -> None:
    rows = [3, 150, 300, 700, 1000, 2500, 5000, 50_000, 2_000_000]
    for backend in ("fbgemm", "torch"):
        emb = MixedDimEmbedding(MixedDimOptions(alpha=0.3, dim=16, backend=backend), context(rows))
        assert emb.dims == md_dims(rows, 0.3, 16)
        by_rows = {w.shape[0]: w.shape[1] for w in emb.tables.weights()}
        assert [by_rows[n] for n in rows] == emb.dims  # every table at its own dim
        layout = emb.layout()
        assert layout["feature_dims"] == emb.dims and layout["feature_rows"] == rows
        expected = ["fbgemm" if d % 4 == 0 and backend == "fbgemm" else "torch" for d in emb.dims]
        assert layout["feature_backends"] == expected


def test_md_popularity_from_counts() -> None:
    cards = [10, 100, 1000, 4]
    counts = [
        np.full(10, 100),  # 1000 reads over the 10 ids: one read per example
        np.r_[np.full(50, 20), np.zeros(50)],  # 50 ids seen
        np.r_[np.full(500, 2), np.zeros(500)],  # 500 ids seen
        np.full(4, 500),  # two reads per example (2000 reads)
    ]
    counts = [c.astype(np.int64) for c in counts]
    # n / k with n the ids seen and k the reads per example (reads / 2000)
    np.testing.assert_allclose(rows_per_query(cards, counts), [20, 100, 1000, 4])
    np.testing.assert_allclose(rows_per_query(cards), cards)  # the reference's default k = 1
    options = MixedDimOptions(alpha=0.5, dim=16, threshold=0, popularity="counts", backend="torch")
    emb = MixedDimEmbedding(options, context(cards, counts=counts))
    # lambda = 16 * 4 ** 0.5 = 32: 32 / sqrt(20) = 7.16 -> 7; 32 / 10 = 3.2 -> 3; 32 / 31.6 -> 1
    assert emb.dims == [7, 3, 1, 16]
    rows_only = MixedDimEmbedding(options.model_copy(update={"popularity": "rows"}), context(cards))
    assert rows_only.dims == md_dims(cards, 0.5, 16, threshold=0)


def test_md_bytes_far_below_uniform_dim_4_on_criteo_synth() -> None:
    synth = SyntheticOptions()
    cards = scaled_cardinalities(CRITEO_CARDINALITIES, synth.vocab_scale, synth.keep_below)
    md = MixedDimEmbedding(MixedDimOptions(dim=16, alpha=0.3), context(cards)).memory()
    uniform4 = FullEmbedding(EmbeddingOptions(dim=4), context(cards)).memory()
    full = FullEmbedding(EmbeddingOptions(dim=16), context(cards)).memory()
    assert md.parameters < 0.4 * uniform4.parameters
    assert md.parameters < 0.1 * full.parameters
    # and on the real Criteo Kaggle sizes, the reference's ~6% of full (dims 1-2 for big tables)
    dims = md_dims(CRITEO_CARDINALITIES, 0.3, 16)
    ratio = sum(n * d for n, d in zip(CRITEO_CARDINALITIES, dims, strict=True)) / (
        16 * sum(CRITEO_CARDINALITIES)
    )
    assert 0.05 < ratio < 0.07


def test_alpha_rule_param_budget() -> None:
    cards = [10, 300, 1000, 5000]
    for budget in (7000, 20_000, 60_000, 200_000):
        dims = md_dims(cards, 0.3, 32, param_budget=budget)
        used = sum(n * d for n, d in zip(cards, dims, strict=True))
        assert used <= budget
        bigger = md_dims(cards, 0.3, 32, param_budget=int(used * 1.2) + 50)
        assert sum(n * d for n, d in zip(cards, bigger, strict=True)) >= used
    assert md_dims(cards, 0.3, 32, param_budget=10**9) == [32] * 4
    with pytest.raises(ConfigError, match="param_budget"):
        md_dims(cards, 0.3, 32, param_budget=100)


@pytest.mark.parametrize("backend", ["fbgemm", "torch"])
def test_mixed_dim_lookup_is_table_row_times_projection(backend: str) -> None:
    cards = [8, 30, 100_000]
    options = MixedDimOptions(alpha=0.3, dim=16, threshold=0, backend=backend)
    emb = MixedDimEmbedding(options, context(cards))
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
