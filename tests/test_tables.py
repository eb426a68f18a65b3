"""fbgemm's table-batched kernel and the plain torch.nn path agree."""

from __future__ import annotations

import pytest
import torch

from suite.embeddings.tables import PhysicalTables


@pytest.mark.parametrize("optimizer", ["rowwise_adagrad", "adagrad", "sgd"])
def test_fbgemm_and_torch_backends_match_forward_and_update(optimizer: str) -> None:
    rows, dims = [50, 7, 300], [8, 4, 8]
    fb = PhysicalTables(
        rows, dims, backend="fbgemm", optimizer=optimizer, learning_rate=0.1, seed=3
    )
    nn_tables = PhysicalTables(
        rows, dims, backend="torch", optimizer=optimizer, learning_rate=0.1, seed=3
    )
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        ids = torch.stack([torch.randint(0, n, (16,), generator=gen) for n in rows], dim=1)
        target = torch.randn(16, sum(dims), generator=gen)
        out_fb, out_nn = fb(ids), nn_tables(ids)
        assert out_fb.shape == (16, sum(dims))
        torch.testing.assert_close(out_fb, out_nn)
        ((out_fb - target) ** 2).sum().backward()
        ((out_nn - target) ** 2).sum().backward()
        nn_tables.step()  # the tables own their sparse optimizer
    for a, b in zip(fb.weights(), nn_tables.weights(), strict=True):
        torch.testing.assert_close(a, b.detach(), rtol=1e-4, atol=1e-5)


def test_tables_are_initialised_from_the_seed_not_zero() -> None:
    a = PhysicalTables([100], [4], seed=1).weights()[0]
    b = PhysicalTables([100], [4], seed=1).weights()[0]
    c = PhysicalTables([100], [4], seed=2).weights()[0]
    assert a.abs().max() > 0 and a.abs().max() <= 0.1
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_memory_matches_real_storage() -> None:
    tables = PhysicalTables([100, 20], [8, 16], optimizer="rowwise_adagrad")
    storage = tables.storage_tensors()
    assert (
        tables.parameter_bytes() == sum(t.nbytes for t in storage["parameters"]) == (800 + 320) * 4
    )
    assert tables.optimizer_bytes() == sum(t.nbytes for t in storage["optimizer"]) == 120 * 4


def test_dims_the_kernel_cannot_take_run_on_torch_with_the_same_update() -> None:
    """fbgemm backend with dims 2 and 1: those tables are torch bags, never widened, and
    the whole set trains exactly like the all-torch tables (fused rowwise Adagrad on the
    kernel's tables, :class:`RowwiseAdagrad` on the bags, both owned by the tables)."""
    rows, dims = [50, 7, 300, 40], [2, 8, 1, 4]
    mixed = PhysicalTables(rows, dims, backend="fbgemm", learning_rate=0.1, seed=3)
    plain = PhysicalTables(rows, dims, backend="torch", learning_rate=0.1, seed=3)
    assert mixed.table_backends() == ["torch", "fbgemm", "torch", "fbgemm"]
    assert [tuple(w.shape) for w in mixed.weights()] == list(zip(rows, dims, strict=True))
    assert len(mixed.sparse_parameters()) == 2
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        ids = torch.stack([torch.randint(0, n, (16,), generator=gen) for n in rows], dim=1)
        target = torch.randn(16, sum(dims), generator=gen)
        for tables in (mixed, plain):
            out = tables(ids)
            assert out.shape == (16, sum(dims))
            ((out - target) ** 2).sum().backward()
            tables.step()
        torch.testing.assert_close(mixed(ids), plain(ids), rtol=1e-4, atol=1e-5)
    for a, b in zip(mixed.weights(), plain.weights(), strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-4, atol=1e-5)
    # the optimizer state lives in the kernel and in the tables' torch optimizer, none lost
    state = sum(t.nbytes for t in mixed.storage_tensors()["optimizer"])
    assert state == mixed.optimizer_bytes() == 4 * sum(rows)


