"""FIITED: utility and optimizer math, the prefix rule, the live-chunk store (keys, pool,
utilities, optimizer state, sketch) as it shrinks and grows, regrowth, checkpoints and
bit-identical resume, and pruning to a 10% budget during real training and in the
accuracy task."""

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
from suite.runs.single import execute
from tests.conftest import SHORT_CHECKPOINT_TASK, tiny_config

CPU = torch.device("cpu")


def make(cards: list[int], optimizer: str = "rowwise_adagrad", **options) -> FiitedEmbedding:
    context = EmbeddingContext(
        cardinalities=cards, device=CPU, seed=0, sparse_optimizer=optimizer, sparse_lr=0.1
    )
    return FiitedEmbedding(FiitedOptions(**options), context)


def check_storage(emb: FiitedEmbedding) -> None:
    """Keys are sorted and distinct; every structure is sized by the live rows and chunks;
    the chunk starts count the rows having each chunk."""
    keys = emb.keys.long()
    assert (keys[1:] > keys[:-1]).all()
    rows, lengths = emb._row_lengths()
    assert ((lengths >= 1) & (lengths <= emb.chunks)).all()
    assert len(torch.unique(rows)) == len(rows)
    assert (lengths[1:] <= lengths[:-1]).all(), "longer rows come first"
    counts = [int((lengths > k).sum()) for k in range(emb.chunks)]
    assert torch.diff(emb.chunk_start).tolist() == counts
    assert emb.pool.shape[0] == emb.utility.shape[0] == int(lengths.sum()) == emb.live_chunks()
    if emb.optimizer_name == "rowwise_adagrad":
        assert emb.opt_state.shape == (len(keys),)


def test_chunks_must_divide_dim() -> None:
    with pytest.raises(ConfigError, match="chunks"):
        tiny_config(embedding="fiited", overrides=["embedding.options.chunks=3"])


def dense(emb: FiitedEmbedding, values: torch.Tensor) -> torch.Tensor:
    """A per-chunk tensor of the unpruned store (chunk k of row p at k * N + p) as
    ``[N * K, ...]`` in (row, chunk) order."""
    shape = values.shape[1:]
    return values.view(emb.chunks, emb.rows, *shape).transpose(0, 1).reshape(-1, *shape)


def set_utility(emb: FiitedEmbedding, utility: torch.Tensor) -> None:
    """Set the utilities of the unpruned store from ``[N, K]``."""
    emb.utility.copy_(utility.t().reshape(-1))


@pytest.mark.parametrize("optimizer", ["rowwise_adagrad", "adagrad", "sgd"])
def test_utility_and_update_match_naive(optimizer: str) -> None:
    emb = make([5, 7], optimizer, dim=8, chunks=2, decay=0.5, prune_every=10**6)
    pool0 = dense(emb, emb.pool).clone()
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
    acc = {"rowwise_adagrad": torch.zeros(12), "adagrad": torch.zeros(24, 4)}.get(optimizer)
    pool = pool0.clone().view(12, 8)
    rows = sparse + torch.tensor([0, 5])
    for g in grads:
        u *= 0.5
        per = g.view(3, 2, 2, 4)
        summed = torch.zeros(12, 8)
        for b in range(3):
            for f in range(2):
                for k in range(2):
                    u[rows[b, f], k] += per[b, f, k].norm()
                summed[rows[b, f]] += g[b, f]
        touched = summed.abs().sum(1) > 0
        if optimizer == "rowwise_adagrad":  # one accumulator per row, as fbgemm's
            acc[touched] += summed[touched].pow(2).mean(1)
            pool[touched] -= 0.1 * summed[touched] / (acc[touched].sqrt()[:, None] + 1e-8)
        elif optimizer == "adagrad":
            flat, view = summed.view(24, 4), pool.view(24, 4)
            hit = flat.abs().sum(1) > 0
            acc[hit] += flat[hit].pow(2)
            view[hit] -= 0.1 * flat[hit] / (acc[hit].sqrt() + 1e-8)
        else:
            pool[touched] -= 0.1 * summed[touched]
    stored = dense(emb, emb.utility).view(12, 2) * 0.5 ** (2 - int(emb.clock))  # lazy decay
    torch.testing.assert_close(stored, u)
    torch.testing.assert_close(dense(emb, emb.pool).view(12, 8), pool)
    if optimizer == "rowwise_adagrad":
        assert emb.opt_state.shape == (12,)  # one state per row, like full's
        torch.testing.assert_close(emb.opt_state, acc)


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
    set_utility(emb, utility)
    values = dense(emb, emb.pool).view(7, 4, 2).clone()
    emb.after_step(1)  # no pending gradient: prune only
    check_storage(emb)
    lengths = emb.vector_lengths().tolist()
    # 14 of 28 chunks kept; scores are running minima along each vector
    assert emb.live_chunks() == 14 and emb.live_rows() == 5
    assert lengths == [4, 1, 4, 0, 0, 2, 3]
    out = emb(torch.tensor([[1, 2], [3, 0]])).detach().view(2, 2, 4, 2)
    torch.testing.assert_close(out[0, 0, 0], values[1, 0])  # kept values survive the move
    assert (out[0, 0, 1:] == 0).all()  # row 1: prefix of 1
    assert (out[1, 0] == 0).all()  # row 3: fully pruned
    torch.testing.assert_close(out[0, 1, :3], values[6, :3])  # f1 row 2: 3 chunks
    assert (out[0, 1, 3] == 0).all()
    assert (out[1, 1] == 0).all()  # f1 row 0: fully pruned


