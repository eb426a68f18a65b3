"""FIITED: utility and optimizer math, the prefix rule, the slot pool and its free list,
regrowth, checkpoints, and pruning to a 10% budget during real training."""

from __future__ import annotations

import math

import pytest
import torch

from suite.data.source import get_prepared
from suite.embeddings.base import EmbeddingContext
from suite.embeddings.fiited import FiitedEmbedding, FiitedOptions
from suite.engine.build import build_model
from suite.engine.train import evaluate, train
from suite.errors import ConfigError
from tests.conftest import tiny_config

CPU = torch.device("cpu")


def make(cards: list[int], optimizer: str = "rowwise_adagrad", **options) -> FiitedEmbedding:
    context = EmbeddingContext(
        cardinalities=cards, device=CPU, seed=0, sparse_optimizer=optimizer, sparse_lr=0.1
    )
    return FiitedEmbedding(FiitedOptions(**options), context)


def check_storage(emb: FiitedEmbedding) -> None:
    """Slots of live chunks are distinct and in the pool; free slots are not live; every
    vector keeps a prefix."""
    live = emb.index >= 0
    slots = emb.index[live].long()
    assert len(torch.unique(slots)) == len(slots)
    assert slots.numel() == 0 or int(slots.max()) < emb.pool.shape[0]
    free = emb.free_slots.long()
    assert len(torch.unique(free)) == len(free)
    assert not torch.isin(free, slots).any()
    assert len(free) + len(slots) == emb.pool.shape[0]
    assert (live[:, 1:] <= live[:, :-1]).all(), "a vector kept a chunk after a pruned one"


def test_chunks_must_divide_dim() -> None:
    with pytest.raises(ConfigError, match="chunks"):
        tiny_config(embedding="fiited", overrides=["embedding.options.chunks=3"])


@pytest.mark.parametrize("optimizer", ["rowwise_adagrad", "adagrad", "sgd"])
def test_utility_and_update_match_naive(optimizer: str) -> None:
    emb = make([5, 7], optimizer, dim=8, chunks=2, decay=0.5, prune_every=10**6)
    pool0 = emb.pool.clone()
    sparse = torch.tensor([[1, 3], [1, 6], [4, 3]])  # row 1 of f0 and row 3 of f1 twice
    grads = []
    for step in (1, 2):
        out = emb(sparse)
        g = torch.randn(out.shape, generator=torch.Generator().manual_seed(step))
        out.backward(g)
        emb.after_step(step)
        grads.append(g)
    # naive utility: u <- gamma * u + sum over accesses of the chunk's gradient norm
    u = torch.zeros(12, 2)
    acc = torch.zeros(24) if optimizer == "rowwise_adagrad" else torch.zeros(24, 4)
    pool = pool0.clone()
    rows = sparse + torch.tensor([0, 5])
    for g in grads:
        u *= 0.5
        per = g.view(3, 2, 2, 4)
        summed = torch.zeros(24, 4)
        for b in range(3):
            for f in range(2):
                for k in range(2):
                    u[rows[b, f], k] += per[b, f, k].norm()
                    summed[rows[b, f] * 2 + k] += per[b, f, k]
        touched = summed.abs().sum(1) > 0
        if optimizer == "rowwise_adagrad":
            acc[touched] += summed[touched].pow(2).mean(1)
            pool[touched] -= 0.1 * summed[touched] / (acc[touched].sqrt()[:, None] + 1e-8)
        elif optimizer == "adagrad":
            acc[touched] += summed[touched].pow(2)
            pool[touched] -= 0.1 * summed[touched] / (acc[touched].sqrt() + 1e-8)
        else:
            pool[touched] -= 0.1 * summed[touched]
    stored = emb.utility * 0.5 ** (2 - int(emb.clock))  # lazy decay
    torch.testing.assert_close(stored, u)
    torch.testing.assert_close(emb.pool, pool)


def test_prune_keeps_prefixes_by_utility_and_reads_zeros() -> None:
    emb = make([4, 3], dim=8, chunks=4, budget=0.5, warmup_steps=0, prune_every=1)
    utility = torch.tensor(
        [
            [9.0, 8, 7, 6],
            [5, 0.1, 4, 4],
            [3, 3, 3, 3],
            [0, 9, 9, 9],  # feature 0
            [1, 1, 0, 0],
            [2, 2, 2, 2],
            [6, 6, 6, 0.5],  # feature 1
        ]
    )
    emb.utility.copy_(utility)
    emb.after_step(1)  # no pending gradient: prune only
    check_storage(emb)
    lengths = emb.vector_lengths().tolist()
    # 14 of 28 chunks kept; scores are running minima along each vector
    assert emb.live_chunks() == 14
    assert lengths == [4, 1, 4, 0, 0, 2, 3]
    out = emb(torch.tensor([[1, 2], [3, 0]])).detach().view(2, 2, 4, 2)
    assert (out[0, 0, 1:] == 0).all() and (out[0, 0, 0] != 0).all()  # row 1: prefix of 1
    assert (out[1, 0] == 0).all()  # row 3: fully pruned
    assert (out[0, 1, :3] != 0).all() and (out[0, 1, 3] == 0).all()  # f1 row 2: 3 chunks


