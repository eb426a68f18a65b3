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
