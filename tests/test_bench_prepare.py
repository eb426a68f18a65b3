"""benchmarks/bench_prepare.py: the Kaggle-size run generates its file once, then reuses it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_prepare  # noqa: E402


def test_kaggle_file_is_generated_once_then_reused(tmp_path: Path) -> None:
    raw, out = tmp_path / "disk" / "train.txt", tmp_path / "kaggle.json"
    argv = ["--kaggle", str(raw), "--rows", "3000", "--rounds", "1", "--out", str(out)]
    assert bench_prepare.main([*argv, "--workdir", str(tmp_path / "w1")]) == 0
    first = json.loads(out.read_text())
    assert first["rows"] == 3000 and raw.stat().st_size == first["file_bytes"]
    stamp = raw.stat().st_mtime_ns
    assert bench_prepare.main([*argv, "--workdir", str(tmp_path / "w2")]) == 0
    assert raw.stat().st_mtime_ns == stamp  # reused, not written again
    second = json.loads(out.read_text())
    assert second["fingerprint"] == first["fingerprint"]
    assert not list(raw.parent.glob(".*partial"))


def test_raw_and_kaggle_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        bench_prepare.main(["--raw", "a", "--kaggle", "b"])
