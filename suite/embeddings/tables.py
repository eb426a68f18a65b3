"""Physical embedding tables: all tables in one fbgemm table-batched kernel with a fused
sparse optimizer, or plain ``torch.nn.EmbeddingBag`` tables for comparison."""

from __future__ import annotations

import math
import warnings
from typing import Literal

import torch
from torch import nn

Backend = Literal["fbgemm", "torch"]
SparseOptimizer = Literal["rowwise_adagrad", "adagrad", "sgd"]

ADAGRAD_EPS = 1e-8


def _fbgemm():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fbgemm_gpu.split_embedding_configs import EmbOptimType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
            EmbeddingLocation,
            PoolingMode,
        )
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            SplitTableBatchedEmbeddingBagsCodegen,
        )
    return (
        EmbOptimType,
        EmbeddingLocation,
        PoolingMode,
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )


def optimizer_state_floats(rows: int, dim: int, optimizer: SparseOptimizer) -> int:
    """Optimizer-state floats one table holds."""
    return {"rowwise_adagrad": rows, "adagrad": rows * dim, "sgd": 0}[optimizer]


FBGEMM_DIM_MULTIPLE = 4
"""fbgemm's table-batched kernels need every table dim to be a multiple of 4."""


def uniform_bounds(rows: list[int]) -> list[tuple[float, float]]:
    """The DLRM reference's table init: uniform in ``±sqrt(1/n)``, ``n`` the table's rows."""
    return [(-math.sqrt(1.0 / n), math.sqrt(1.0 / n)) for n in rows]


def initial_values(
    rows: list[int], dims: list[int], bounds: list[tuple[float, float]], seed: int
) -> list[torch.Tensor]:
    """Each table's starting ``[rows_t, dims_t]`` values, uniform in ``bounds[t]``, drawn
    in table order from one generator seeded with ``seed`` (the one place tables are
    initialised, whatever the backend)."""
    generator = torch.Generator().manual_seed(seed)
    values = []
    for n, d, (low, high) in zip(rows, dims, bounds, strict=True):
        mid, half = (low + high) / 2, (high - low) / 2
        x = (torch.rand(n, d, generator=generator) * 2 - 1) * half
        values.append(x + mid if mid else x)
    return values