def test_mixed_tables_checkpoint_per_table_and_restore_exactly() -> None:
    """Kernel tables and stacked torch tables in one set: the checkpoint names each table's
    weight and per-row optimizer state with the table's own rows, and loading it back
    restores training exactly."""
    rows, dims = [50, 7, 300, 40], [2, 8, 1, 4]
    tables = PhysicalTables(rows, dims, backend="fbgemm", learning_rate=0.1, seed=5)
    gen = torch.Generator().manual_seed(1)

    def train_step() -> None:
        ids = torch.stack([torch.randint(0, n, (16,), generator=gen) for n in rows], dim=1)
        (tables(ids) ** 2).sum().backward()
        tables.step()

    train_step()
    saved = {k: v.clone() for k, v in tables.checkpoint_state().items()}
    for t, n in enumerate(rows):
        assert saved[f"{t}.weight"].shape == (n, dims[t])
        per_row = [v for k, v in saved.items() if k.startswith(f"{t}.") and k != f"{t}.weight"]
        assert per_row and all(v.shape[0] == n for v in per_row)
    gen_state = gen.get_state()
    train_step()
    after = {k: v.clone() for k, v in tables.checkpoint_state().items()}
    tables.load_checkpoint_state(saved)
    gen.set_state(gen_state)
    train_step()
    for name, value in tables.checkpoint_state().items():
        torch.testing.assert_close(value, after[name], rtol=0, atol=0)


def test_init_bounds_are_per_table_and_default_to_the_reference() -> None:
    from suite.embeddings.tables import initial_values, uniform_bounds

    rows, dims = [10_000, 400], [16, 8]
    tables = PhysicalTables(rows, dims, seed=4, init_bounds=[(0.01, 1.0), (-0.05, 0.05)])
    first, second = (w.detach() for w in tables.weights())
    assert first.min() >= 0.01 and first.max() < 1.0 and abs(first.mean() - 0.505) < 0.01
    assert second.abs().max() <= 0.05
    default = PhysicalTables(rows, dims, seed=4).weights()
    expected = initial_values(rows, dims, uniform_bounds(rows), 4)
    for w, e in zip(default, expected, strict=True):
        torch.testing.assert_close(w.detach(), e, rtol=0, atol=0)
    assert uniform_bounds([400]) == [(-0.05, 0.05)]


@pytest.mark.parametrize("chunk_rows", [1, 3, 64, 10_000])
def test_initial_values_drawn_in_pieces_are_the_same_bits(chunk_rows: int) -> None:
    from suite.embeddings.tables import initial_value_chunks, initial_values

    rows, dims = [200, 1, 7, 1000], [16, 4, 2, 8]
    bounds = [(-0.1, 0.1), (0.0, 1.0), (-1.0, 0.5), (-0.01, 0.01)]
    whole = initial_values(rows, dims, bounds, seed=5)
    pieces: list[list[torch.Tensor]] = [[] for _ in rows]
    for t, start, values in initial_value_chunks(rows, dims, bounds, 5, chunk_rows):
        assert start == sum(len(p) for p in pieces[t]) and len(values) <= chunk_rows
        pieces[t].append(values)
    for w, p in zip(whole, pieces, strict=True):
        assert torch.equal(w, torch.cat(p))


def test_tables_built_without_values_hold_none_and_know_their_start() -> None:
    """What a sharded run builds: shapes, bytes and the starting values, no storage."""
    rows, dims = [300, 50, 9], [8, 2, 16]  # dim 2: a torch table on the fbgemm backend
    real = PhysicalTables(rows, dims, seed=7, learning_rate=0.1)
    shell = PhysicalTables(rows, dims, seed=7, learning_rate=0.1, materialize=False)
    assert shell.kernel is None and not list(shell.parameters()) and not shell.weights()
    assert shell.storage_tensors() == {"parameters": [], "optimizer": []}
    assert shell.parameter_bytes() == real.parameter_bytes()
    assert shell.table_backends() == real.table_backends() == ["fbgemm", "torch", "fbgemm"]
    shell.INIT_CHUNK_FLOATS = 40  # pieces of 2 rows at dim 16
    pieces: list[list[torch.Tensor]] = [[] for _ in rows]
    for t, _, values in shell.initial_chunks():
        assert values.numel() <= 40
        pieces[t].append(values)
    for w, p in zip(real.weights(), pieces, strict=True):
        assert torch.equal(w.detach(), torch.cat(p))
    with pytest.raises(RuntimeError, match="without values"):
        shell(torch.zeros(2, 3, dtype=torch.long))
