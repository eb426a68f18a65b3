"""fbgemm's table-batched kernel and the plain torch.nn path agree."""

from __future__ import annotations

import pytest
import torch

from suite.embeddings.tables import PhysicalTables


@pytest.mark.parametrize("optimizer", ["rowwise_adagrad", "adagrad", "sgd"])
def test_fbgemm_and_torch_backends_match_forward_and_update(optimizer: str) -> None:
    from suite.embeddings.tables import make_sparse_optimizer

    rows, dims = [50, 7, 300], [8, 4, 8]
    fb = PhysicalTables(
        rows, dims, backend="fbgemm", optimizer=optimizer, learning_rate=0.1, seed=3
    )
    nn_tables = PhysicalTables(
        rows, dims, backend="torch", optimizer=optimizer, learning_rate=0.1, seed=3
    )
    opt = make_sparse_optimizer(nn_tables.sparse_parameters(), optimizer, 0.1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        ids = torch.stack([torch.randint(0, n, (16,), generator=gen) for n in rows], dim=1)
        target = torch.randn(16, sum(dims), generator=gen)
        out_fb, out_nn = fb(ids), nn_tables(ids)
        assert out_fb.shape == (16, sum(dims))
        torch.testing.assert_close(out_fb, out_nn)
        ((out_fb - target) ** 2).sum().backward()
        opt.zero_grad()
        ((out_nn - target) ** 2).sum().backward()
        opt.step()
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
    kernel's tables, :class:`RowwiseAdagrad` on the bags)."""
    from suite.embeddings.tables import make_sparse_optimizer

    rows, dims = [50, 7, 300, 40], [2, 8, 1, 4]
    mixed = PhysicalTables(rows, dims, backend="fbgemm", learning_rate=0.1, seed=3)
    plain = PhysicalTables(rows, dims, backend="torch", learning_rate=0.1, seed=3)
    assert mixed.table_backends() == ["torch", "fbgemm", "torch", "fbgemm"]
    assert [tuple(w.shape) for w in mixed.weights()] == list(zip(rows, dims, strict=True))
    opts = [
        make_sparse_optimizer(t.sparse_parameters(), "rowwise_adagrad", 0.1) for t in (mixed, plain)
    ]
    assert len(mixed.sparse_parameters()) == 2
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        ids = torch.stack([torch.randint(0, n, (16,), generator=gen) for n in rows], dim=1)
        target = torch.randn(16, sum(dims), generator=gen)
        for tables, opt in zip((mixed, plain), opts, strict=True):
            out = tables(ids)
            assert out.shape == (16, sum(dims))
            opt.zero_grad()
            ((out - target) ** 2).sum().backward()
            opt.step()
        torch.testing.assert_close(mixed(ids), plain(ids), rtol=1e-4, atol=1e-5)
    for a, b in zip(mixed.weights(), plain.weights(), strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-4, atol=1e-5)
    # the optimizer state is split between the kernel and the torch optimizer, none lost
    kernel_state = sum(t.nbytes for t in mixed.storage_tensors()["optimizer"])
    assert kernel_state == 4 * (7 + 40)
    assert kernel_state + opts[0].state_bytes() == mixed.optimizer_bytes() == 4 * sum(rows)
    assert mixed.unfused_optimizer_bytes() == opts[0].state_bytes()


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
