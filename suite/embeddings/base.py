"""The embedding-method interface and its usual shape: index transform -> physical
tables -> combine.

Hashing, QR and mixed-dim are each a transform and a combine over :class:`PhysicalTables`,
so they share the fast kernel; a method whose storage is its point (FIITED) implements
:class:`EmbeddingMethod` directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn

from suite.config import Frozen
from suite.embeddings.tables import (
    FBGEMM_DIM_MULTIPLE,
    Backend,
    PhysicalTables,
    SparseOptimizer,
)
from suite.errors import SuiteError

Init = Literal["reference", "torch"]
"""``reference``: as the method's (or backbone's) reference code initialises it;
``torch``: the suite's earlier scheme (torch defaults for dense layers, every physical
table uniform in ``±sqrt(1/rows)``)."""


class EmbeddingOptions(Frozen):
    """Options every embedding method has.

    ``init``: for ``full`` and ``hash`` the reference (``create_emb`` in the DLRM
    reference, whose hashed tables are its ``--max-ind-range`` tables) and the ``torch``
    scheme coincide: uniform in ``±sqrt(1/n)``, ``n`` the table's rows. ``qr`` and
    ``mixed_dim`` say what their reference does; ``fiited`` draws its own pool.
    """

    dim: int = Field(16, ge=1, description="embedding dim D the backbone sees")
    backend: Backend = Field("fbgemm", description="fbgemm table-batched kernel, or torch.nn")
    init: Init = Field("reference", description="reference: as the method's reference code")

    fbgemm_dim_rule: ClassVar[bool] = True
    """Whether ``dim`` must suit fbgemm's kernel (False: the method's storage is its own)."""

    @model_validator(mode="after")
    def _fbgemm_dim(self) -> EmbeddingOptions:
        if self.fbgemm_dim_rule and self.backend == "fbgemm" and self.dim % FBGEMM_DIM_MULTIPLE:
            raise ValueError(
                f"dim: the fbgemm backend needs a multiple of {FBGEMM_DIM_MULTIPLE}, got {self.dim} "
                "(use backend: torch for other dims)"
            )
        return self


@dataclass(frozen=True)
class EmbeddingContext:
    """What a method may need from the data and the run to build itself."""

    cardinalities: list[int]
    device: torch.device
    seed: int
    sparse_optimizer: SparseOptimizer = "rowwise_adagrad"
    sparse_lr: float = 0.05
    feature_counts: Callable[[], list[np.ndarray]] | None = None
    """Lazily computed id popularity per feature on the training split."""
    materialize_tables: bool = True
    """False in a sharded run: physical tables get their shapes and initialisation but no
    values; each rank then fills only its own shards."""


@dataclass(frozen=True)
class EmbeddingBytes:
    """Memory a method really holds, in bytes."""

    parameters: int
    auxiliary: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.parameters + self.auxiliary + self.optimizer


class EmbeddingMethod(nn.Module):
    """Maps ``sparse [B, F]`` int64 ids to ``[B, F, dim]`` float32 vectors."""

    dim: int
    Options: ClassVar[type[EmbeddingOptions]]

    def memory(self) -> EmbeddingBytes:
        """Bytes of parameters, auxiliary structures and optimizer state: by default the
        bytes of :meth:`storage_tensors`, so the figure is the real tensors'."""
        total = {k: sum(t.nbytes for t in v) for k, v in self.storage_tensors().items()}
        return EmbeddingBytes(total["parameters"], total["auxiliary"], total["optimizer"])

    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        """The real tensors behind :meth:`memory`, by the same three keys."""
        raise NotImplementedError

    def fused_modules(self) -> list[nn.Module]:
        """Modules whose parameters a kernel updates itself (no torch optimizer)."""
        return []

    def sparse_parameters(self) -> list[nn.Parameter]:
        """Parameters with sparse gradients (need a sparse torch optimizer)."""
        return []

    def after_step(self, step: int) -> None:
        """The method's own sparse update, after ``backward`` (it owns its sparse
        optimizer, as torchrec's fused tables do), then its per-step hooks (e.g. to prune).
        ``step`` counts from 1. :func:`suite.engine.train.train_step` calls it."""

    def compression_steps(self) -> int:
        """Training steps after which the method holds its compressed size (0: from the
        start; in-training pruning such as FIITED's reaches it only after its schedule)."""
        return 0

    def auxiliary_parts(self) -> dict[str, list[torch.Tensor]]:
        """The ``auxiliary`` storage tensors by kind (``index``, ``utilities``, ...)."""
        return {"index": self.storage_tensors().get("auxiliary", [])}

    def flops_per_example(self) -> int:
        """Forward FLOPs per example spent by the method itself (combines, projections)."""
        return 0

    def layout(self) -> dict[str, Any]:
        """How the method stores its features (JSON-able), for run results."""
        return {}

    # Checkpoints (suite.engine.checkpoint) go through these four methods, so a method
    # that owns its storage decides how it is saved.

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """The method's whole training state as named tensors (weights, optimizer state,
        index maps): what a checkpoint writes and :meth:`load_checkpoint_state` takes back.
        Tensors named ``<group>.<what>`` for a group of :meth:`checkpoint_row_groups` are
        indexed by that group's rows on dim 0 (incremental checkpoints write only the rows
        modified since the last one)."""
        raise SuiteError(
            f"embedding method {type(self).__name__} cannot be checkpointed yet: it does not "
            "implement checkpoint_state() (drop train.checkpoint_every for it)"
        )

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Restore what :meth:`checkpoint_state` returned (same names and shapes)."""
        raise SuiteError(f"embedding method {type(self).__name__} cannot load checkpoints yet")

    def checkpoint_row_groups(self) -> dict[str, int]:
        """Row-indexed groups of :meth:`checkpoint_state`: name -> rows, in the column
        order of :meth:`checkpoint_row_ids`."""
        return {}

    def checkpoint_row_ids(self, sparse: torch.Tensor) -> torch.Tensor:
        """``sparse [B, F] -> [B, G]``: the row of each group a step reads (and so may
        modify), for incremental checkpoints."""
        return sparse.new_zeros(sparse.shape[0], 0)


def supports_checkpoints(method: type[EmbeddingMethod]) -> bool:
    """Whether ``method`` implements :meth:`EmbeddingMethod.checkpoint_state`."""
    return method.checkpoint_state is not EmbeddingMethod.checkpoint_state


class SelfUpdating(EmbeddingMethod):
    """A method that owns its sparse update (ALPT, ROBE, AdaEmbed, FIITED): a training
    forward keeps what it read and its output (:meth:`keep_for_update`); after backward,
    :meth:`take_for_update` hands them back once, the output's ``.grad`` filled, to the
    method's update in :meth:`after_step`."""

    _pending: tuple[torch.Tensor, ...] | None = None

    def keep_for_update(self, out: torch.Tensor, *read: torch.Tensor) -> torch.Tensor:
        """Keep ``out`` (made to hold its gradient) and ``read`` (what it was gathered at)
        when training with gradients on; return ``out``."""
        if self.training and torch.is_grad_enabled():
            out.requires_grad_()
            self._pending = (*read, out)
        return out

    def take_for_update(self) -> tuple[torch.Tensor, ...] | None:
        """``(*read, out)`` of the last training forward, once; None when nothing was kept
        or backward left ``out`` without a gradient."""
        pending, self._pending = self._pending, None
        if pending is None or pending[-1].grad is None:
            return None
        return pending

    def drop_kept(self) -> None:
        """Forget what a forward kept (a restored checkpoint replaces what it read)."""
        self._pending = None

    def after_step(self, step: int) -> None:
        """:meth:`update_read` on what the forward read and its output's gradient (a
        method that keeps more, or has per-step hooks, overrides this)."""
        kept = self.take_for_update()
        if kept is not None:
            read, out = kept
            self.update_read(read, out.grad)

    def update_read(self, read: torch.Tensor, grad: torch.Tensor, /) -> None:
        """The method's sparse update of ``read`` with ``grad``, the gradient at the
        output gathered there."""
        raise NotImplementedError


