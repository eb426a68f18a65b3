"""TT-Rec: factors and core shapes worked out by hand, a row as the explicit product of core
slices, the full matrix, the sampled-Gaussian init, the owned sparse update, honest bytes,
checkpoints, and a short training run."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from suite.data.source import get_prepared
from suite.embeddings.base import EmbeddingContext
from suite.embeddings.ttrec import (
    TTRecEmbedding,
    TTRecOptions,
    near_equal_factors,
    sampled_gaussian_scale,
    truncated_normal_variance,
    tt_lookup,
    tt_row_factors,
)
from suite.engine.build import build_model
from suite.runs.single import execute
from tests.conftest import restored_at_step_12, tiny_config

CPU = torch.device("cpu")


def ttrec(optimizer: str = "rowwise_adagrad", lr: float = 0.5, **options) -> TTRecEmbedding:
    """Cardinalities [1000, 7]: feature 0 in TT form (R=4, D=16), feature 1 full."""
    opts = TTRecOptions(**{"dim": 16, "rank": 4, "threshold": 10, **options})
    context = EmbeddingContext([1000, 7], CPU, seed=0, sparse_optimizer=optimizer, sparse_lr=lr)  # type: ignore[arg-type]
    return TTRecEmbedding(opts, context)


def test_factors_by_hand() -> None:
    """1000 = 2^3 5^3: of its groupings into three, 10 x 10 x 10 (entropy ln 3) is the most
    equal; 16 = 2^4 into three: only 2 x 2 x 4; 997 is prime (1 x 1 x 997, entropy ~0.016),
    rounded up to 1000 wins; 30 = 2 3 5; 7 (one prime) pads with ones; FBTT's README example
    11M rows (Terabyte) -> 200 x 220 x 250."""
    assert tt_row_factors(1000) == [10, 10, 10]
    assert near_equal_factors(16) == [2, 2, 4]
    assert tt_row_factors(997) == [10, 10, 10]
    assert tt_row_factors(997, round_up=False) == [1, 1, 997]
    assert near_equal_factors(30) == [2, 3, 5]
    assert near_equal_factors(7) == [1, 1, 7]
    assert near_equal_factors(64) == [4, 4, 4]  # beats 2 x 4 x 8 and 2 x 2 x 16
    assert tt_row_factors(11_000_000) == [200, 220, 250]
    # 201 = 3 x 67 -> 1 x 3 x 67 (0.30); 210 = 2 3 5 7 -> 5 x 6 x 7 (1.093) beats 300 -> 5 6 10
    assert tt_row_factors(201) == [5, 6, 7]


def test_core_shapes_and_parameter_count_by_hand() -> None:
    """n=1000 -> 10 x 10 x 10, D=16 -> 2 x 2 x 4, R=4: G1 [1,10,2,4] = 80, G2 [4,10,2,4] =
    320, G3 [4,10,4,1] = 160 floats: 560 (full: 16000); feature 1 (7 rows) is a full 7 x 16
    table: 112 floats. Bytes: (560 + 112) x 4 = 2688; index tensors [1] + [1] int64 = 16;
    row-wise Adagrad: one float per core slice (10 + 10 + 10) + one per full row (7) = 148."""
    emb = ttrec()
    shapes = [tuple(c.shape) for c in emb.cores.of(0)]
    assert shapes == [(1, 10, 2, 4), (4, 10, 2, 4), (4, 10, 4, 1)]
    assert sum(c.numel() for c in emb.cores.parameters()) == 560
    memory = emb.memory()
    assert (memory.parameters, memory.auxiliary, memory.optimizer) == (2688, 16, 148)
    adagrad = ttrec("adagrad")  # one accumulator per core value
    assert adagrad.memory().optimizer == 4 * 560 + adagrad.tables.optimizer_bytes()
    assert emb.layout()["tt_rows"] == {"0": [10, 10, 10]} and emb.layout()["full_features"] == [1]


def test_row_is_the_product_of_core_slices() -> None:
    """Row 437: digits 4, 3, 7; value (a, b, c) = sum_{r,s} G1[0,4,a,r] G2[r,3,b,s] G3[s,7,c,0]."""
    emb = ttrec()
    g1, g2, g3 = (c.detach().numpy().astype(np.float64) for c in emb.cores.of(0))
    expected = np.zeros((2, 2, 4))
    for a in range(2):
        for b in range(2):
            for c in range(4):
                for r in range(4):
                    for s in range(4):
                        expected[a, b, c] += g1[0, 4, a, r] * g2[r, 3, b, s] * g3[s, 7, c, 0]
    with torch.no_grad():
        out = emb(torch.tensor([[437, 5]]))
    np.testing.assert_allclose(out[0, 0].numpy(), expected.reshape(16), rtol=1e-5, atol=1e-7)
    table = emb.tables.weights()[0].detach()  # feature 1 stays a full table
    assert torch.equal(out[0, 1], table[5])


def test_full_matrix_matches_lookups() -> None:
    emb = ttrec()
    full = emb.full_matrix(0)
    assert full.shape == (1000, 16)
    ids = torch.arange(1000)
    with torch.no_grad():
        out = emb(torch.stack([ids, ids % 7], dim=1))
    torch.testing.assert_close(out[:, 0], full)


def test_sampled_gaussian_keeps_the_uniform_tables_variance() -> None:
    """An entry of the product has the variance 1/(3n) of U(±sqrt(1/n)) (n = 1000, R = 16):
    draws are truncated at ±2, so the core values all lie in ±2s."""
    v = truncated_normal_variance()
    assert v == pytest.approx(0.7737, abs=1e-4)
    s = sampled_gaussian_scale(1000, 16)
    assert 16**2 * (s * s * v) ** 3 == pytest.approx(1 / 3000)
    emb = ttrec(rank=16)
    for core in emb.cores.of(0):
        assert core.abs().max().item() <= 2 * s + 1e-7
        assert core.std().item() == pytest.approx(s * math.sqrt(v), rel=0.1)
    full = emb.full_matrix(0)
    assert full.var().item() == pytest.approx(1 / 3000, rel=0.25)
    uniform = ttrec(init="torch")  # cores uniform in ±sqrt(1/10)
    assert max(c.abs().max().item() for c in uniform.cores.of(0)) <= math.sqrt(0.1)


def _step(emb: TTRecEmbedding, sparse: torch.Tensor, grad: torch.Tensor) -> None:
    emb.train()
    emb(sparse).backward(grad)
    emb.after_step(1)


def test_sgd_and_adagrad_step_each_core_by_its_summed_gradient() -> None:
    sparse = torch.tensor([[437, 2], [431, 3]])  # rows 437 and 431 share slices 4 and 3
    grad = torch.randn(2, 2, 16, generator=torch.Generator().manual_seed(1))
    reference = ttrec("sgd")
    cores = [c.detach().clone().requires_grad_() for c in reference.cores.of(0)]
    tt_lookup(cores, sparse[:, 0], [10, 10, 10]).backward(grad[:, 0])
    for name, opt in (("sgd", None), ("adagrad", "adagrad"), ("rowwise_adagrad", "rowwise")):
        emb = ttrec(name)
        _step(emb, sparse, grad)
        for k, (core, start) in enumerate(zip(emb.cores.of(0), cores, strict=True)):
            g = start.grad
            if opt is None:
                expected = start - 0.5 * g
            elif opt == "adagrad":
                expected = start - 0.5 * g / (g.abs() + 1e-8)
            else:
                rows = g.pow(2).transpose(0, 1).reshape(10, -1).mean(dim=1)
                expected = start - 0.5 * g / (rows.sqrt() + 1e-8).view(1, -1, 1, 1)
            torch.testing.assert_close(core.detach(), expected.detach(), msg=f"{name} core {k}")
            assert core.grad is None
        untouched = [j for j in range(10) if j not in (4, 3)]  # G1's slices never read
        assert torch.equal(emb.cores.of(0)[0][:, untouched], reference.cores.of(0)[0][:, untouched])


def test_bad_options_name_the_field() -> None:
    with pytest.raises(ValidationError, match="rank"):
        TTRecOptions(rank=0)
    with pytest.raises(ValidationError, match="threshold"):
        TTRecOptions(threshold=-1)


def test_cores_are_not_the_dense_optimizers() -> None:
    config = tiny_config(embedding="ttrec")
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    cores = {id(p) for p in model.embedding.cores.parameters()}
    assert cores and not cores & {id(p) for p in model.dense_parameters()}
    assert model.embedding.tt_features  # the tiny data has features above the threshold
    d1, d2, d3 = model.embedding.dims
    per = 2 * (d1 * 16 * d2 * 16 + d1 * d2 * 16 * d3)
    assert model.embedding.flops_per_example() == per * len(model.embedding.tt_features)


def test_training_improves_auc_and_is_deterministic() -> None:
    config = tiny_config(embedding="ttrec", overrides=["seed=2"])
    first = execute(config).metrics
    assert first["val_auc"] > 0.55
    second = execute(config).metrics
    for name, value in first.items():
        if name != "train_samples_per_s":  # timing
            assert second[name] == value, name  # bit for bit on CPU


@pytest.mark.parametrize("incremental", [False, True])
def test_checkpoint_round_trip(tmp_path: Path, incremental: bool) -> None:
    """The step-12 checkpoint restored into a fresh model equals the model trained to 12
    steps: cores and their accumulators (whole), full tables (by row group)."""
    config = tiny_config(embedding="ttrec", overrides=["train.max_steps=14"])
    reference, restored = restored_at_step_12(tmp_path, config, incremental)
    expected = reference.embedding.checkpoint_state()
    got = restored.embedding.checkpoint_state()
    assert set(got) == set(expected)
    assert any(k.startswith("tt.") for k in got) and any(k.startswith("tables.") for k in got)
    for name, value in expected.items():
        # fbgemm's `iter` also counts evaluation forwards (as tests/test_checkpoint.py notes)
        if name != "tables.iter":
            assert torch.equal(got[name], value), name
    states = [v for k, v in expected.items() if k.startswith("tt_state.")]
    assert any(bool(s.abs().sum() > 0) for s in states)
