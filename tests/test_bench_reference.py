"""``benchmarks/bench_reference.py``: the reference side's inputs and its refusals."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from benchmarks.bench_reference import main, reference_inputs


def test_reference_inputs_are_one_id_per_bag_for_every_table() -> None:
    """Each table's EmbeddingBag over ``(indices[k], offsets[k])`` looks up exactly the
    batch's ids of feature ``k``, one row per example."""
    torch.manual_seed(0)
    sparse = torch.randint(0, 50, (7, 3), dtype=torch.int32)
    offsets, indices = reference_inputs(sparse)
    assert offsets.shape == indices.shape == (3, 7)
    assert offsets.dtype == indices.dtype == torch.int64
    for k in range(3):
        table = nn.EmbeddingBag(50, 4, mode="sum")
        torch.testing.assert_close(table(indices[k], offsets[k]), table.weight[sparse[:, k].long()])


def test_without_a_checkout_it_skips(monkeypatch, capsys) -> None:
    monkeypatch.delenv("RECSUITE_DLRM_CHECKOUT", raising=False)
    assert main(["--rounds", "1"]) == 0
    assert "skipped" in capsys.readouterr().out


def test_a_directory_without_the_script_is_refused_by_name(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--dlrm", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "dlrm_s_pytorch.py" in err
