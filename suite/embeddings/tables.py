"""Physical embedding tables: all tables in one fbgemm table-batched kernel with a fused
sparse optimizer, or plain ``torch.nn.EmbeddingBag`` tables for comparison."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Literal

import torch
from torch import nn

from suite.kernel_backend import table_backend

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


def initial_value_chunks(
    rows: list[int],
    dims: list[int],
    bounds: list[tuple[float, float]],
    seed: int,
    chunk_rows: int | None = None,
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """The tables' starting values as ``(t, first_row, values [n, dims_t])`` pieces of at
    most ``chunk_rows`` rows (default: each table whole), in table then row order: uniform
    in ``bounds[t]``, drawn from one generator seeded with ``seed`` (the one place tables
    are initialised, whatever the backend). The generator fills a tensor element by element
    in order, so the pieces are the same bits whatever ``chunk_rows``: a sharded run keeps
    only its own rows of each piece and never holds a whole table."""
    if chunk_rows is not None and chunk_rows < 1:
        raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
    generator = torch.Generator().manual_seed(seed)
    for t, (n, d, (low, high)) in enumerate(zip(rows, dims, bounds, strict=True)):
        mid, half = (low + high) / 2, (high - low) / 2
        step = max(n, 1) if chunk_rows is None else chunk_rows
        for start in range(0, max(n, 1), step):
            x = (torch.rand(min(step, n - start), d, generator=generator) * 2 - 1) * half
            yield t, start, (x + mid if mid else x)


def initial_values(
    rows: list[int], dims: list[int], bounds: list[tuple[float, float]], seed: int
) -> list[torch.Tensor]:
    """Each table's starting ``[rows_t, dims_t]`` values (:func:`initial_value_chunks`,
    whole)."""
    return [values for _, _, values in initial_value_chunks(rows, dims, bounds, seed)]


@torch.no_grad()
def copy_named(own: dict[str, torch.Tensor], given: dict[str, torch.Tensor], what: str) -> None:
    """Copy ``given`` into ``own`` (views of the real storage) name by name; a ValueError
    that names ``what`` where the names or a shape differ, before anything is copied."""
    if set(own) != set(given):
        missing, extra = sorted(set(own) - set(given)), sorted(set(given) - set(own))
        raise ValueError(f"{what}: missing {missing[:5]}, unexpected {extra[:5]}")
    for name, target in own.items():
        if target.shape != given[name].shape:
            shape, expected = list(given[name].shape), list(target.shape)
            raise ValueError(f"{what}: {name} is {shape}, expected {expected}")
    for name, target in own.items():
        target.copy_(given[name])


class PhysicalTables(nn.Module):
    """``T`` tables of ``rows[t] x dims[t]``, looked up together.

    ``forward(ids [B, T] int64) -> [B, sum(dims)]``: row ``ids[:, t]`` of table ``t``,
    concatenated over ``t``. Table ``t`` starts uniform in ``init_bounds[t]`` (default
    ``±sqrt(1/rows[t])``, as the DLRM reference), drawn from ``seed``
    (:func:`initial_value_chunks`). With ``materialize=False`` they hold no values and
    cannot look up: a sharded run builds them so, for their shapes and initialisation, and
    each rank fills only its own shards (:meth:`initial_chunks`).

    With ``backend="fbgemm"`` the tables live in one table-batched kernel whose update is
    fused into the backward pass (the kernel owns its optimizer state), except tables
    whose dim the kernel cannot take (not a multiple of 4): those, and every table with
    ``"torch"``, are ``torch.nn`` tables with sparse gradients, the tables of one dim
    stacked in one ``nn.Embedding`` (one lookup per dim). No table is widened. Where
    fbgemm-gpu does not import, ``"fbgemm"`` tables are torch tables
    (:func:`suite.kernel_backend.table_backend`).

    The tables own their sparse optimizer, as torchrec's fused tables do: the kernel's is
    fused, and the torch tables' :class:`RowwiseAdagrad` / ``torch.optim`` optimizer (the
    same update) is applied by :meth:`step` after ``backward``.
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
        materialize: bool = True,
    ) -> None:
        super().__init__()
        if len(rows) != len(dims) or not rows:
            raise ValueError("rows and dims must be equal-length, non-empty lists")
        bounds = uniform_bounds(rows) if init_bounds is None else list(init_bounds)
        if len(bounds) != len(rows):
            raise ValueError("init_bounds must give one (low, high) per table")
        self.rows, self.dims = list(rows), list(dims)
        self.backend = table_backend(backend)  # torch where fbgemm-gpu does not import
        self.optimizer_name = optimizer
        self.learning_rate = learning_rate
        self.init_bounds, self.seed, self.materialized = bounds, seed, materialize
        device = torch.device(device)
        in_kernel = [self.backend == "fbgemm" and d % FBGEMM_DIM_MULTIPLE == 0 for d in self.dims]
        self.kernel_tables = [t for t, k in enumerate(in_kernel) if k]
        self.bag_tables = [t for t, k in enumerate(in_kernel) if not k]
        self.kernel: nn.Module | None = None
        if self.kernel_tables and materialize:
            self.kernel = self._make_kernel(device, optimizer, learning_rate)
        self.bags = nn.ModuleList()
        self._bag_slices: dict[int, tuple[int, int, int]] = {}  # table -> (group, start, end)
        self.bag_groups = self._build_bags(device, materialize)
        if materialize:
            self._fill_initial_values()
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
        params = self.sparse_parameters()
        self.optimizer = make_sparse_optimizer(params, optimizer, learning_rate) if params else None

    def _build_bags(self, device: torch.device, materialize: bool) -> list[list[int]]:
        """The tables off the kernel: one stacked ``nn.Embedding`` per dim (none unless
        ``materialize``), table ``t`` at rows ``[start_t, start_t + rows_t)`` (a row-wise
        update does not see the stacking). Returns the tables of each group."""
        groups: dict[int, list[int]] = {}
        for t in self.bag_tables:
            groups.setdefault(self.dims[t], []).append(t)
        for g, group in enumerate(groups.values()):
            starts = [0]
            for t in group:
                starts.append(starts[-1] + self.rows[t])
                self._bag_slices[t] = (g, starts[-2], starts[-1])
            if materialize:
                # given its weight, nn.Embedding draws nothing from torch's global generator,
                # so the backbone built after it starts the same whatever the embedding method
                values = torch.empty(starts[-1], self.dims[group[0]], device=device)
                self.bags.append(nn.Embedding(*values.shape, sparse=True, _weight=values))
            ids = torch.tensor(group, device=device)
            self.register_buffer(f"_group_ids_{g}", ids, persistent=False)
            first_rows = torch.tensor(starts[:-1], device=device)
            self.register_buffer(f"_group_starts_{g}", first_rows, persistent=False)
        return list(groups.values())

    INIT_CHUNK_FLOATS = 1 << 20
    """Values drawn at a time when tables are filled (4 MiB): memory beyond the tables
    stays small."""

    def initial_chunks(self) -> Iterator[tuple[int, int, torch.Tensor]]:
        """``(t, first_row, values [n, dims_t])``: the tables' starting values a piece of
        at most :attr:`INIT_CHUNK_FLOATS` values at a time (:func:`initial_value_chunks`),
        whether or not these tables hold values."""
        rows = max(1, self.INIT_CHUNK_FLOATS // max(self.dims))
        return initial_value_chunks(self.rows, self.dims, self.init_bounds, self.seed, rows)

    @torch.no_grad()
    def _fill_initial_values(self) -> None:
        weights = self.weights()
        for t, start, values in self.initial_chunks():
            weights[t][start : start + values.shape[0]].copy_(values)

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
        if not self.materialized:
            raise RuntimeError("these tables were built without values (for sharding)")
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

    def step(self) -> None:
        """Apply the sparse update after ``backward`` (the fused kernel already has)."""
        if self.optimizer is not None:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)

    def _group_states(self, g: int) -> dict[str, torch.Tensor]:
        """The torch optimizer's per-row state of stacked group ``g`` (first dim: its rows)."""
        if self.optimizer is None:
            return {}
        state = self.optimizer.state[self.bags[g].weight]
        return {k: v for k, v in state.items() if torch.is_tensor(v) and v.ndim}

    def _table_states(self) -> list[dict[str, torch.Tensor]]:
        """Each table's optimizer state by name, first dim the table's rows: fbgemm's
        ``split_optimizer_states`` for kernel tables, row slices (views) of the torch
        optimizer's state for stacked tables."""
        out: list[dict[str, torch.Tensor]] = [{} for _ in self.rows]
        if self.kernel is not None:
            split = list(self.kernel.split_optimizer_states()) or [[] for _ in self.kernel_tables]
            for t, table in zip(self.kernel_tables, split, strict=True):
                out[t] = {f"state{k}": s for k, s in enumerate(table)}
        for t, (g, lo, hi) in self._bag_slices.items():
            out[t] = {k: v[lo:hi] for k, v in self._group_states(g).items()}
        return out

    def optimizer_states(self) -> list[list[torch.Tensor]]:
        """Each table's optimizer state tensors (first dim: the table's rows)."""
        return [list(states.values()) for states in self._table_states()]

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """Named views of the real storage: ``<t>.weight [rows_t, dims_t]`` and ``<t>.<state>``
        (the optimizer's per-row state), the fused kernel's step counter ``iter`` and the
        torch optimizer's per-group scalars ``group<g>.<name>``."""
        state: dict[str, torch.Tensor] = {}
        for t, (weight, states) in enumerate(
            zip(self.weights(), self._table_states(), strict=True)
        ):
            state[f"{t}.weight"] = weight.detach()
            state.update({f"{t}.{k}": v for k, v in states.items()})
        if self.kernel is not None and torch.is_tensor(getattr(self.kernel, "iter", None)):
            state["iter"] = self.kernel.iter
        if self.optimizer is not None:
            for g, bag in enumerate(self.bags):
                scalars = self.optimizer.state[bag.weight].items()
                state.update(
                    {f"group{g}.{k}": v for k, v in scalars if torch.is_tensor(v) and not v.ndim}
                )
        return state

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy :meth:`checkpoint_state`'s tensors back into the real storage."""
        copy_named(self.checkpoint_state(), tensors, "embedding tables")

    def weights(self) -> list[torch.Tensor]:
        """Each table's ``[rows_t, dims_t]`` weight (views of the real storage; none for
        tables built without values)."""
        if not self.materialized:
            return []
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

    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        """The real tensors behind :meth:`parameter_bytes` and :meth:`optimizer_bytes`."""
        parameters: list[torch.Tensor] = []
        optimizer: list[torch.Tensor] = []
        if self.kernel is not None:
            k = self.kernel
            parameters.append(k.weights_host if k.weights_host.numel() else k.weights_dev)
            optimizer = [s for table in k.split_optimizer_states() for s in table]
        parameters += [bag.weight for bag in self.bags]
        optimizer += [s for g in range(len(self.bags)) for s in self._group_states(g).values()]
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
    def step(self, closure=None):
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
