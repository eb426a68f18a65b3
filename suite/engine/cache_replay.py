"""Replay an access stream through fbgemm's own caching tables (CUDA only).

One table-batched embedding of all rows placed as ``EmbeddingLocation.MANAGED_CACHING``
(rows in host memory, a GPU cache of ``share`` of them) with fbgemm's LRU or LFU policy.
Each batch of samples is one forward call, one bag per lookup. Before each call the batch's
unique rows are looked up in fbgemm's cache state (``lxu_cache_lookup``); one not there is a
unique miss, and the hit rate is ``1 - unique misses / requested indices``, the definition of
fbgemm's UVM cache statistics. Those statistics are gathered by its LRU path only (its LFU
populate takes none: on an H200 with fbgemm 1.6.0 they read 0 requested indices), so the
count is the suite's; for LRU, fbgemm's own figure is returned beside it as a cross-check.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from suite.data.access import AccessStream
from suite.kernel_backend import require_fbgemm


def replay_hit_rates(
    stream: AccessStream, share: float, policy: str, batch: int, device: torch.device, dim: int = 4
) -> dict[str, float | None]:
    """fbgemm's cache hit rates on ``stream`` with a cache of ``share`` of all rows:
    ``{"lookup": counted from the cache state before each batch, "stats": the same from
    fbgemm's UVM cache statistics (LRU only, else None)}``."""
    require_fbgemm("task.options.fbgemm_replay (fbgemm's caching tables)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
            CacheAlgorithm,
            EmbeddingLocation,
        )
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            SplitTableBatchedEmbeddingBagsCodegen,
            UVMCacheStatsIndex,
        )
    algorithm = CacheAlgorithm.LRU if policy == "lru" else CacheAlgorithm.LFU
    tables = SplitTableBatchedEmbeddingBagsCodegen(
        [(stream.num_rows, dim, EmbeddingLocation.MANAGED_CACHING, ComputeDevice.CUDA)],
        cache_load_factor=share,
        cache_algorithm=algorithm,
        gather_uvm_cache_stats=True,
        device=device,
    )
    keys = torch.from_numpy(np.ascontiguousarray(stream.keys)).to(device)
    bounds = np.searchsorted(stream.samples, np.arange(0, stream.num_samples + batch, batch))
    misses = torch.zeros((), dtype=torch.long, device=device)
    requested = 0
    with torch.no_grad():
        for start, stop in zip(bounds[:-1], bounds[1:], strict=False):
            if stop <= start:
                continue
            indices = keys[start:stop]
            offsets = torch.arange(stop - start + 1, device=device, dtype=torch.long)
            linear = torch.ops.fbgemm.linearize_cache_indices(
                tables.cache_hash_size_cumsum, indices, offsets
            )
            locations = torch.ops.fbgemm.lxu_cache_lookup(
                torch.unique(linear), tables.lxu_cache_state, tables.total_cache_hash_size
            )
            misses += (locations == -1).sum()
            requested += int(linear.numel())
            tables(indices, offsets)
    torch.cuda.synchronize(device)
    rates: dict[str, float | None] = {
        "lookup": 1.0 - int(misses) / requested if requested else float("nan"),
        "stats": None,
    }
    if policy == "lru":
        stats = tables.get_uvm_cache_stats().double().cpu()
        asked = float(stats[UVMCacheStatsIndex.num_requested_indices])
        missed = float(stats[UVMCacheStatsIndex.num_unique_misses])
        rates["stats"] = 1.0 - missed / asked if asked else float("nan")
    return rates
