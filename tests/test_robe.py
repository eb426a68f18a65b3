"""ROBE-Z: hashed block offsets worked out by hand, the circular array, honest bytes, the
owned sparse update, checkpoints, and a short training run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from suite.embeddings.base import EmbeddingContext
from suite.embeddings.robe import (
    ROBE_PRIME,
    RobeEmbedding,
    RobeOptions,
    robe_array_size,
    robe_coefficients,
    robe_slots,
)
from suite.runs.single import execute
from tests.conftest import restored_at_step_12, tiny_config

CPU = torch.device("cpu")
# A = 3, B = 5, C = 7, P = 11: small enough to hash by hand
HAND = torch.tensor([3, 5, 7, 11])


def robe(optimizer: str = "rowwise_adagrad", lr: float = 0.5, **options) -> RobeEmbedding:
    """Cardinalities [5, 7], dim 4, Z = 2, |M| = ceil(0.2 * 12 * 4) = 10, hand hash."""
    opts = RobeOptions(**{"dim": 4, "block": 2, "size": 0.2, **options})
    context = EmbeddingContext(
        [5, 7],
        CPU,
        seed=0,
        sparse_optimizer=optimizer,
        sparse_lr=lr,  # type: ignore[arg-type]
    )
    emb = RobeEmbedding(opts, context)
    emb.coefficients.copy_(HAND)
    return emb


def test_block_offsets_by_hand() -> None:
    """``slot = (((3 key + 5 j + 7) mod 11) mod 10 + i mod 2) mod 10``, ``j = i // 2``:

    key 2: j=0: 13 mod 11 = 2 -> 2, 3;  j=1: 18 mod 11 = 7 -> 7, 8
    key 9: j=0: 34 mod 11 = 1 -> 1, 2;  j=1: 39 mod 11 = 6 -> 6, 7
    key 8: j=0: 31 mod 11 = 9 -> 9, 0 (the block wraps);  j=1: 36 mod 11 = 3 -> 3, 4
    key 1: j=0: 10 mod 11 = 10, mod 10 = 0 -> 0, 1;  j=1: 15 mod 11 = 4 -> 4, 5
    """
    slots = robe_slots(torch.tensor([2, 9, 8, 1]), dim=4, block=2, size=10, coefficients=HAND)
    assert slots.tolist() == [[2, 3, 7, 8], [1, 2, 6, 7], [9, 0, 3, 4], [0, 1, 4, 5]]


def test_lookup_reads_the_array_at_the_feature_offset_keys() -> None:
    emb = robe()
    assert emb.size == 10 and emb.offsets.tolist() == [0, 5]
    # (feature 0, id 2) -> key 2; (feature 1, id 4) -> key 9; (1, 3) -> 8; (0, 1) -> 1
    sparse = torch.tensor([[2, 4], [1, 3]])
    out = emb(sparse)
    expected = [[[2, 3, 7, 8], [1, 2, 6, 7]], [[0, 1, 4, 5], [9, 0, 3, 4]]]
    assert torch.equal(out, emb.array[torch.tensor(expected)])
    # one array for all features: every value is one of its 10
    assert set(out.flatten().tolist()) <= set(emb.array.tolist())


def test_bytes_are_the_array_offsets_hash_and_optimizer_state() -> None:
    """10 float32 values = 40 B; offsets [2] + coefficients [4] int64 = 48 B; row-wise
    Adagrad: one float per aligned run of Z=2 values, ceil(10/2) = 5 floats = 20 B."""
    for optimizer, state in (("rowwise_adagrad", 20), ("adagrad", 40), ("sgd", 0)):
        memory = robe(optimizer).memory()
        assert (memory.parameters, memory.auxiliary, memory.optimizer) == (40, 48, state)


def test_array_size_is_a_fraction_of_full_parameters() -> None:
    cards = [1000, 30, 7]
    assert robe_array_size(cards, 16, RobeOptions(size=0.25)) == 4148  # ceil(1037*16/4)
    assert robe_array_size(cards, 16, RobeOptions(size=1e-9, block=8)) == 8  # one block
    assert robe_array_size([10**6] * 4, 128, RobeOptions(size=0.001, dim=128)) == 512_000


def test_hash_coefficients_follow_the_seed() -> None:
    a, b, c, p = robe_coefficients(3).tolist()
    assert p == ROBE_PRIME and 1 <= a < p and 0 <= b < p and 0 <= c < p
    assert torch.equal(robe_coefficients(3), robe_coefficients(3))
    assert not torch.equal(robe_coefficients(3), robe_coefficients(4))
    context = EmbeddingContext([5, 7], CPU, seed=9)
    assert torch.equal(RobeEmbedding(RobeOptions(), context).coefficients, robe_coefficients(9))
    fixed = RobeEmbedding(RobeOptions(seed=3), context)
    assert torch.equal(fixed.coefficients, robe_coefficients(3))


def _step(emb: RobeEmbedding, sparse: torch.Tensor, grad: torch.Tensor) -> None:
    emb.train()
    out = emb(sparse)
    out.backward(grad)
    emb.after_step(1)


def test_sgd_and_adagrad_update_the_summed_gradient_of_each_slot() -> None:
    """Keys 2 and 9 share slot 2 (and 7): its gradient is the sum of both reads."""
    sparse = torch.tensor([[2, 4]])  # slots [2, 3, 7, 8] and [1, 2, 6, 7]
    grad = torch.tensor([[[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]]])
    summed = torch.zeros(10)
    summed[[2, 3, 7, 8]] += grad[0, 0]
    summed[[1, 2, 6, 7]] += grad[0, 1]
    assert summed.tolist() == [0, 10, 21, 2, 0, 0, 30, 43, 4, 0]

    emb = robe("sgd", lr=0.5)
    before = emb.array.clone()
    _step(emb, sparse, grad)
    assert torch.allclose(emb.array, before - 0.5 * summed)

    emb = robe("adagrad", lr=0.5)
    before = emb.array.clone()
    _step(emb, sparse, grad)
    assert torch.allclose(emb.opt_state, summed**2)
    step = torch.where(summed != 0, 0.5 * torch.sign(summed), torch.zeros(10))
    assert torch.allclose(emb.array, before - step, atol=1e-6)  # g / sqrt(g^2) = sign


def test_rowwise_adagrad_keeps_one_accumulator_per_run_of_z_values() -> None:
    """Runs of Z=2: {0,1} {2,3} {4,5} {6,7} {8,9}; the state adds the mean squared
    gradient of each run: (0+100)/2, (441+4)/2, 0, (900+1849)/2, (16+0)/2."""
    emb = robe("rowwise_adagrad", lr=0.5)
    before = emb.array.clone()
    grad = torch.tensor([[[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]]])
    _step(emb, torch.tensor([[2, 4]]), grad)
    assert emb.opt_state.tolist() == [50.0, 222.5, 0.0, 1374.5, 8.0]
    summed = torch.tensor([0, 10, 21, 2, 0, 0, 30, 43, 4, 0], dtype=torch.float32)
    scale = (torch.tensor([50.0, 222.5, 0.0, 1374.5, 8.0]).sqrt() + 1e-8).repeat_interleave(2)
    assert torch.allclose(emb.array, before - 0.5 * summed / scale)


def test_bad_options_name_the_field() -> None:
    with pytest.raises(ValidationError, match="block"):
        RobeOptions(dim=4, block=8)
    with pytest.raises(ValidationError, match="size"):
        RobeOptions(size=2.0)
    assert RobeOptions(dim=6, backend="fbgemm").dim == 6  # no table, no fbgemm dim rule


def test_training_improves_auc_and_is_deterministic() -> None:
    config = tiny_config(embedding="robe", overrides=["seed=2"])
    first = execute(config).metrics
    assert first["val_auc"] > 0.55
    second = execute(config).metrics
    for name, value in first.items():
        if name != "train_samples_per_s":  # timing
            assert second[name] == value, name  # bit for bit on CPU


@pytest.mark.parametrize("incremental", [False, True])
def test_checkpoint_round_trip(tmp_path: Path, incremental: bool) -> None:
    """The step-12 checkpoint restored into a fresh model equals the model trained to 12
    steps: array, optimizer state, offsets and hash (no row groups: written whole)."""
    config = tiny_config(embedding="robe", overrides=["train.max_steps=14"])
    reference, restored = restored_at_step_12(tmp_path, config, incremental)
    expected = reference.embedding.checkpoint_state()
    got = restored.embedding.checkpoint_state()
    assert set(got) == {"offsets", "coefficients", "array", "opt_state"} == set(expected)
    for name, value in expected.items():
        assert torch.equal(got[name], value), name
    assert not torch.equal(expected["opt_state"], torch.zeros_like(expected["opt_state"]))
