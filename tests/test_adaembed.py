"""AdaEmbed: importance worked out by hand, which ids a reallocation evicts and admits, the
budget, exact bytes, checkpoints, and a bit-identical rerun on CPU."""

from __future__ import annotations

import pytest
import torch

from suite.data.loader import BatchLoader
from suite.data.source import get_prepared
from suite.embeddings.adaembed import (
    AdaEmbedEmbedding,
    AdaEmbedOptions,
    nearest_rank_quantile,
    physical_rows,
)
from suite.embeddings.base import EmbeddingContext
from suite.engine.build import build_model
from suite.engine.train import make_dense_optimizer, train_step
from tests.conftest import tiny_config

CPU = torch.device("cpu")


def adaembed(
    optimizer: str = "sgd", cards: tuple[int, ...] = (4, 4), **options
) -> AdaEmbedEmbedding:
    """Cardinalities [4, 4] (global ids 0-3 and 4-7), dim 4, 2 rows (budget 0.25)."""
    opts = AdaEmbedOptions(
        **{"dim": 4, "budget": 0.25, "decay": 1.0, "realloc_every": 1000, **options}
    )
    context = EmbeddingContext(
        list(cards),
        CPU,
        seed=0,
        sparse_optimizer=optimizer,  # type: ignore[arg-type]
        sparse_lr=0.1,
    )
    return AdaEmbedEmbedding(opts, context).train()


def step(emb: AdaEmbedEmbedding, sparse: list[list[int]], grad: torch.Tensor, n: int) -> None:
    """Training step ``n`` whose output gradient is exactly ``grad [B, F, D]``."""
    out = emb(torch.tensor(sparse))
    (out * grad).sum().backward()
    emb.after_step(n)


def unit(*norms: float) -> torch.Tensor:
    """``[len(norms), 4]``: ``norm * e_0`` per entry."""
    grad = torch.zeros(len(norms), 4)
    grad[:, 0] = torch.tensor(norms)
    return grad


def test_importance_with_decay_by_hand() -> None:
    """decay 0.5; EI <- 0.5 EI + ||summed output gradient of the id in the step||.

    step 1: id 0 read twice, gradients (3,0,0,0) and (0,4,0,0): ||(3,4)|| = 5; id 5: 2
    step 2: id 0: 1; id 6: 4         -> id 0: 2.5 + 1 = 3.5, id 5: 1, id 6: 4
    step 3: id 1: 0, id 5: 6         -> id 0: 1.75, id 5: 0.5 + 6 = 6.5, id 6: 2
    """
    emb = adaembed(decay=0.5)
    g1 = torch.zeros(2, 2, 4)
    g1[0, 0, 0], g1[1, 0, 1], g1[0, 1, 0] = 3.0, 4.0, 2.0  # row 1, feature 1 (id 4): 0
    step(emb, [[0, 1], [0, 0]], g1, 1)
    assert emb.importance(1)[[0, 4, 5]].tolist() == [5.0, 0.0, 2.0]
    step(emb, [[0, 2]], unit(1, 4).unsqueeze(0), 2)
    step(emb, [[1, 1]], unit(0, 6).unsqueeze(0), 3)
    got = emb.importance(3)
    assert torch.allclose(got, torch.tensor([1.75, 0, 0, 0, 0, 6.5, 2, 0]))


def test_reallocation_evicts_by_importance_relative_to_the_feature() -> None:
    """2 rows, no decay, a reallocation at step 2.

    step 1 reads ids 0 and 5: both get a row first come (0 -> row 0, 5 -> row 1);
    gradient norms 8 and 1. step 2 reads id 2 (no row left: reads zeros) and id 5:
    norms 10 and 0. Importance: id 0: 8, id 2: 10, id 5: 1.
    Raw importance would keep ids 2 and 0. Relative to each feature's 95th percentile
    (feature 0: 10 of {8, 10}; feature 1: 1 of {1}): id 0: 0.8, id 2: 1, id 5: 1, so id 0
    is evicted and id 2 takes its row 0; id 5 keeps row 1.
    """
    emb = adaembed(realloc_every=2, warmup_steps=0)
    step(emb, [[0, 1]], unit(8, 1).unsqueeze(0), 1)
    assert emb.slot.tolist() == [0, -1, -1, -1, -1, 1, -1, -1]
    row1 = emb.weight[1].clone()
    with torch.no_grad():
        read = emb(torch.tensor([[2, 1]]))
    assert read[0, 0].abs().sum() == 0  # an id without a row reads zeros
    step(emb, [[2, 1]], unit(10, 0).unsqueeze(0), 2)
    assert emb.slot.tolist() == [-1, -1, 0, -1, -1, 1, -1, -1]
    assert emb.owner.tolist() == [2, 5]
    assert emb.events == [{"step": 2, "evicted": 1, "admitted": 1, "rows_used": 2}]
    # the admitted id starts at its own initial vector; the kept row is untouched
    assert torch.equal(emb.weight[0], emb.initial_rows(torch.tensor([2]))[0])
    assert torch.equal(emb.weight[1], row1)
    assert emb.feature_rows() == [1, 1]