def read(emb: FiitedEmbedding, rows: list[int], step: int) -> None:
    """One training step reading feature-0 ``rows`` with an all-ones output gradient."""
    out = emb(torch.tensor(rows).unsqueeze(1))
    out.backward(torch.ones_like(out))
    emb.after_step(step)


def test_pruned_chunks_regrow_through_the_sketch() -> None:
    emb = make([10], dim=8, chunks=2, budget=0.3, warmup_steps=0, prune_every=2, tracked=0.5)
    set_utility(emb, torch.arange(20, dtype=torch.float32).view(10, 2))
    emb.after_step(2)
    assert emb.vector_lengths().tolist() == [0, 0, 0, 0, 0, 0, 0, 2, 2, 2]
    # row 0 is read while pruned: its first chunk competes and wins back a place;
    # row 7's last chunk, the least useful live one, makes room
    emb.utility.mul_(1e-3)
    read(emb, [0] * 8, 3)
    read(emb, [0] * 8, 4)
    check_storage(emb)
    assert emb.vector_lengths().tolist() == [1, 0, 0, 0, 0, 0, 0, 1, 2, 2]
    assert emb.events[-1]["regrown"] == 1 and emb.events[-1]["freed"] == 1
    torch.testing.assert_close(emb(torch.tensor([[0]])).detach(), torch.zeros(1, 1, 8))
    # without regrowth a pruned chunk stays pruned whatever its gradient
    frozen = make([10], dim=8, chunks=2, budget=0.3, warmup_steps=0, prune_every=2, regrow=False)
    set_utility(frozen, torch.arange(20, dtype=torch.float32).view(10, 2))
    frozen.after_step(2)
    frozen.utility.mul_(1e-3)
    read(frozen, [0] * 8, 3)
    read(frozen, [0] * 8, 4)
    assert frozen.vector_lengths()[0] == 0


def test_bytes_fall_as_chunks_are_pruned_and_rise_as_they_regrow() -> None:
    """Every part of the store (pool, index, utilities, optimizer state) follows the live
    chunks: down at the first event, up as read rows grow back one chunk per event."""
    emb = make([200], dim=8, chunks=4, utility_threshold=0.5, prune_every=5, tracked=0.5)

    def parts() -> dict[str, int]:
        aux = emb.auxiliary_parts()
        return {
            "parameters": emb.pool.nbytes,
            "index": sum(t.nbytes for t in aux["index"]),
            "utilities": sum(t.nbytes for t in aux["utilities"]),
            "optimizer": emb.opt_state.nbytes,
            "total": emb.memory().total,
        }

    sizes = [parts()]
    for step in range(1, 6):  # only rows 0..19 are read: the rest is pruned
        read(emb, list(range(20)), step)
    sizes.append(parts())
    assert emb.live_rows() == 20 and emb.live_chunks() == 80
    for step in range(6, 16):  # rows 0..99 are read: 20..99 grow back a chunk per event
        read(emb, list(range(100)), step)
        if step % 5 == 0:
            check_storage(emb)
            sizes.append(parts())
    assert emb.vector_lengths()[:100].tolist() == [4] * 20 + [2] * 80
    assert (emb.vector_lengths()[100:] == 0).all()
    for name in sizes[0]:
        fall, rise = sizes[1][name] < sizes[0][name], sizes[1][name] < sizes[2][name]
        assert fall and rise and sizes[2][name] <= sizes[3][name], (name, sizes)
    assert sizes[3]["parameters"] < sizes[3]["total"] < sizes[0]["total"]
    assert [e["regrown"] for e in emb.events] == [0, 80, 80]