class PhysicalTables(nn.Module):
    """``T`` tables of ``rows[t] x dims[t]``, looked up together.

    ``forward(ids [B, T] int64) -> [B, sum(dims)]``: row ``ids[:, t]`` of table ``t``,
    concatenated over ``t``. Table ``t`` starts uniform in ``init_bounds[t]`` (default
    ``±sqrt(1/rows[t])``, as the DLRM reference), drawn from ``seed``
    (:func:`initial_values`).

    With ``backend="fbgemm"`` the tables live in one table-batched kernel whose update is
    fused into the backward pass (the kernel owns its optimizer state), except tables
    whose dim the kernel cannot take (not a multiple of 4): those, and every table with
    ``"torch"``, are ``torch.nn`` tables with sparse gradients that
    :class:`RowwiseAdagrad` / ``torch.optim`` apply (the same update), the tables of one
    dim stacked in one ``nn.Embedding`` (one lookup per dim). No table is widened.
    """

    def __init__(
        self,
        rows: list[int],
        dims: list[int],
        backend: Backend = "fbgemm",
        optimizer: SparseOptimizer = "rowwise_adagrad",
        learning_rate: float = 0.05,
        device: torch.device | str = "cpu",
        seed: int = 0,
        init_bounds: list[tuple[float, float]] | None = None,
    ) -> None:
        super().__init__()
        if len(rows) != len(dims) or not rows:
            raise ValueError("rows and dims must be equal-length, non-empty lists")
        bounds = uniform_bounds(rows) if init_bounds is None else list(init_bounds)
        if len(bounds) != len(rows):
            raise ValueError("init_bounds must give one (low, high) per table")
        self.rows, self.dims = list(rows), list(dims)
        self.backend, self.optimizer_name = backend, optimizer
        self.learning_rate = learning_rate
        device = torch.device(device)
        init = initial_values(self.rows, self.dims, bounds, seed)
        in_kernel = [backend == "fbgemm" and d % FBGEMM_DIM_MULTIPLE == 0 for d in self.dims]
        self.kernel_tables = [t for t, k in enumerate(in_kernel) if k]
        self.bag_tables = [t for t, k in enumerate(in_kernel) if not k]
        self.kernel: nn.Module | None = None
        if self.kernel_tables:
            self.kernel = self._make_kernel(device, optimizer, learning_rate)
            with torch.no_grad():
                weights = self.kernel.split_embedding_weights()
                for weight, t in zip(weights, self.kernel_tables, strict=True):
                    weight.copy_(init[t])
        self.bags = nn.ModuleList()
        self._bag_slices: dict[int, tuple[int, int, int]] = {}  # table -> (group, start, end)
        self.bag_groups = self._build_bags(init, device)
        # the output is [kernel tables | group 0 | group 1 ...]; put columns in table order
        layout = [*self.kernel_tables, *(t for group in self.bag_groups for t in group)]
        self._in_order = layout == list(range(len(self.rows)))
        self._kernel_prefix = self.kernel_tables == list(range(len(self.kernel_tables)))
        kernel_ids = (
            None if self._kernel_prefix else torch.tensor(self.kernel_tables, device=device)
        )
        self.register_buffer("_kernel_ids", kernel_ids, persistent=False)
        columns = None
        if not self._in_order:
            starts, col = {}, 0
            for t in layout:
                starts[t], col = col, col + self.dims[t]
            order = [c for t in range(len(rows)) for c in range(starts[t], starts[t] + dims[t])]
            columns = torch.tensor(order, device=device)
        self.register_buffer("_columns", columns, persistent=False)

    def _build_bags(self, init: list[torch.Tensor], device: torch.device) -> list[list[int]]:
        """The tables off the kernel: one stacked ``nn.Embedding`` per dim, table ``t`` at
        rows ``[start_t, start_t + rows_t)`` (a row-wise update does not see the stacking).
        Returns the tables of each group."""
        groups: dict[int, list[int]] = {}
        for t in self.bag_tables:
            groups.setdefault(self.dims[t], []).append(t)
        for g, group in enumerate(groups.values()):
            starts = [0]
            for t in group:
                starts.append(starts[-1] + self.rows[t])
                self._bag_slices[t] = (g, starts[-2], starts[-1])
            # given its weight, nn.Embedding draws nothing from torch's global generator, so
            # the backbone built after it starts the same whatever the embedding method
            values = torch.cat([init[t] for t in group]).to(device)
            self.bags.append(nn.Embedding(starts[-1], values.shape[1], sparse=True, _weight=values))
            ids = torch.tensor(group, device=device)
            self.register_buffer(f"_group_ids_{g}", ids, persistent=False)
            first_rows = torch.tensor(starts[:-1], device=device)
            self.register_buffer(f"_group_starts_{g}", first_rows, persistent=False)
        return list(groups.values())

    def table_backends(self) -> list[str]:
        """Where each table lives: ``"fbgemm"`` (the fused kernel) or ``"torch"``."""
        kernel = set(self.kernel_tables)
        return ["fbgemm" if t in kernel else "torch" for t in range(len(self.rows))]

    def _make_kernel(self, device: torch.device, optimizer: str, learning_rate: float) -> nn.Module:
        emb_optim, location, pooling, compute, tbe = _fbgemm()
        on_gpu = device.type == "cuda"
        specs = [
            (
                self.rows[t],
                self.dims[t],
                location.DEVICE if on_gpu else location.HOST,
                compute.CUDA if on_gpu else compute.CPU,
            )
            for t in self.kernel_tables
        ]
        kind = {
            "rowwise_adagrad": emb_optim.EXACT_ROWWISE_ADAGRAD,
            "adagrad": emb_optim.EXACT_ADAGRAD,
            "sgd": emb_optim.EXACT_SGD,
        }[optimizer]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tbe(
                specs,
                optimizer=kind,
                learning_rate=learning_rate,
                eps=ADAGRAD_EPS,
                pooling_mode=pooling.SUM,
                device=device,
            )

    @property
    def fused(self) -> bool:
        """True when a kernel applies (some of) the sparse update itself."""
        return self.kernel is not None

    def _kernel_lookup(self, ids: torch.Tensor) -> torch.Tensor:
        assert self.kernel is not None
        batch, tables = ids.shape
        flat = ids.t().reshape(-1)
        offsets = torch.arange(batch * tables + 1, dtype=flat.dtype, device=flat.device)
        return self.kernel(flat, offsets)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch = ids.shape[0]
        pieces = []
        if self.kernel is not None:
            if len(self.kernel_tables) == len(self.rows):
                kernel_ids = ids
            elif self._kernel_prefix:
                kernel_ids = ids[:, : len(self.kernel_tables)]
            else:
                kernel_ids = ids.index_select(1, self._kernel_ids)
            pieces.append(self._kernel_lookup(kernel_ids))
        for g, bag in enumerate(self.bags):
            group_ids = ids.index_select(1, getattr(self, f"_group_ids_{g}"))
            rows = bag(group_ids + getattr(self, f"_group_starts_{g}"))  # [B, T_g, d]
            pieces.append(rows.reshape(batch, -1))
        out = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)
        return out if self._in_order else out.index_select(1, self._columns)

    def weights(self) -> list[torch.Tensor]:
        """Each table's ``[rows_t, dims_t]`` weight (views of the real storage)."""
        out: list[torch.Tensor | None] = [None] * len(self.rows)
        if self.kernel is not None:
            for t, w in zip(self.kernel_tables, self.kernel.split_embedding_weights(), strict=True):
                out[t] = w
        for t, (g, lo, hi) in self._bag_slices.items():
            out[t] = self.bags[g].weight[lo:hi]
        return [w for w in out if w is not None]

    def sparse_parameters(self) -> list[nn.Parameter]:
        """Parameters with sparse gradients for a torch sparse optimizer (tables off the kernel)."""
        return [bag.weight for bag in self.bags]

    def parameter_bytes(self) -> int:
        return sum(n * d for n, d in zip(self.rows, self.dims, strict=True)) * 4

    def optimizer_bytes(self, tables: list[int] | None = None) -> int:
        """Optimizer-state bytes of ``tables`` (default all), wherever that state lives."""
        chosen = range(len(self.rows)) if tables is None else tables
        return 4 * sum(
            optimizer_state_floats(self.rows[t], self.dims[t], self.optimizer_name) for t in chosen
        )

    def unfused_optimizer_bytes(self) -> int:
        """Optimizer-state bytes the torch sparse optimizer holds for the tables off the kernel."""
        return self.optimizer_bytes(self.bag_tables)

    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        """The real tensors behind :meth:`parameter_bytes` and the kernel's share of
        :meth:`optimizer_bytes` (the rest lives in the torch sparse optimizer)."""
        parameters: list[torch.Tensor] = []
        optimizer: list[torch.Tensor] = []
        if self.kernel is not None:
            k = self.kernel
            parameters.append(k.weights_host if k.weights_host.numel() else k.weights_dev)
            optimizer = [s for table in k.split_optimizer_states() for s in table]
        parameters += [bag.weight for bag in self.bags]
        return {"parameters": parameters, "optimizer": optimizer}