def test_nearest_rank_quantile() -> None:
    """95th percentile by nearest rank: ceil(0.95 n)-th smallest."""
    assert nearest_rank_quantile(torch.tensor([8.0, 10.0])).item() == 10.0
    values = torch.arange(1, 21, dtype=torch.float32)  # ceil(19) = 19th smallest
    assert nearest_rank_quantile(values).item() == 19.0


def test_budget_is_never_exceeded_while_training() -> None:
    """cards [10, 10], budget 0.3: 6 rows; random reads and gradients for 30 steps with a
    reallocation every 3: never more than 6 ids hold rows, slot and owner agree."""
    emb = adaembed(cards=(10, 10), budget=0.3, realloc_every=3, warmup_steps=3, decay=0.8)
    assert emb.capacity == 6 == physical_rows([10, 10], 0.3)
    generator = torch.Generator().manual_seed(0)
    for n in range(1, 31):
        sparse = torch.randint(0, 10, (5, 2), generator=generator).tolist()
        step(emb, sparse, torch.randn(5, 2, 4, generator=generator), n)
        holders = torch.nonzero(emb.slot >= 0).squeeze(1)
        assert len(holders) <= 6
        assert emb.owner[emb.slot[holders].long()].tolist() == holders.tolist()
    assert len(emb.events) == 10 and emb.events[-1]["rows_used"] == 6
    assert sum(e["evicted"] for e in emb.events) > 0


def test_memory_bytes_exact_for_a_small_config() -> None:
    """cards [4, 4], dim 4, 2 rows, rowwise Adagrad:
    parameters 2*4*4 = 32; auxiliary: offsets 2*8 + slot 8*4 + owner 2*4 + used 8 +
    importance 8*4 + clock 8 = 104; optimizer 2*4 = 8; total 144."""
    emb = adaembed(optimizer="rowwise_adagrad")
    memory = emb.memory()
    assert (memory.parameters, memory.auxiliary, memory.optimizer) == (32, 104, 8)
    assert memory.total == 144
    assert emb.compression_steps() == 0
    adagrad = adaembed(optimizer="adagrad").memory()
    assert adagrad.optimizer == 2 * 4 * 4


def test_rowwise_adagrad_update_by_hand() -> None:
    """One read of id 0 with gradient (2,0,0,0): state += mean(g^2) = 1; the row moves by
    -0.1 * g / sqrt(1) = (-0.2, 0, 0, 0)."""
    emb = adaembed(optimizer="rowwise_adagrad")
    step(emb, [[0, 0]], torch.tensor([[[2.0, 0, 0, 0], [0, 0, 0, 0]]]), 1)
    initial = emb.initial_rows(torch.tensor([0]))[0]
    assert emb.opt_state[0].item() == 1.0
    assert torch.allclose(emb.weight[0], initial + torch.tensor([-0.2, 0, 0, 0]))


def test_checkpoint_round_trip_is_bit_identical() -> None:
    emb = adaembed(cards=(10, 10), optimizer="rowwise_adagrad", realloc_every=2, warmup_steps=0)
    other = adaembed(cards=(10, 10), optimizer="rowwise_adagrad", realloc_every=2, warmup_steps=0)
    generator = torch.Generator().manual_seed(1)
    batches = [
        (torch.randint(0, 10, (4, 2), generator=generator).tolist(), torch.randn(4, 2, 4))
        for _ in range(6)
    ]
    for n, (sparse, grad) in enumerate(batches[:3], start=1):
        step(emb, sparse, grad, n)
    state = emb.checkpoint_state()
    other.load_checkpoint_state({k: v.clone() for k, v in state.items()})
    assert other.events == emb.events and emb.events
    for name, tensor in other.checkpoint_state().items():
        assert torch.equal(tensor, state[name]), name
    for n, (sparse, grad) in enumerate(batches[3:], start=4):
        step(emb, sparse, grad, n)
        step(other, sparse, grad, n)
    for name, tensor in other.checkpoint_state().items():
        assert torch.equal(tensor, emb.checkpoint_state()[name]), name


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory):
    spec = tiny_config().dataset.model_copy(
        update={"cache_dir": str(tmp_path_factory.mktemp("prepared"))}
    )
    return get_prepared(spec, progress=False)


def test_rerun_on_cpu_is_bit_identical(tiny_data) -> None:
    """Two builds with one seed train 5 steps (a reallocation every 2) to identical
    outputs and identical state."""
    overrides = [
        "embedding.options.budget=0.05",
        "embedding.options.realloc_every=2",
        "embedding.options.warmup_steps=0",
    ]
    config = tiny_config(embedding="adaembed", overrides=overrides)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = build_model(config, tiny_data)
        model.train()
        dense_opt = make_dense_optimizer(model.dense_parameters(), config.train)
        batches = iter(BatchLoader(tiny_data.split("train"), 64))
        for n in range(1, 6):
            train_step(model, next(batches), dense_opt, n)
        model.eval()
        with torch.no_grad():
            batch = next(batches)
            runs.append((model(batch.dense, batch.sparse), model.embedding.checkpoint_state()))
    (out_a, state_a), (out_b, state_b) = runs
    assert torch.equal(out_a, out_b)
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert int(state_a["used"]) == model.embedding.capacity  # the table filled up
    assert len(model.embedding.events) == 2 and model.embedding.events[0]["evicted"] > 0
