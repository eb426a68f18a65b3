"""The ``checkpoint`` task: every kind written side by side, restored, trained to the end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from suite.errors import ConfigError
from suite.runs.single import execute
from tests.conftest import SHORT_CHECKPOINT_TASK, tiny_config


def test_checkpoint_task_reports_bytes_and_restored_accuracy(isolated: Path) -> None:
    config = tiny_config(
        task="checkpoint",
        overrides=SHORT_CHECKPOINT_TASK,
    )
    result = execute(config)
    m = result.metrics
    kinds = ["full", "incremental", "4-bit", "incremental-4-bit"]
    for kind in kinds:
        assert m[f"{kind}_checkpoints"] == 4
        assert m[f"{kind}_write_seconds"] > 0 and m[f"{kind}_restore_seconds"] > 0
    # full and incremental restores continue exactly: the uninterrupted run's AUC
    assert m["full_auc_cost"] == 0.0 and m["incremental_auc_cost"] == 0.0
    assert m["full_bandwidth_reduction"] == 1.0
    # fewer embedding bytes for every other kind; 4-bit weights take 12 of 64 bytes a row
    assert m["incremental_embedding_bandwidth_reduction"] > 1.0
    assert 3.5 < m["4-bit_embedding_bandwidth_reduction"] < 5.0
    # at dim 16 a row's 64 + 4 bytes (weights, row-wise Adagrad state) become 8 + 4 + 4:
    # the measured reductions are the arithmetic bounds, weights alone and with the state
    assert m["4-bit_weight_bandwidth_reduction"] == pytest.approx(64 / 12)
    assert m["4-bit_weight_reduction_bound"] == pytest.approx(64 / 12)
    assert m["4-bit_embedding_reduction_bound"] == pytest.approx(68 / 16, rel=1e-3)
    assert m["4-bit_embedding_bandwidth_reduction"] == pytest.approx(
        m["4-bit_embedding_reduction_bound"]
    )
    assert m["full_weight_bandwidth_reduction"] == 1.0
    explained = result.details["quantization_bound"]["4-bit"]["explained"]
    assert explained.startswith("4-bit at dim 16: per row 64 B of float32 weights + 4 B")
    # (4d + 4) / (d / 2 + 8) >= 6 from d = 44 on (a little more with the step counter beside the rows)
    needed = int(re.search(r"6x needs dim >= (\d+)", explained)[1])
    assert 44 <= needed <= 46
    assert (
        m["incremental-4-bit_embedding_bandwidth_reduction"]
        > m["4-bit_embedding_bandwidth_reduction"]
    )
    assert 0 < m["modified_rows_fraction"] < 1
    assert result.details["restored_from_step"]["full"] == 12.0
    for plot in result.details["plots"]:
        assert Path(plot).is_file() and Path(plot).with_suffix(".pdf").is_file()


def test_checkpoint_bytes_are_the_same_on_a_rerun(isolated: Path) -> None:
    """Every byte count is the same when the same run is written again: the counts are of
    the checkpoints' data files, not of their manifests, whose time stamps and timings vary
    in length."""
    figures = []
    for _ in range(2):
        metrics = execute(tiny_config(task="checkpoint", overrides=SHORT_CHECKPOINT_TASK)).metrics
        figures.append({k: v for k, v in metrics.items() if "bytes" in k or "reduction" in k})
    assert figures[0] and figures[0] == figures[1]


def test_checkpoint_task_refuses_a_method_that_cannot_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from suite.runs.single import preflight
    from tests.test_checkpoint import without_checkpoints

    without_checkpoints(monkeypatch)
    with pytest.raises(ConfigError, match="fiited cannot be checkpointed yet"):
        preflight(tiny_config(task="checkpoint", embedding="fiited"))
    with pytest.raises(ConfigError, match="bit widths among 8, 4, 2"):
        tiny_config(task="checkpoint", overrides=["task.options.bits=[3]"])
