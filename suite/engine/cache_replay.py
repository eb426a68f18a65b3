"""Replay an access stream through fbgemm's own caching tables (CUDA only).

One table-batched embedding of all rows placed as ``EmbeddingLocation.MANAGED_CACHING``
(rows in host memory, a GPU cache of ``share`` of them) with fbgemm's LRU or LFU policy.
Each batch of samples is one forward call, one bag per lookup; fbgemm's own UVM cache
statistics give the hit rate ``1 - unique misses / requested indices``.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from suite.data.access import AccessStream
from suite.kernel_backend import require_fbgemm


def replay(
    stream: AccessStream, share: float, policy: str, batch: int, device: torch.device, dim: int = 4
) -> float:
    """fbgemm's cache hit rate on ``stream`` with a cache of ``share`` of all rows."""
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
    with torch.no_grad():
        for start, stop in zip(bounds[:-1], bounds[1:], strict=False):
            if stop <= start:
                continue
            indices = keys[start:stop]
            offsets = torch.arange(stop - start + 1, device=device, dtype=torch.long)
            tables(indices, offsets)
    torch.cuda.synchronize(device)
    stats = tables.get_uvm_cache_stats().double().cpu()
    requested = float(stats[UVMCacheStatsIndex.num_requested_indices])
    misses = float(stats[UVMCacheStatsIndex.num_unique_misses])
    return 1.0 - misses / requested if requested else float("nan")
