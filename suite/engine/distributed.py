"""Distributed training on TorchRec: embedding tables sharded by ``DistributedModelParallel``
(fbgemm kernels, TorchRec's planner), the dense part data-parallel, one process per rank
as ``torchrun`` starts them.

A composed embedding method (transform -> physical tables -> combine: ``full``, ``hash``,
``qr``, ``mixed_dim``) keeps its transform and combine on every rank; its physical tables
become one TorchRec ``EmbeddingBagCollection`` that DMP shards. The sharded run computes
what the one-process run computes: each rank takes an equal slice of every global batch,
its loss is its share of the global batch's mean loss times ``world``, so that DDP's
average of the dense gradients, and the embedding gradients TorchRec's all-to-all sends
back divided by ``world`` (its default gradient division), are the global batch's; the
tables start from the same values and use the same fused optimizer.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any

import torch
from torch import nn

from suite.config import RunConfig
from suite.embeddings.base import ComposedEmbedding, EmbeddingBytes, EmbeddingMethod
from suite.embeddings.tables import ADAGRAD_EPS, FBGEMM_DIM_MULTIPLE, PhysicalTables, copy_named
from suite.engine import planning
from suite.engine.comm_codec import CodecStats
from suite.engine.parallel import Parallel
from suite.engine.planning import quiet_torchrec
from suite.errors import ConfigError
from suite.kernel_backend import require_fbgemm
from suite.models.base import Ranks, RecModel

SHARDING_TYPES = ("table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise")
"""The types a sharded run's tables may take. TorchRec's ``data_parallel`` (a replica of a
table per rank) is left out: its tables lose the fused sparse optimizer when sharded
(TorchRec 1.8 drops the in-backward optimizer of replicated tables), so they would not
train."""


def table_names(method: ComposedEmbedding, features: list[str]) -> list[str]:
    """One name per physical table: the feature's when a table is a feature's only table,
    else ``<feature>_<k>`` (``k`` counting that feature's tables)."""
    count = len(method.tables.rows)
    sources = getattr(method.transform, "source", None)
    owner = sources.tolist() if isinstance(sources, torch.Tensor) else list(range(count))
    if len(owner) != count:
        owner = list(range(count))
    seen: dict[int, int] = {}
    names = []
    for t in range(count):
        feature = features[owner[t]] if owner[t] < len(features) else f"t{t}"
        k = seen.get(owner[t], 0)
        seen[owner[t]] = k + 1
        names.append(feature if owner.count(owner[t]) == 1 else f"{feature}_{k}")
    return names


class ShardedEmbedding(EmbeddingMethod):
    """A composed method whose physical tables are one TorchRec ``EmbeddingBagCollection``.

    ``forward(sparse [B, F]) -> [B, F, dim]``: the method's transform gives ``ids [B, T]``,
    the collection looks up one row per table and sample (a ``KeyedJaggedTensor`` of
    lengths 1), the method's combine makes ``[B, F, dim]``.
    """

    def __init__(self, source: ComposedEmbedding, names: list[str]) -> None:
        super().__init__()
        rows, dims = source.tables.rows, source.tables.dims
        if any(d % FBGEMM_DIM_MULTIPLE for d in dims):
            raise ConfigError(
                f"embedding.name={type(source).__name__}: sharded tables need dims that are "
                f"multiples of {FBGEMM_DIM_MULTIPLE}, got {sorted(set(dims))}"
            )
        self.dim = source.dim
        self.names = names
        self.transform = source.transform
        self.combine = source.combine
        self.source_memory = source.memory()
        self.source_layout = source.layout()
        self.flops = source.flops_per_example()
        with quiet_torchrec():
            self.ebc = planning.meta_collection(names, list(rows), list(dims))

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        from torchrec import KeyedJaggedTensor

        ids = self.transform(sparse)
        batch, tables = ids.shape
        features = KeyedJaggedTensor.from_lengths_sync(
            keys=self.names,
            values=ids.t().reshape(-1),
            lengths=torch.ones(batch * tables, dtype=torch.int32, device=ids.device),
        )
        pooled = self.ebc(features)
        if pooled.keys() == self.names:
            rows = pooled.values()
        else:  # a sharded collection groups its outputs by sharding type
            by_name = pooled.to_dict()
            rows = torch.cat([by_name[name] for name in self.names], dim=1)
        return self.combine(rows)

    def memory(self) -> EmbeddingBytes:
        """The whole (unsharded) method's bytes, summed over ranks."""
        return self.source_memory

    def fused_modules(self) -> list[nn.Module]:
        return [self.ebc]

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """This rank's part of the tables, as named views: ``ebc.<key>.<i>`` for the
        ``i``-th local shard of each table and ``optim.<table>.<state>.<i>`` of its fused
        optimizer's state (the transform's and combine's state is the dense part's)."""
        state: dict[str, torch.Tensor] = {}
        for key, value in self.ebc.state_dict().items():
            state.update(_local_pieces(f"ebc.{key}", value))
        for per_table in self.ebc.fused_optimizer.state_dict()["state"].values():
            for key, value in per_table.items():
                state.update(_local_pieces(f"optim.{key}", value))
        return state

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy :meth:`checkpoint_state`'s tensors back into this rank's shards (the same
        ranks and sharding plan as the run that wrote them)."""
        copy_named(self.checkpoint_state(), tensors, "sharded tables")

    def flops_per_example(self) -> int:
        return self.flops

    def layout(self) -> dict[str, Any]:
        return {**self.source_layout, "table_names": list(self.names)}


def _local_pieces(name: str, value: Any) -> dict[str, torch.Tensor]:
    """``name.<i>``: this rank's ``i``-th piece of a sharded or replicated state entry."""
    if hasattr(value, "local_shards"):
        return {f"{name}.{i}": shard.tensor for i, shard in enumerate(value.local_shards())}
    if hasattr(value, "to_local"):
        return {f"{name}.0": value.to_local()}
    return {f"{name}.0": value}


class ShardedRecModel(RecModel):
    """A :class:`~suite.models.base.RecModel` under DMP: ``forward(dense [B, Dd],
    sparse [B, F]) -> logits [B]``, ``embedding``, ``payload``, :meth:`dense_parameters`,
    :meth:`flops_per_example`, and where its state lives: its :attr:`ranks` (the job's),
    this rank's :meth:`local_state`, the plan and the all-to-all's wire figures."""

    def __init__(
        self,
        dmp: nn.Module,
        inner: RecModel,
        plan: dict[str, Any],
        parallel: Parallel,
        wire: CodecStats | None = None,
    ) -> None:
        nn.Module.__init__(self)  # not RecModel's: the embedding and backbone are DMP's
        self.dmp = dmp
        self._inner = [inner]  # not a submodule: DMP owns it
        self._plan = plan
        self._ranks = parallel
        self.wire = wire

    @property
    def ranks(self) -> Parallel:
        return self._ranks

    def wire_figures(self) -> dict[str, float]:
        """With TorchRec's quantized all-to-all: the embedding payloads' bytes before and
        after encoding summed over ranks (forward and backward), their ratio, and the
        codec's seconds summed over ranks. Collective: every rank must call it."""
        if self.wire is None:
            return {}
        raw, wire, seconds = self._ranks.sum(
            [float(self.wire.raw_bytes), float(self.wire.wire_bytes), self.wire.seconds]
        )
        return {
            "comm_raw_bytes": raw,
            "comm_wire_bytes": wire,
            "comm_compression_ratio": raw / wire if wire else float("nan"),
            "comm_codec_seconds": seconds,
        }

    def plan(self) -> dict[str, Any]:
        """The sharding plan's summary (see :func:`format_plan`)."""
        return self._plan

    def placement(self) -> dict[str, Any]:
        return {"world_size": self._ranks.world, "sharding_plan": self._plan}

    def whole_module(self) -> nn.Module | None:
        return None

    @property
    def embedding(self) -> EmbeddingMethod:
        return self._inner[0].embedding

    @property
    def payload(self) -> nn.Module | None:
        return self._inner[0].payload

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        return self.dmp(dense, sparse)

    def dense_parameters(self) -> list[nn.Parameter]:
        """The data-parallel parameters (backbone, combine, codec), the ones DDP syncs."""
        inner = self._inner[0]
        return [
            p
            for name, p in inner.named_parameters()
            if p.requires_grad and not name.startswith("embedding.ebc.")
        ]

    def net_parameters(self) -> list[nn.Parameter]:
        """The backbone's data-parallel parameters (what ``train.weight_decay`` decays)."""
        return [
            p
            for name, p in self._inner[0].named_parameters()
            if p.requires_grad and name.startswith("backbone.")
        ]

    def flops_per_example(self) -> int:
        return self._inner[0].flops_per_example()

    def dense_checkpoint_state(self) -> dict[str, torch.Tensor]:
        """The replicated state (backbone, the method's transform and combine, codec) by
        name, as views; the tables are the embedding's :meth:`ShardedEmbedding.checkpoint_state`."""
        return {
            k: v
            for k, v in self._inner[0].state_dict().items()
            if not k.startswith("embedding.ebc.")
        }

    def load_dense_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        copy_named(self.dense_checkpoint_state(), tensors, "dense state")

    def local_state(self) -> dict[str, torch.Tensor]:
        """This rank's tensors of every state entry, as views: ``<entry>.<i>`` for its
        ``i``-th local piece (a sharded table's local shards; one for the rest)."""
        out: dict[str, torch.Tensor] = {}
        for name, value in self.dmp.state_dict().items():
            out.update(_local_pieces(name, value))
        return out

    def snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of this rank's part of the model's state (for ``checkpoint: best``)."""
        return {k: v.detach().clone() for k, v in self.local_state().items()}

    def restore(self, saved: dict[str, torch.Tensor]) -> None:
        """Put back what :meth:`snapshot` took, in place."""
        copy_named(self.local_state(), saved, "best state")

    def table_shards(self) -> dict[str, list[tuple[int, int, torch.Tensor]]]:
        """Each table's pieces on this rank: ``(first_row, first_column, tensor)``."""
        return {
            name: _placed_pieces(value)
            for name, value in _table_weights(self.dmp.state_dict()).items()
        }


def wire_precision(codec: str, device: torch.device) -> str | None:
    """The precision TorchRec's quantized all-to-all sends for ``comm.codec`` (``None``:
    not TorchRec's; gloo has no bf16 collectives, so bf16 goes as fp16 on CPU)."""
    if codec not in ("fp16", "bf16"):
        return None
    return "fp16" if codec == "bf16" and device.type != "cuda" else codec


class CountingCodec:
    """A TorchRec ``QuantizedCommCodec`` that also counts what it codes: bytes before
    (``raw``) and after (``wire``) encoding and the seconds spent encoding and decoding."""

    def __init__(self, inner: Any, stats: CodecStats) -> None:
        self._inner = inner
        self._stats = stats

    def encode(self, input_tensor: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        start = time.perf_counter()
        out = self._inner.encode(input_tensor, ctx)
        self._stats.seconds += time.perf_counter() - start
        self._stats.raw_bytes += input_tensor.numel() * input_tensor.element_size()
        self._stats.wire_bytes += out.numel() * out.element_size()
        self._stats.calls += 1
        return out

    def decode(self, input_grad: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        start = time.perf_counter()
        out = self._inner.decode(input_grad, ctx)
        self._stats.seconds += time.perf_counter() - start
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _sharder(precision: str | None, device: torch.device, stats: CodecStats) -> Any:
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.fbgemm_qcomm_codec import (
        CommType,
        QCommsConfig,
        get_qcomm_codecs_registry,
    )

    class Sharder(EmbeddingBagCollectionSharder):
        """TorchRec's sharder offering row-wise shards on CPU too (fbgemm's CPU
        bucketize kernel serves them; TorchRec lists them for GPUs only)."""

        def sharding_types(self, compute_device_type: str) -> list[str]:
            return list(SHARDING_TYPES)

    if precision is None:
        return Sharder()
    kind = CommType(precision)
    registry = get_qcomm_codecs_registry(
        QCommsConfig(forward_precision=kind, backward_precision=kind), device=device
    )
    counted = {
        op: dataclasses.replace(
            codecs,
            forward=CountingCodec(codecs.forward, stats),
            backward=CountingCodec(codecs.backward, stats),
        )
        for op, codecs in (registry or {}).items()
    }
    return Sharder(qcomm_codecs_registry=counted)


def _optimizer_in_backward(tables: nn.Module, config: RunConfig) -> None:
    """The one-process run's sparse optimizer on the tables, as TorchRec takes it: fused
    into the fbgemm kernels of sharded tables, applied in backward to replicated ones."""
    from torchrec import optim as trec_optim
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    train = config.train
    kind, options = {
        "rowwise_adagrad": (trec_optim.RowWiseAdagrad, {"eps": ADAGRAD_EPS}),
        "adagrad": (trec_optim.Adagrad, {"eps": ADAGRAD_EPS}),
        "sgd": (trec_optim.SGD, {}),
    }[train.sparse_optimizer]
    apply_optimizer_in_backward(kind, tables.parameters(), {"lr": train.sparse_lr, **options})


def _table_weights(state: dict[str, Any]) -> dict[str, Any]:
    """Each table's weight entry in a DMP's state dict, by table name."""
    return {
        key.split(".embedding_bags.")[1].removesuffix(".weight"): value
        for key, value in state.items()
        if key.endswith(".weight") and ".embedding_bags." in key
    }


def _placed_pieces(value: Any) -> list[tuple[int, int, torch.Tensor]]:
    """``(first_row, first_column, tensor)`` of this rank's pieces of a table's weight:
    a sharded table's local shards, or the whole of a table every rank holds."""
    if not hasattr(value, "local_shards"):
        return [(0, 0, value)]
    return [(*shard.metadata.shard_offsets, shard.tensor) for shard in value.local_shards()]


@torch.no_grad()
def _fill_initial_values(dmp: nn.Module, names: list[str], tables: PhysicalTables) -> None:
    """Every local shard of every table from the one-process starting values, drawn a
    piece at a time: a rank holds its shards and one piece, never a whole table."""
    pieces = {
        name: _placed_pieces(value) for name, value in _table_weights(dmp.state_dict()).items()
    }
    for t, start, values in tables.initial_chunks():
        end = start + values.shape[0]
        for r0, c0, target in pieces[names[t]]:
            lo, hi = max(start, r0), min(end, r0 + target.shape[0])
            if lo < hi:
                columns = values[lo - start : hi - start, c0 : c0 + target.shape[1]]
                target[lo - r0 : hi - r0].copy_(columns)


def shardable_methods(registry: Any) -> list[str]:
    """The embedding methods of ``registry`` whose tables can be sharded: the composed
    ones (transform -> physical tables -> combine)."""
    return [name for name in registry.names() if issubclass(registry.get(name), ComposedEmbedding)]


def check_shardable(config: RunConfig) -> None:
    """Refuse, in one line, an embedding method whose tables cannot be sharded."""
    registry = config.embedding.registry
    if not issubclass(registry.get(config.embedding.name), ComposedEmbedding):
        raise ConfigError(
            f"embedding.name={config.embedding.name} cannot run sharded: its storage is not "
            "table-batched physical tables "
            f"(sharded methods: {', '.join(shardable_methods(registry))})"
        )
    require_fbgemm(f"embedding.name={config.embedding.name} sharded over ranks (TorchRec)")


def check_distributed(config: RunConfig, ranks: Ranks) -> None:
    """What a run over ``ranks`` of a ``torch.distributed`` job cannot do, refused in one
    line before any work (nothing for one process)."""
    if not ranks.distributed:
        return
    task = config.task.registry.get(config.task.name)
    if not getattr(task, "distributed", False):
        registry = config.task.registry
        runs = sorted(n for n in registry.names() if getattr(registry.get(n), "distributed", False))
        raise ConfigError(
            f"task.name={config.task.name} runs in one process; distributed runs "
            f"({ranks.world} ranks) take the tasks: {', '.join(runs)}"
        )
    check_shardable(config)


def shard_model(
    model: RecModel, config: RunConfig, parallel: Parallel, features: list[str]
) -> ShardedRecModel:
    """``model`` (built as for one process, same seed) with its physical tables sharded
    over the job's ranks by TorchRec's planner under ``config.sharding``; starts from the
    same values as ``model``."""
    check_shardable(config)
    assert isinstance(model.embedding, ComposedEmbedding)
    tables = model.embedding.tables
    if tables.bag_tables:
        raise ConfigError(
            f"embedding.name={config.embedding.name}: tables of dims "
            f"{sorted({tables.dims[t] for t in tables.bag_tables})} are torch tables; sharded "
            f"runs need fbgemm tables (dims multiples of {FBGEMM_DIM_MULTIPLE}, backend fbgemm)"
        )
    planning.drop_fx_tracing_note()  # logged in training's forward, outside the calls below
    with quiet_torchrec():
        return _shard(model, config, parallel, table_names(model.embedding, features))


def _shard(
    model: RecModel, config: RunConfig, parallel: Parallel, names: list[str]
) -> ShardedRecModel:
    """:func:`shard_model`'s TorchRec part: plan the tables ``names``, wrap ``model`` in
    DMP, fill the shards from the one-process starting values."""
    import torch.distributed as dist
    from torchrec.distributed.comm_ops import set_gradient_division
    from torchrec.distributed.model_parallel import DistributedModelParallel

    assert isinstance(model.embedding, ComposedEmbedding)
    tables = model.embedding.tables
    rows, dims = list(tables.rows), list(tables.dims)
    sharded = ShardedEmbedding(model.embedding, names)
    model.embedding = sharded
    device = next(model.backbone.parameters()).device
    set_gradient_division(True)  # what the loss scaling above relies on (TorchRec's default)
    _optimizer_in_backward(sharded.ebc, config)
    precision = wire_precision(config.comm.codec, device)
    if precision is not None:  # the real all-to-all carries it: no simulated payload codec
        model.payload = None
    stats = CodecStats()
    sharder = _sharder(precision, device, stats)
    where = planning.topology(
        parallel.world, device.type, int(os.environ.get("LOCAL_WORLD_SIZE", parallel.world))
    )
    planner = planning.planner(
        where,
        max(1, math.ceil(config.train.batch_size / parallel.world)),
        planning.constraints(config.sharding, names, dims, parallel.world),
    )
    plan = planner.collective_plan(model, [sharder], dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(
        model, device=device, plan=plan, sharders=[sharder], init_data_parallel=True
    )
    _fill_initial_values(dmp, names, tables)
    opt = {"rowwise_adagrad": lambda n, d: n, "adagrad": lambda n, d: n * d, "sgd": lambda n, d: 0}
    floats = [opt[config.train.sparse_optimizer](n, d) for n, d in zip(rows, dims, strict=True)]
    summary = planning.plan_summary(plan, names, rows, dims, parallel.world, planner, floats)
    summary["all_to_all"] = (
        f"TorchRec quantized comms, {precision} forward and backward"
        if precision
        else f"fp32 (comm.codec={config.comm.codec}: simulated on the pooled embeddings)"
        if config.comm.codec != "none"
        else "fp32"
    )
    return ShardedRecModel(dmp, model, summary, parallel, stats if precision else None)
