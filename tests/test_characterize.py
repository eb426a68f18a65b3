"""The ``characterize`` task and its access analysis, checked by hand and by brute force."""

from __future__ import annotations

import gzip
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from suite.data.access import (
    AccessStream,
    hot_row_shares,
    lfu_hit_rates,
    lru_hit_rates,
    reuse_histogram,
    stack_distances,
    unique_per_batch,
    zipf_exponent,
)
from suite.data.traces import load_trace
from suite.errors import DataError
from suite.registry import DATASETS
from suite.runs.single import execute
from tests.conftest import tiny_config


def brute_lru_hit_rate(keys: np.ndarray, capacity: int) -> float:
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for key in keys.tolist():
        if key in cache:
            hits += 1
            cache.move_to_end(key)
        else:
            cache[key] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits / len(keys)


def test_counts_on_a_hand_made_stream() -> None:
    # two tables of 4 and 3 rows, three samples: (0, 2), (0, 1), (3, 2)
    stream = AccessStream.from_sparse(np.array([[0, 2], [0, 1], [3, 2]]), [4, 3])
    assert stream.keys.tolist() == [0, 6, 0, 5, 3, 6]
    assert stream.samples.tolist() == [0, 0, 1, 1, 2, 2]
    # stack distances by hand: 0 first; 6 first; 0 after {6} -> 1; 5 first; 3 first;
    # 6 after {0, 5, 3} -> 3
    assert stack_distances(stream.keys).tolist() == [-1, -1, 1, -1, -1, 3]
    reuse = reuse_histogram(stream.keys, stream.samples, window=3)
    # within one window: row 0 twice, row 6 twice, rows 5 and 3 once -> 2 of 4 unique once
    assert reuse["unique_rows"]["(0,1]"] == pytest.approx(0.5)
    assert reuse["unique_rows"]["(1,2]"] == pytest.approx(0.5)
    assert reuse["lookups"]["(1,2]"] == pytest.approx(4 / 6)
    # hottest 1/7 of rows = 1 row (0 or 6, each looked up twice) serves 2 of 6 lookups
    assert hot_row_shares(stream.keys, 7, [1 / 7])[f"{1 / 7:g}"] == pytest.approx(2 / 6)
    per_batch = unique_per_batch(stream, [1, 2])
    assert per_batch[1]["unique_rows"] == pytest.approx(2.0)
    assert per_batch[2]["unique_rows"] == pytest.approx(3.0)  # one whole batch: {0, 6, 5}
    assert 4 not in unique_per_batch(stream, [3, 4])  # larger than the stream


@pytest.mark.parametrize("seed", [0, 1])
def test_lru_curve_equals_a_brute_force_simulation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = (rng.zipf(1.2, 6000) % 300).astype(np.int64)
    distances = stack_distances(keys)
    capacities = np.array([1, 2, 7, 30, 100, 299, 1000])
    fast = lru_hit_rates(distances, capacities)
    slow = [brute_lru_hit_rate(keys, int(c)) for c in capacities]
    np.testing.assert_allclose(fast, slow, rtol=0, atol=0)


def test_lfu_curve_counts_the_hottest_rows() -> None:
    keys = np.array([5, 5, 5, 7, 7, 9])
    # 1 row cached (row 5): its 2 repeat lookups hit; 2 rows: + row 7's one repeat
    np.testing.assert_allclose(
        lfu_hit_rates(keys, np.array([0, 1, 2, 3])), [0, 2 / 6, 3 / 6, 3 / 6]
    )


def test_zipf_exponent_recovers_a_planted_power_law() -> None:
    ranks = np.arange(1, 400)
    counts = np.round(2e4 * ranks**-1.1).astype(int)
    keys = np.repeat(ranks, counts)
    exponent, r2 = zipf_exponent(keys)
    assert exponent == pytest.approx(1.1, abs=0.05)
    assert r2 > 0.98


def write_trace(path: Path, tables: int, batch: int, seed: int = 0, gz: bool = False) -> None:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (tables, batch), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.reshape(-1).cumsum(0)])
    indices = torch.randint(0, 50, (int(offsets[-1]),), generator=gen)
    if gz:
        with gzip.open(path, "wb") as handle:
            torch.save((indices, offsets, lengths), handle)
    else:
        torch.save((indices, offsets, lengths), path)


@pytest.mark.parametrize("gz", [False, True])
def test_a_dlrm_datasets_trace_is_read_in_issue_order(tmp_path: Path, gz: bool) -> None:
    path = tmp_path / "fbgemm_t3_bs8.pt"
    write_trace(path, tables=3, batch=8, gz=gz)
    with gzip.open(path) if gz else path.open("rb") as handle:
        indices, offsets, lengths = torch.load(handle, weights_only=True)
    stream = load_trace(path)
    assert len(stream) == len(indices)
    # sample 0's lookups come first, table by table
    first = [indices[offsets[t * 8] : offsets[t * 8 + 1]].tolist() for t in range(3)]
    offsets_of_table = stream.table_offsets
    expected = [i + int(offsets_of_table[t]) for t, ids in enumerate(first) for i in ids]
    assert stream.keys[: len(expected)].tolist() == expected
    assert stream.samples[: len(expected)].tolist() == [0] * len(expected)


def test_a_broken_trace_is_one_line_naming_the_file(tmp_path: Path) -> None:
    torn = tmp_path / "torn.pt"
    write_trace(torn, 2, 4)
    torn.write_bytes(torn.read_bytes()[:40])
    with pytest.raises(DataError, match="torn.pt"):
        load_trace(torn)
    wrong = tmp_path / "wrong.pt"
    torch.save((torch.arange(3), torch.tensor([0, 5]), torch.ones(1, 1, dtype=torch.long)), wrong)
    with pytest.raises(DataError, match="wrong.pt: offsets do not agree"):
        load_trace(wrong)


SYNTHETIC = [n for n in DATASETS.names() if n.endswith("-synth")]


@pytest.mark.parametrize("dataset", SYNTHETIC)
def test_characterize_runs_on_every_built_in_dataset(dataset: str, tmp_path: Path) -> None:
    config = tiny_config(dataset=dataset, task="characterize").with_overrides(
        {"tracking.results_dir": str(tmp_path / "results")}
    )
    result = execute(config)
    m = result.metrics
    assert m["lookups"] == len(result.details["tables"]) * 4000
    assert 0 < m["lru_hit_rate_0.1"] <= m["lru_hit_rate_1"] <= 1 - m["compulsory_miss_rate"] + 1e-12
    assert m["lfu_hit_rate_1"] == pytest.approx(m["lru_hit_rate_1"])
    assert sum(result.details["reuse"]["lookups"].values()) == pytest.approx(1.0)
    assert all(Path(p).exists() for p in result.details["plots"])


def test_characterize_reads_a_trace_instead_of_the_split(tmp_path: Path) -> None:
    path = tmp_path / "trace.pt"
    write_trace(path, tables=4, batch=64)
    config = tiny_config(task="characterize").with_overrides(
        {"task.options": {"trace": str(path), "plot": False, "batch_sizes": [8, 16]}}
    )
    result = execute(config)
    assert result.details["source"]["kind"] == "trace"
    assert result.metrics["lookups"] == len(load_trace(path))
