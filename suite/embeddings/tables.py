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


class PhysicalTables(nn.Module):
    """``T`` tables of ``rows[t] x dims[t]``, looked up together.

    ``forward(ids [B, T] int64) -> [B, sum(dims)]``: row ``ids[:, t]`` of table ``t``,
    concatenated over ``t``. Rows start uniform in ``±sqrt(1/rows)`` (as the DLRM
    reference), drawn from ``seed``.

    The tables own their sparse optimizer, as torchrec's fused tables do: with
    ``backend="fbgemm"`` the update is fused into the backward pass (the kernel owns its
    optimizer state); with ``"torch"`` the tables yield sparse gradients that their own
    :class:`RowwiseAdagrad` / ``torch.optim`` optimizer applies in :meth:`step`.
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
    ) -> None:
        super().__init__()
        if len(rows) != len(dims) or not rows:
            raise ValueError("rows and dims must be equal-length, non-empty lists")
        self.rows, self.dims = list(rows), list(dims)
        self.backend, self.optimizer_name = backend, optimizer
        self.learning_rate = learning_rate
        device = torch.device(device)
        generator = torch.Generator().manual_seed(seed)
        init = [
            (torch.rand(n, d, generator=generator) * 2 - 1) * math.sqrt(1.0 / n)
            for n, d in zip(rows, dims, strict=True)
        ]
        if backend == "fbgemm":
            self.kernel = self._make_kernel(device, optimizer, learning_rate)
            with torch.no_grad():
                for weight, values in zip(self.kernel.split_embedding_weights(), init, strict=True):
                    weight.copy_(values)
            self.bags = None
        else:
            self.kernel = None
            self.bags = nn.ModuleList()
            for values in init:
                bag = nn.EmbeddingBag(values.shape[0], values.shape[1], mode="sum", sparse=True)
                with torch.no_grad():
                    bag.weight.copy_(values)
                self.bags.append(bag.to(device))
        self.optimizer = (
            make_sparse_optimizer(self.sparse_parameters(), optimizer, learning_rate)
            if self.bags is not None
            else None
        )

    def _make_kernel(self, device: torch.device, optimizer: str, learning_rate: float) -> nn.Module:
        emb_optim, location, pooling, compute, tbe = _fbgemm()
        on_gpu = device.type == "cuda"
        specs = [
            (
                n,
                d,
                location.DEVICE if on_gpu else location.HOST,
                compute.CUDA if on_gpu else compute.CPU,
            )
            for n, d in zip(self.rows, self.dims, strict=True)
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
        """True when the kernel applies the sparse update itself."""
        return self.kernel is not None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, tables = ids.shape
        if self.kernel is not None:
            flat = ids.t().reshape(-1)
            offsets = torch.arange(batch * tables + 1, dtype=flat.dtype, device=flat.device)
            return self.kernel(flat, offsets)
        assert self.bags is not None
        return torch.cat([bag(ids[:, t : t + 1]) for t, bag in enumerate(self.bags)], dim=1)

    def step(self) -> None:
        """Apply the sparse update after ``backward`` (the fused kernel already has)."""
        if self.optimizer is not None:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)

    def optimizer_states(self) -> list[list[torch.Tensor]]:
        """Each table's optimizer state tensors (first dim: the table's rows), from
        fbgemm's ``split_optimizer_states`` or the torch optimizer."""
        if self.kernel is not None:
            split = list(self.kernel.split_optimizer_states()) or [[] for _ in self.rows]
            return [list(table) for table in split]
        assert self.bags is not None and self.optimizer is not None
        return [
            [v for v in self.optimizer.state[bag.weight].values() if torch.is_tensor(v) and v.ndim]
            for bag in self.bags
        ]

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """Named views of the real storage: ``<t>.weight [rows_t, dims_t]`` and
        ``<t>.state<k>`` (the optimizer's state, first dim rows_t where it is per row;
        fbgemm's ``split_embedding_weights`` / ``split_optimizer_states``), and the fused
        kernel's step counter ``iter``."""
        extra: dict[str, torch.Tensor] = {}
        if self.kernel is not None:
            split = list(self.kernel.split_optimizer_states()) or [[] for _ in self.rows]
            optimizer = [{f"state{k}": s for k, s in enumerate(table)} for table in split]
            if torch.is_tensor(getattr(self.kernel, "iter", None)):
                extra["iter"] = self.kernel.iter  # the kernel's step counter
        else:
            assert self.bags is not None and self.optimizer is not None
            optimizer = [
                {k: v for k, v in self.optimizer.state[bag.weight].items() if torch.is_tensor(v)}
                for bag in self.bags
            ]
        state: dict[str, torch.Tensor] = {}
        for t, (weight, states) in enumerate(zip(self.weights(), optimizer, strict=True)):
            state[f"{t}.weight"] = weight.detach()
            state.update({f"{t}.{k}": s for k, s in states.items()})
        return {**state, **extra}

    @torch.no_grad()
    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy :meth:`checkpoint_state`'s tensors back into the real storage."""
        own = self.checkpoint_state()
        if set(own) != set(tensors):
            missing, extra = sorted(set(own) - set(tensors)), sorted(set(tensors) - set(own))
            raise ValueError(f"embedding tables: missing {missing}, unexpected {extra}")
        for name, target in own.items():
            target.copy_(tensors[name])

    def weights(self) -> list[torch.Tensor]:
        """Each table's ``[rows_t, dims_t]`` weight (views of the real storage)."""
        if self.kernel is not None:
            return list(self.kernel.split_embedding_weights())
        assert self.bags is not None
        return [bag.weight for bag in self.bags]

    def sparse_parameters(self) -> list[nn.Parameter]:
        """Parameters with sparse gradients for a torch sparse optimizer (torch backend)."""
        return [] if self.bags is None else [bag.weight for bag in self.bags]

    def parameter_bytes(self) -> int:
        return sum(n * d for n, d in zip(self.rows, self.dims, strict=True)) * 4

    def optimizer_bytes(self) -> int:
        return 4 * sum(
            optimizer_state_floats(n, d, self.optimizer_name)
            for n, d in zip(self.rows, self.dims, strict=True)
        )

    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        """The real tensors behind :meth:`parameter_bytes` and :meth:`optimizer_bytes`."""
        if self.kernel is not None:
            states = [s for table in self.kernel.split_optimizer_states() for s in table]
            return {
                "parameters": [
                    self.kernel.weights_host
                    if self.kernel.weights_host.numel()
                    else self.kernel.weights_dev
                ],
                "optimizer": states,
            }
        return {
            "parameters": [bag.weight for bag in self.bags or []],
            "optimizer": [s for table in self.optimizer_states() for s in table],
        }


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