def test_utility_threshold_mode() -> None:
    emb = make([6], dim=4, chunks=2, utility_threshold=1.0, prune_every=1, decay=1.0)
    set_utility(emb, torch.tensor([[2.0, 2], [2, 0.5], [0.5, 2], [0, 0], [1, 1], [3, 0.9]]))
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
    # every part of the store really shrank with the live chunks
    assert emb.pool.nbytes == target * emb.chunk_dim * 4
    assert emb.memory().parameters == emb.pool.nbytes < 0.11 * start.parameters
    assert emb.utility.nbytes == target * 4
    assert emb.keys.nbytes == emb.live_rows() * 4 < 0.5 * emb.rows * 4
    assert emb.memory().optimizer == emb.live_rows() * 4 < 0.5 * start.optimizer
    steps = [s for s, _ in emb.memory_history]
    held = [b for _, b in emb.memory_history]
    assert steps[0] == 0 and steps[1:] == list(range(4, 65, 4))
    assert held[-1] < 0.2 * held[0]
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


def test_sketch_estimates_the_utility_of_pruned_chunks() -> None:
    """Pruned rows read with known gradients: the sketch estimates each one's next chunk
    as its decayed sum of gradient norms, less the mean of the other buckets."""
    emb = make(
        [50], dim=8, chunks=4, budget=0.1, warmup_steps=0, prune_every=2, decay=0.5, tracked=1.0
    )
    set_utility(emb, torch.arange(200, dtype=torch.float32).view(50, 4))
    emb.after_step(2)  # rows 0..44 pruned, rows 45..49 live with all 4 chunks
    assert emb.vector_lengths()[:45].sum() == 0 and emb.live_chunks() == 20
    rows = [3, 7, 11]
    ids = torch.tensor(rows) * 4  # their first chunks
    assert all(len(torch.unique(h)) == len(rows) for h in emb._hashes(ids)), "no collisions"
    for step, value in ((3, 2.0), (5, 5.0)):  # no event at odd steps
        out = emb(torch.tensor(rows).unsqueeze(1))
        out.backward(torch.full_like(out, value))
        emb.after_step(step)
    emb._renormalise(5)
    true = (2.0 * 0.5**2 + 5.0) * math.sqrt(2)  # a chunk of 2 values, each gradient `value`
    width = emb.sketch.shape[1]
    expected = torch.full((3,), true - 2 * true / (width - 1))
    torch.testing.assert_close(emb._estimate(ids), expected)
    assert sorted(emb.ring[emb.ring >= 0].tolist()) == sorted(ids.tolist() * 2)


def test_accuracy_task_reports_the_pruned_store() -> None:
    """The accuracy task's byte figures are those of the store after pruning: parameters
    at the budget, index and utilities beside them, and the row-wise optimizer state."""
    overrides = [
        "embedding.options.prune_every=8",
        "embedding.options.warmup_steps=16",
        "train.checkpoint=final",
    ]
    m = execute(tiny_config(embedding="fiited", overrides=overrides)).metrics
    full = execute(tiny_config(overrides=["train.checkpoint=final"])).metrics
    assert m["embedding_parameter_bytes"] == pytest.approx(
        0.1 * full["embedding_parameter_bytes"], rel=0.01
    )
    assert m["embedding_bytes"] == m["embedding_parameter_bytes"] + m["embedding_auxiliary_bytes"]
    assert m["embedding_bytes"] + m["embedding_optimizer_bytes"] <= 0.15 * (
        full["embedding_bytes"] + full["embedding_optimizer_bytes"]
    )
    assert 0 < m["embedding_optimizer_bytes"] < 0.5 * full["embedding_optimizer_bytes"]