HISTORY = "history."
"""Prefix of the checkpoint tables of a method's history (its events), beside its buffers."""


def state_with_history(
    method: nn.Module, history: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The checkpoint state of a method that owns its storage and logs events (AdaEmbed,
    FIITED): every buffer at its current size, then each int64 table of ``history`` as
    ``history.<name>``."""
    state = {k: v.detach() for k, v in method.state_dict().items()}
    state.update({HISTORY + name: table for name, table in history.items()})
    return state


def load_with_history(
    method: nn.Module, tensors: dict[str, torch.Tensor], device: torch.device
) -> dict[str, torch.Tensor]:
    """Load the buffers of a :func:`state_with_history` state into ``method`` (on
    ``device``); return its history tables by name."""
    method.load_state_dict(
        {k: v.to(device) for k, v in tensors.items() if not k.startswith(HISTORY)}
    )
    return {k.removeprefix(HISTORY): v for k, v in tensors.items() if k.startswith(HISTORY)}


def events_table(events: list[dict[str, Any]], fields: tuple[str, ...]) -> torch.Tensor:
    """``events [E]`` as an int64 table ``[E, len(fields)]``, a column per field."""
    rows = [[int(e[f]) for f in fields] for e in events]
    return torch.tensor(rows, dtype=torch.int64).view(-1, len(fields))


def events_of(table: torch.Tensor, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """The events of an :func:`events_table`."""
    return [dict(zip(fields, map(int, row), strict=True)) for row in table.tolist()]


class IndexTransform(nn.Module):
    """Maps ``sparse [B, F]`` to ``ids [B, T]`` into ``T`` physical tables."""

    def table_rows(self) -> list[int]:
        raise NotImplementedError

    def auxiliary_tensors(self) -> list[torch.Tensor]:
        """Index maps or other tensors the transform keeps (counted as auxiliary)."""
        return []


class Combine(nn.Module):
    """Maps looked-up rows ``[B, sum(dims)]`` to ``[B, F, D]``; may own dense parameters."""

    def table_dims(self) -> list[int]:
        raise NotImplementedError

    def flops_per_example(self) -> int:
        return 0


class IdentityTransform(IndexTransform):
    """One table per feature, ids unchanged."""

    def __init__(self, cardinalities: list[int]) -> None:
        super().__init__()
        self.cardinalities = list(cardinalities)

    def table_rows(self) -> list[int]:
        return self.cardinalities

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        return sparse


class StackCombine(Combine):
    """``[B, F*D] -> [B, F, D]``: one table of dim ``D`` per feature."""

    def __init__(self, num_features: int, dim: int) -> None:
        super().__init__()
        self.num_features, self.dim = num_features, dim

    def table_dims(self) -> list[int]:
        return [self.dim] * self.num_features

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.view(rows.shape[0], self.num_features, self.dim)


class ComposedEmbedding(EmbeddingMethod):
    """transform -> one :class:`PhysicalTables` -> combine."""

    def __init__(
        self,
        transform: IndexTransform,
        combine: Combine,
        dim: int,
        context: EmbeddingContext,
        backend: Backend = "fbgemm",
        init_bounds: list[tuple[float, float]] | None = None,
    ) -> None:
        super().__init__()
        self.dim = dim
        self.transform = transform.to(context.device)
        self.combine = combine.to(context.device)
        self.tables = PhysicalTables(
            transform.table_rows(),
            combine.table_dims(),
            backend=backend,
            optimizer=context.sparse_optimizer,
            learning_rate=context.sparse_lr,
            device=context.device,
            seed=context.seed,
            init_bounds=init_bounds,
            materialize=context.materialize_tables,
        )

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        return self.combine(self.tables(self.transform(sparse)))

    def memory(self) -> EmbeddingBytes:
        aux = sum(t.nbytes for t in self.transform.auxiliary_tensors())
        return EmbeddingBytes(self.tables.parameter_bytes(), aux, self.tables.optimizer_bytes())

    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        tensors = self.tables.storage_tensors()
        return {**tensors, "auxiliary": self.transform.auxiliary_tensors()}

    def fused_modules(self) -> list[nn.Module]:
        return [self.tables] if self.tables.fused else []

    def sparse_parameters(self) -> list[nn.Parameter]:
        return self.tables.sparse_parameters()

    def after_step(self, step: int) -> None:
        self.tables.step()

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        state = {f"tables.{k}": v for k, v in self.tables.checkpoint_state().items()}
        for name, module in (("transform", self.transform), ("combine", self.combine)):
            state.update({f"{name}.{k}": v for k, v in module.state_dict().items()})
        return state

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self.tables.load_checkpoint_state(
            {k.removeprefix("tables."): v for k, v in tensors.items() if k.startswith("tables.")}
        )
        for name, module in (("transform", self.transform), ("combine", self.combine)):
            prefix = f"{name}."
            module.load_state_dict(
                {k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)}
            )

    def checkpoint_row_groups(self) -> dict[str, int]:
        return {f"tables.{t}": rows for t, rows in enumerate(self.tables.rows)}

    def checkpoint_row_ids(self, sparse: torch.Tensor) -> torch.Tensor:
        return self.transform(sparse)

    def flops_per_example(self) -> int:
        return self.combine.flops_per_example()

    def layout(self) -> dict[str, Any]:
        """Rows, dim and backend (``fbgemm`` kernel or ``torch``) of every physical table."""
        return {
            "table_rows": list(self.tables.rows),
            "table_dims": list(self.tables.dims),
            "table_backends": self.tables.table_backends(),
        }
