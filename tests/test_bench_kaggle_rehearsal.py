"""benchmarks/bench_kaggle_rehearsal.py at a tiny size: the ``full`` DLRM job through the
``criteo-kaggle`` loader, its figures recorded and the Kaggle run's extrapolated."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_kaggle_rehearsal  # noqa: E402


def test_the_rehearsal_prepares_trains_and_evaluates_at_a_tiny_size(tmp_path: Path) -> None:
    raw, out = tmp_path / "disk" / "train.txt", tmp_path / "rehearsal.json"
    argv = ["--rows", "7000", "--steps", "3", "--threads", "1", "--raw", str(raw)]
    assert bench_kaggle_rehearsal.main([*argv, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["rows"] == 7000 and raw.stat().st_size == report["file_bytes"]
    assert report["job"]["dataset.name"] == "criteo-kaggle"
    assert report["job"]["dataset.protocol"] == "dlrm" and report["job"]["device"] == "cpu"
    prepared, trained = report["prepare"], report["train"]
    assert prepared["seconds"] > 0 and prepared["memory"]["VmHWM_mib"] > 0
    rows = prepared["rows"]
    assert rows["test"] == trained["test_rows"] and sum(rows.values()) == 7000
    assert rows["train"] == 6000  # days 1-6 of 7
    assert trained["steps"] == 3 and trained["batch_size"] == 128  # the profile's batch
    assert trained["train_samples_per_s"] > 0 and trained["test_seconds"] > 0
    assert 0 < trained["test_auc"] < 1
    assert trained["table_bytes"] == prepared["embedding_rows"] * 16 * 4
    assert set(trained["memory"]) == {"built", "trained", "evaluated"}
    for memory in trained["memory"].values():
        assert memory["RssAnon_mib"] + memory["RssFile_mib"] <= memory["VmRSS_mib"] + 1
    full = report["extrapolated_to_kaggle"]
    assert full["rows"] == 45_840_617 and full["epoch_seconds"] > 0
    assert full["kaggle_table_bytes"] == 33_762_577 * 16 * 4
