"""``benchmarks/gen_criteo.py``: deterministic Kaggle-format files that ``prepare`` reads."""

from __future__ import annotations

from pathlib import Path

from benchmarks.gen_criteo import generate
from suite.datasets.criteo import CriteoKaggle, CriteoOptions


def test_same_rows_and_seed_give_the_same_bytes_and_prepare_reads_them(tmp_path: Path) -> None:
    first, second, other = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    generate(first, 3000, seed=0, chunk=1000)
    generate(second, 3000, seed=0, chunk=1000)
    generate(other, 3000, seed=1, chunk=1000)
    assert first.read_bytes() == second.read_bytes()
    assert first.read_bytes() != other.read_bytes()
    lines = first.read_text().splitlines()
    assert len(lines) == 3000
    assert {len(line.split("\t")) for line in lines} == {40}
    assert not list(tmp_path.glob(".*partial"))  # written atomically
    data = CriteoKaggle().build(
        CriteoOptions(), "dlrm", first, tmp_path / "prepared", progress=False
    )
    assert sum(data.manifest["rows"].values()) == 3000
    assert data.schema.num_sparse == 26 and data.schema.num_dense == 13
