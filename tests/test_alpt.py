"""ALPT: the LSQ quantizer and its step-size gradient worked out by hand, stochastic
rounding's expectation, packed codes, exact bytes, one update by hand, checkpoints and
bit-identical reruns."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from suite.data.loader import BatchLoader
from suite.data.source import get_prepared
from suite.embeddings.alpt import (
    ALPTEmbedding,
    ALPTOptions,
    lsq_gradient_scale,
    lsq_quantize,
    lsq_step_derivative,
    pack_codes,
    stochastic_round,
    unpack_codes,
)
from suite.embeddings.base import EmbeddingContext
from suite.engine.build import build_model
from suite.engine.train import make_dense_optimizer, train_step
from suite.registry import EMBEDDINGS
from tests.conftest import restored_at_step_12, tiny_config

CPU = torch.device("cpu")
# step 0.5 (exact in binary): v = w / 0.5 = [3, -2.6, 0.4, 2.5, -2.5, 10, -10]
W = torch.tensor([1.5, -1.3, 0.2, 1.25, -1.25, 5.0, -5.0])


def alpt(
    optimizer: str = "rowwise_adagrad", lr: float = 0.5, seed: int = 0, **options
) -> ALPTEmbedding:
    """Cardinalities [5, 7] (12 rows), dim 4 unless ``options`` say otherwise."""
    opts = ALPTOptions(**{"dim": 4, **options})
    context = EmbeddingContext([5, 7], CPU, seed=seed, sparse_optimizer=optimizer, sparse_lr=lr)  # type: ignore[arg-type]
    return ALPTEmbedding(opts, context)


def test_quantizer_clips_and_rounds_half_up() -> None:
    """4 bits: codes [-8, 7]. v = [3, -2.6, 0.4, 2.5, -2.5, 10, -10] clips to
    [3, -2.6, 0.4, 2.5, -2.5, 7, -8] and rounds (floor(v + 0.5)) to [3, -3, 0, 3, -2, 7, -8]."""
    q = lsq_quantize(W, torch.tensor(0.5), bits=4)
    assert q.tolist() == [1.5, -1.5, 0.0, 1.5, -1.0, 3.5, -4.0]
    # 8 bits: codes [-128, 127]; nothing clips, and v = 10 stays 10
    q8 = lsq_quantize(W, torch.tensor(0.5), bits=8)
    assert q8.tolist() == [1.5, -1.5, 0.0, 1.5, -1.0, 5.0, -5.0]


def test_step_derivative_is_lsq() -> None:
    """dQ/dΔ = round(v) - v inside, -Q_n / Q_p at the bounds:
    [3 - 3, -3 + 2.6, 0 - 0.4, 3 - 2.5, -2 + 2.5, 7, -8]."""
    d = lsq_step_derivative(W, torch.tensor(0.5), bits=4)
    torch.testing.assert_close(d, torch.tensor([0.0, -0.4, -0.4, 0.5, 0.5, 7.0, -8.0]))
    # between rounding jumps Q = round(v) Δ has slope round(v) = 3 in Δ (v = 2.6); the STE
    # adds -v (it passes d round(v) / dv = 1): 3 - 2.6 = 0.4
    w, step, eps = torch.tensor([1.3]), 0.5, 1e-3
    slope = lsq_quantize(w, torch.tensor(step + eps), 4) - lsq_quantize(w, torch.tensor(step), 4)
    assert slope.item() / eps == pytest.approx(3.0, rel=1e-3)
    assert lsq_step_derivative(w, torch.tensor(step), 4).item() == pytest.approx(0.4, abs=1e-6)
    # LSQ's gradient scale 1 / sqrt(N Q_p): N = 1 x 2, Q_p = 7 -> 1 / sqrt(14)
    assert lsq_gradient_scale(2, 4) == pytest.approx(1 / math.sqrt(14))
    assert lsq_gradient_scale(128 * 16, 8) == pytest.approx(1 / math.sqrt(128 * 16 * 127))


def test_one_update_by_hand() -> None:
    """SGD, lr 0.5, step_lr 0.1, 4 bits, round to nearest. Row 1 (feature 0, id 1) holds
    codes [2, -3] at Δ = 0.5, so w = [1.0, -1.5]; its gradient g = [0.4, -0.2]:

    w' = w - 0.5 g = [0.8, -1.4]; v = w' / 0.5 = [1.6, -2.8]; dQ/dΔ = [0.4, -0.2];
    g_Δ = (0.4 * 0.4 + (-0.2) * (-0.2)) / sqrt(B D Q_p) = 0.2 / sqrt(1 * 2 * 7);
    Δ' = 0.5 - 0.1 g_Δ = 0.494655; codes = round(w' / Δ') = round([1.617, -2.830]) = [2, -3].
    """
    emb = alpt("sgd", lr=0.5, dim=2, bits=4, step_lr=0.1, stochastic=False)
    emb.codes[1] = pack_codes(torch.tensor([[2.0, -3.0]]), 4)[0]
    emb.step[1] = 0.5
    before = emb.codes.clone(), emb.step.clone()
    emb.train()
    out = emb(torch.tensor([[1, 0]]))
    torch.testing.assert_close(out[0, 0], torch.tensor([1.0, -1.5]))
    out.backward(torch.tensor([[[0.4, -0.2], [0.0, 0.0]]]))
    emb.after_step(1)
    expected_step = 0.5 - 0.1 * 0.2 / math.sqrt(14)
    assert emb.step[1].item() == pytest.approx(expected_step, rel=1e-6)
    assert unpack_codes(emb.codes[1:2], 4, 2).tolist() == [[2.0, -3.0]]
    # row 5 (feature 1, id 0) was read with a zero gradient: its step and codes hold
    assert emb.step[5] == before[1][5] and torch.equal(emb.codes[5], before[0][5])
    # rows not read are untouched
    untouched = [r for r in range(12) if r not in (1, 5)]
    assert torch.equal(emb.codes[untouched], before[0][untouched])


def test_stochastic_rounding_is_unbiased_and_seeded() -> None:
    x = torch.tensor([0.25, -1.7, 3.0, 2.5]).repeat(20_000, 1)
    draws = stochastic_round(x, torch.Generator().manual_seed(7))
    assert set(draws[:, 0].tolist()) == {0.0, 1.0} and set(draws[:, 1].tolist()) == {-2.0, -1.0}
    assert (draws[:, 2] == 3.0).all()  # an integer never moves
    torch.testing.assert_close(draws.mean(dim=0), x[0], atol=0.01, rtol=0)
    again = stochastic_round(x, torch.Generator().manual_seed(7))
    assert torch.equal(draws, again)
    assert not torch.equal(draws, stochastic_round(x, torch.Generator().manual_seed(8)))


def test_codes_are_packed_into_bytes() -> None:
    """4 bits: codes offset by 8, two a byte, the first in the low nibble:
    [-8, 7] -> [0, 15] -> 0 | 15 << 4 = 240; [1, -2] -> [9, 6] -> 9 | 6 << 4 = 105.
    2 bits: offset by 2, four a byte: [-2, -1, 0, 1] -> [0, 1, 2, 3] -> 0 | 4 | 32 | 192."""
    codes = torch.tensor([[-8.0, 7.0, 1.0, -2.0]])
    packed = pack_codes(codes, 4)
    assert packed.dtype == torch.uint8 and packed.tolist() == [[240, 105]]
    assert torch.equal(unpack_codes(packed, 4, 4), codes)
    two = pack_codes(torch.tensor([[-2.0, -1.0, 0.0, 1.0, 1.0]]), 2)
    assert two.tolist() == [[228, 3]]  # the fifth code alone in a second byte
    assert unpack_codes(two, 2, 5).tolist() == [[-2.0, -1.0, 0.0, 1.0, 1.0]]
    assert pack_codes(torch.tensor([[-128.0, 127.0]]), 8).dtype == torch.int8


def test_bytes_are_codes_steps_offsets_and_optimizer_state() -> None:
    """12 rows, dim 4. int8: codes 12 x 4 = 48 B, steps 12 x 4 = 48 B, offsets [2] int64 =
    16 B; row-wise Adagrad 12 floats + one accumulator per step 12 floats = 96 B."""
    cases = [
        ({}, "rowwise_adagrad", (96, 16, 96)),
        ({"bits": 4}, "rowwise_adagrad", (24 + 48, 16, 96)),  # 2 bytes a row
        ({"bits": 4, "dim": 5}, "rowwise_adagrad", (36 + 48, 16, 96)),  # ceil(5 / 2) = 3
        ({"bits": 2}, "sgd", (12 + 48, 16, 0)),
        ({}, "adagrad", (96, 16, 12 * 4 * 4 + 48)),
        ({"per": "table"}, "rowwise_adagrad", (48 + 8, 16, 48 + 8)),  # two steps
        ({"learn_step": False}, "rowwise_adagrad", (96, 16, 48)),  # LPT: no step state
    ]
    for options, optimizer, expected in cases:
        emb = alpt(optimizer, **options)
        memory = emb.memory()
        assert (memory.parameters, memory.auxiliary, memory.optimizer) == expected, options
        tensors = emb.storage_tensors()
        assert memory.total == sum(t.nbytes for v in tensors.values() for t in v)
    assert alpt().codes.dtype == torch.int8 and alpt(bits=4).codes.dtype == torch.uint8


def test_init_spans_the_codes_and_steps_follow_the_options() -> None:
    emb = alpt(bits=8)
    # feature 0 (n = 5): Δ = sqrt(1/5) / 127; feature 1 (n = 7): sqrt(1/7) / 127
    torch.testing.assert_close(emb.step[:5], torch.full((5,), math.sqrt(1 / 5) / 127))
    torch.testing.assert_close(emb.step[5:], torch.full((7,), math.sqrt(1 / 7) / 127))
    with torch.no_grad():
        values = emb(torch.tensor([[0, 0], [4, 6]]))
    assert values.abs().max().item() <= math.sqrt(1 / 5) + 1e-6
    assert torch.equal(alpt(step_init=0.01).step, torch.full((12,), 0.01))
    table = alpt(per="table", step_init=0.02)
    assert table.step.tolist() == pytest.approx([0.02, 0.02])
    with pytest.raises(ValidationError, match="bits"):
        ALPTOptions(bits=3)
    with pytest.raises(ValidationError, match="step_lr"):
        ALPTOptions(step_lr=0)
    assert ALPTOptions(dim=6, backend="fbgemm").dim == 6  # no fbgemm dim rule


def test_registered_with_its_paper() -> None:
    entry = EMBEDDINGS.entry("alpt")
    assert entry.obj is ALPTEmbedding
    assert "2212.05735" in entry.description


def _train_steps(seed: int, steps: int, data) -> torch.Tensor:
    config = tiny_config(embedding="alpt", overrides=[f"seed={seed}"])
    model = build_model(config, data)
    model.train()
    dense_opt = make_dense_optimizer(model.dense_parameters(), config.train)
    loader = iter(BatchLoader(data.split("train"), 64))
    for step in range(1, steps + 1):
        train_step(model, next(loader), dense_opt, step)
    model.eval()
    with torch.no_grad():
        batch = next(loader)
        return model(batch.dense, batch.sparse)


def test_rerun_with_one_seed_is_bit_identical() -> None:
    data = get_prepared(tiny_config().dataset, progress=False)
    first, second = _train_steps(3, 5, data), _train_steps(3, 5, data)
    assert torch.equal(first, second)
    assert not torch.equal(first, _train_steps(4, 5, data))


def test_training_moves_codes_steps_and_state() -> None:
    """Five steps of the owned update: codes, step sizes and both accumulators change."""
    emb = alpt(step_lr=1e-3)
    start = {k: v.clone() for k, v in emb.checkpoint_state().items()}
    gen = torch.Generator().manual_seed(0)
    for step in range(1, 6):
        emb.train()
        out = emb(torch.tensor([[0, 1], [2, 6], [4, 3]]))
        out.backward(torch.randn(out.shape, generator=gen))
        emb.after_step(step)
    for name in ("codes", "step", "row_state", "step_state", "generator"):
        assert not torch.equal(emb.checkpoint_state()[name], start[name]), name
    lpt = alpt(learn_step=False)  # LPT: the same update with the step sizes held
    steps, codes = lpt.step.clone(), lpt.codes.clone()
    lpt.train()
    out = lpt(torch.tensor([[0, 1]]))
    out.backward(torch.ones_like(out))
    lpt.after_step(1)
    assert torch.equal(lpt.step, steps) and not torch.equal(lpt.codes, codes)


@pytest.mark.parametrize("incremental", [False, True])
def test_checkpoint_round_trip(tmp_path: Path, incremental: bool) -> None:
    """The step-12 checkpoint restored into a fresh model equals the model trained to 12
    steps, bit for bit: codes, steps, both optimizers' state and the rounding generator."""
    config = tiny_config(embedding="alpt", overrides=["train.max_steps=14"])
    reference, restored = restored_at_step_12(tmp_path, config, incremental)
    expected = reference.embedding.checkpoint_state()
    got = restored.embedding.checkpoint_state()
    names = {"offsets", "step", "codes", "row_state", "step_state", "generator"}
    assert set(got) == names == set(expected)
    for name, value in expected.items():
        assert torch.equal(got[name], value), name
    # the restored generator draws what the reference's draws next
    assert torch.equal(
        torch.rand(8, generator=restored.embedding.generator),
        torch.rand(8, generator=reference.embedding.generator),
    )