class RowwiseAdagrad(torch.optim.Optimizer):
    """Row-wise Adagrad for sparse gradients: one accumulator per row, fed the mean of
    the row's squared gradient (the update fbgemm's ``EXACT_ROWWISE_ADAGRAD`` applies)."""

    def __init__(self, params: list[nn.Parameter], lr: float, eps: float = ADAGRAD_EPS) -> None:
        super().__init__(params, {"lr": lr, "eps": eps})
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["sum"] = torch.zeros(p.shape[0], device=p.device)

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.coalesce() if p.grad.is_sparse else p.grad.to_sparse(1).coalesce()
                rows, values = grad.indices()[0], grad.values()
                acc = self.state[p]["sum"]
                acc.index_add_(0, rows, values.pow(2).mean(dim=1))
                scale = group["lr"] / (acc[rows].sqrt() + group["eps"])
                p.index_add_(0, rows, -values * scale[:, None])
        return None

    def state_bytes(self) -> int:
        return sum(s["sum"].nbytes for s in self.state.values())


def make_sparse_optimizer(
    params: list[nn.Parameter], name: SparseOptimizer, lr: float
) -> torch.optim.Optimizer:
    """The torch optimizer matching a fused fbgemm optimizer, for the torch backend."""
    if name == "rowwise_adagrad":
        return RowwiseAdagrad(params, lr=lr)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, eps=ADAGRAD_EPS, initial_accumulator_value=0.0)
    return torch.optim.SGD(params, lr=lr)