def test_pruned_chunks_regrow_and_reuse_freed_slots() -> None:
    emb = make([10], dim=8, chunks=2, budget=0.3, warmup_steps=0, prune_every=1)
    emb.utility.copy_(torch.arange(20, dtype=torch.float32).view(10, 2))
    emb.after_step(1)
    assert emb.vector_lengths().tolist() == [0, 0, 0, 0, 0, 0, 0, 2, 2, 2]
    capacity = emb.pool.shape[0]
    # row 0 becomes the most useful; row 7 loses out and frees its slot for it
    emb.utility[0] = 1000.0
    emb.after_step(2)
    check_storage(emb)
    assert emb.vector_lengths().tolist() == [2, 0, 0, 0, 0, 0, 0, 0, 2, 2]
    assert emb.pool.shape[0] == capacity  # regrown chunks took freed slots
    assert emb.events[-1]["regrown"] == 2
    torch.testing.assert_close(emb(torch.tensor([[0]])).detach(), torch.zeros(1, 1, 8))
    # without regrowth a pruned chunk stays pruned whatever its utility
    frozen = make([10], dim=8, chunks=2, budget=0.3, warmup_steps=0, prune_every=1, regrow=False)
    frozen.utility.copy_(torch.arange(20, dtype=torch.float32).view(10, 2))
    frozen.after_step(1)
    frozen.utility[0] = 1000.0
    frozen.after_step(2)
    assert frozen.vector_lengths()[0] == 0


def test_utility_threshold_mode() -> None:
    emb = make([6], dim=4, chunks=2, utility_threshold=1.0, prune_every=1, decay=1.0)
    emb.utility.copy_(torch.tensor([[2.0, 2], [2, 0.5], [0.5, 2], [0, 0], [1, 1], [3, 0.9]]))
    emb.after_step(1)
    assert emb.vector_lengths().tolist() == [2, 1, 0, 0, 2, 1]


def test_schedule_is_gradual() -> None:
    emb = make([100], budget=0.1, warmup_steps=1000)
    fractions = [emb.kept_fraction(s) for s in (0, 250, 500, 1000, 5000)]
    assert fractions[0] == 1.0 and fractions[-2] == fractions[-1] == pytest.approx(0.1)
    assert all(a > b for a, b in zip(fractions[:4], fractions[1:4], strict=False))


def test_prunes_to_budget_in_training_and_real_bytes_fall() -> None:
    config = tiny_config(
        embedding="fiited",
        overrides=[
            "embedding.options.budget=0.1",
            "embedding.options.prune_every=4",
            "embedding.options.warmup_steps=32",
            "train.epochs=2",
            "train.checkpoint=final",
        ],
    )
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    emb: FiitedEmbedding = model.embedding
    full_bytes = emb.total_chunks * emb.chunk_dim * 4
    assert emb.pool.nbytes == full_bytes
    start = emb.memory()
    train(model, data, config.train, config.seed, CPU)
    check_storage(emb)
    target = round(0.1 * emb.total_chunks)
    assert emb.live_chunks() == target
    # the pool really shrank: its tensor holds about 10% of the full tables' bytes
    assert emb.pool.nbytes <= (1 + emb.COMPACT_SLACK) * 0.1 * full_bytes + 16
    assert emb.memory().parameters == emb.pool.nbytes < 0.11 * start.parameters
    assert emb.memory().optimizer < 0.11 * start.optimizer
    steps = [s for s, _ in emb.memory_history]
    held = [b for _, b in emb.memory_history]
    assert steps[0] == 0 and steps[1:] == list(range(4, 65, 4))
    assert held[-1] < 0.5 * held[0]
    # falls, without spikes when chunks grow back
    assert all(b <= a + 1024 for a, b in zip(held, held[1:], strict=False))
    assert sum(e["regrown"] for e in emb.events) > 0  # chunks did grow back along the way
    metrics = evaluate(model, data.split("test"), 1024, CPU)
    assert math.isfinite(metrics["auc"]) and metrics["auc"] > 0.5


def test_checkpoint_round_trip_across_pool_sizes() -> None:
    emb = make([50, 30], dim=8, chunks=4, budget=0.25, warmup_steps=0, prune_every=1)
    sparse = torch.randint(0, 30, (16, 2))
    before = {k: v.clone() for k, v in emb.state_dict().items()}
    out0 = emb(sparse).detach()
    emb.utility.uniform_()
    emb.after_step(1)
    assert emb.pool.shape[0] < before["pool"].shape[0]
    pruned = {k: v.clone() for k, v in emb.state_dict().items()}
    out1 = emb(sparse).detach()
    emb.load_state_dict(before)  # back to the unpruned pool
    torch.testing.assert_close(emb(sparse).detach(), out0)
    emb.load_state_dict(pruned)
    torch.testing.assert_close(emb(sparse).detach(), out1)
    check_storage(emb)
