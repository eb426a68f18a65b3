"""Low-precision tables for inference: a trained composed method's tables in fp16, int8
or int4, looked up by fbgemm's n-bit inference kernel.

:func:`quantize_embedding` keeps the method's index transform and combine and replaces
its physical tables with ``IntNBitTableBatchedEmbeddingBagsCodegen`` tables. Integer
tables are quantized row-wise: each row stores its values in ``bits`` each plus an fp16
scale and bias (``FloatToFusedNBitRowwiseQuantizedSBHalf``), so a value is ``q * scale +
bias`` with ``scale = (max - min) / (2**bits - 1)`` and ``bias = min`` of its row.
"""

from __future__ import annotations

import copy
import warnings
from typing import Literal, get_args

import torch

from suite.embeddings.base import ComposedEmbedding, EmbeddingMethod
from suite.kernel_backend import require_fbgemm

LowPrecision = Literal["fp16", "int8", "int4"]
Precision = Literal["fp32", LowPrecision]
PRECISIONS: tuple[str, ...] = get_args(Precision)
KERNEL_DIM_MULTIPLE = 4


def _fbgemm_inference():
    require_fbgemm("low-precision tables (fbgemm's n-bit inference kernel)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fbgemm_gpu.split_embedding_configs import SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
            EmbeddingLocation,
            PoolingMode,
        )
        from fbgemm_gpu.split_table_batched_embeddings_ops_inference import (
            IntNBitTableBatchedEmbeddingBagsCodegen,
        )
    return SparseType, EmbeddingLocation, PoolingMode, IntNBitTableBatchedEmbeddingBagsCodegen


class QuantizedEmbedding(EmbeddingMethod):
    """A composed method's transform and combine around low-precision n-bit tables.

    ``forward(sparse [B, F]) -> [B, F, D]`` float32, like the method it came from.
    Inference only: it has no trainable tables. Tables whose dim is not a multiple of 4
    (the kernel's requirement; e.g. the dim 1-3 tables of mixed-dim, which trained on the
    torch path) are stored padded with copies of their first column, which leaves each
    row's range, and so its quantization, unchanged; the padding is dropped after the
    lookup and counted in :meth:`memory` (so a dim-1 table costs what a dim-4 one does).
    """

    def __init__(self, method: ComposedEmbedding, precision: Precision) -> None:
        super().__init__()
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        sparse_type, location, pooling, kernel_cls = _fbgemm_inference()
        self.dim, self.precision = method.dim, precision
        self.transform = copy.deepcopy(method.transform)
        self.combine = copy.deepcopy(method.combine)
        for p in self.combine.parameters():
            p.requires_grad_(False)
        weights = [w.detach().float() for w in method.tables.weights()]
        device = weights[0].device
        dims = [w.shape[1] for w in weights]
        padded = [-(-d // KERNEL_DIM_MULTIPLE) * KERNEL_DIM_MULTIPLE for d in dims]
        weight_type = {
            "fp32": sparse_type.FP32,
            "fp16": sparse_type.FP16,
            "int8": sparse_type.INT8,
            "int4": sparse_type.INT4,
        }[precision]
        place = location.DEVICE if device.type == "cuda" else location.HOST
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.kernel = kernel_cls(
                [
                    ("", w.shape[0], d, weight_type, place)
                    for w, d in zip(weights, padded, strict=True)
                ],
                pooling_mode=pooling.SUM,
                device=device,
                output_dtype=sparse_type.FP32,
            )
            self.kernel.initialize_weights()
        bits = {"int8": 8, "int4": 4}.get(precision)
        for (dest, scale_bias), w, d in zip(
            self.kernel.split_embedding_weights(), weights, padded, strict=True
        ):
            if d != w.shape[1]:
                w = torch.cat([w, w[:, :1].expand(-1, d - w.shape[1])], dim=1)
            w = w.contiguous()
            if bits is None:
                dtype = torch.float16 if precision == "fp16" else torch.float32
                dest.view(dtype).copy_(w.to(dtype))
            else:
                fused = torch.ops.fbgemm.FloatToFusedNBitRowwiseQuantizedSBHalf(w.cpu(), bits)
                dest.copy_(fused[:, :-4].to(device))
                scale_bias.copy_(fused[:, -4:].to(device))
        self._padded = padded != dims
        columns: list[int] = []
        start = 0
        for d, p in zip(dims, padded, strict=True):
            columns.extend(range(start, start + d))
            start += p
        self.register_buffer("columns", torch.tensor(columns, device=device), persistent=False)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        ids = self.transform(sparse)
        batch, tables = ids.shape
        flat = ids.t().reshape(-1)
        offsets = torch.arange(batch * tables + 1, dtype=flat.dtype, device=flat.device)
        rows = self.kernel(flat, offsets)
        if self._padded:
            rows = rows.index_select(1, self.columns)
        return self.combine(rows)

    def _kernel_storage(self) -> list[torch.Tensor]:
        k = self.kernel
        return [t for t in (k.weights_host, k.weights_dev, k.weights_uvm) if t.numel()]

    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        aux = [*self.transform.auxiliary_tensors(), *self.combine.buffers()]
        if self._padded:
            aux.append(self.columns)
        return {
            "parameters": [*self._kernel_storage(), *self.combine.parameters()],
            "auxiliary": aux,
            "optimizer": [],
        }

    def flops_per_example(self) -> int:
        return self.combine.flops_per_example()


def quantizable_methods() -> list[str]:
    """The registered embedding methods whose tables quantize: every
    :class:`ComposedEmbedding` (``full``, ``hash``, ``mixed_dim``, ``qr``)."""
    from suite.registry import EMBEDDINGS

    return [n for n in EMBEDDINGS.names() if issubclass(EMBEDDINGS.get(n), ComposedEmbedding)]


def quantize_embedding(method: EmbeddingMethod, precision: Precision) -> QuantizedEmbedding:
    """``method``'s tables in ``precision`` for inference (``full``, ``hash``, ``qr``,
    ``mixed_dim``: any :class:`ComposedEmbedding`). ``fp32`` runs the same kernel
    unquantized, as a control."""
    if not isinstance(method, ComposedEmbedding):
        raise TypeError(
            "quantize_embedding needs a composed embedding method "
            f"({', '.join(quantizable_methods())}), got {type(method).__name__}"
        )
    return QuantizedEmbedding(method, precision).eval()