FIITED_RUN = [
    "embedding.options.prune_every=4",
    "embedding.options.warmup_steps=16",
    "train.epochs=2",
    "train.eval_every_steps=10",
]


class Killed(Exception):
    """Stands for the process dying mid-run."""


def test_killed_run_resumes_bit_identically() -> None:
    """Checkpoints every 7 steps through pruning events (the store shrinks, grows back,
    and its optimizer state, sketch and ring change size or content); a run killed at
    step 30 and resumed from step 28 ends with the uninterrupted run's metrics exactly."""
    reference = execute(tiny_config(embedding="fiited", overrides=FIITED_RUN))
    config = tiny_config(embedding="fiited", overrides=[*FIITED_RUN, "train.checkpoint_every=7"])

    def die(metrics: dict[str, float], step: int) -> None:
        if step >= 30:
            raise Killed

    with pytest.raises(Killed):
        execute(config, on_validation=die)
    resumed = execute(config, resume=True)
    assert resumed.details["validation_history"] == reference.details["validation_history"]
    timing = {"train_samples_per_s"}
    assert set(resumed.metrics) == set(reference.metrics)
    for name, value in reference.metrics.items():
        if name not in timing:
            assert resumed.metrics[name] == value, name  # bit for bit


@pytest.mark.parametrize("incremental", [False, True])
def test_checkpoint_restores_the_whole_store(tmp_path, incremental: bool) -> None:
    """The last checkpoint (step 18, after four pruning events) restored into a fresh
    model equals the store trained to step 18: every buffer, the memory history and the
    events. FIITED has no row groups, so an incremental checkpoint writes it whole."""
    from suite.engine.checkpoint import Checkpointer, CheckpointEvery, CheckpointPolicy

    config = tiny_config(embedding="fiited", overrides=[*FIITED_RUN[:2], "train.max_steps=20"])
    data = get_prepared(config.dataset, progress=False)
    identity = {"config_hash": config.config_hash(), "data_fingerprint": data.fingerprint}
    policy = CheckpointPolicy(incremental=incremental, restore_budget=5.0)
    with Checkpointer(tmp_path / "c", identity, CheckpointEvery(steps=6), policy) as c:
        train(build_model(config, data), data, config.train, config.seed, CPU, checkpoints=c)
    assert [w.step for w in c.written] == [6, 12, 18]
    reference = build_model(config, data)
    train(reference, data, config.train.model_copy(update={"max_steps": 18}), config.seed, CPU)
    restored = build_model(config, data)
    with Checkpointer(tmp_path / "c", identity, resume=True) as c:
        loop = c.restore(restored, None)
    assert loop is not None and loop.step == 18
    expected = reference.embedding.checkpoint_state()
    got = restored.embedding.checkpoint_state()
    assert set(got) == set(expected)
    for name, value in expected.items():
        assert got[name].shape == value.shape and torch.equal(got[name], value), name
    assert reference.embedding.pool.shape[0] < reference.embedding.total_chunks  # pruned
    assert restored.embedding.events == reference.embedding.events
    assert restored.embedding.memory_history == reference.embedding.memory_history
    check_storage(restored.embedding)


def test_checkpoint_task_runs_on_fiited() -> None:
    """Every kind restores FIITED exactly: its store has no row groups (incremental
    checkpoints write it whole) and no embedding weights a row-wise quantizer could take."""
    config = tiny_config(
        embedding="fiited",
        task="checkpoint",
        overrides=[
            *FIITED_RUN[:2],
            *SHORT_CHECKPOINT_TASK,
            "task.options.plot=false",
        ],
    )
    result = execute(config)
    m = result.metrics
    for kind in ("full", "incremental", "4-bit", "incremental-4-bit"):
        assert m[f"{kind}_checkpoints"] == 4
        assert m[f"{kind}_auc_cost"] == 0.0, kind
        assert m[f"{kind}_embedding_bandwidth_reduction"] == pytest.approx(1.0, rel=0.05)
    assert math.isnan(m["4-bit_weight_reduction_bound"])
    assert "no row-indexed weights" in result.details["quantization_bound"]["4-bit"]["explained"]
