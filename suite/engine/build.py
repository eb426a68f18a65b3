"""From a resolved config and a prepared dataset to a model on its device."""

from __future__ import annotations

import math
import random

import numpy as np
import torch

from suite.config import RunConfig
from suite.data.prepared import PreparedDataset
from suite.embeddings.base import EmbeddingContext
from suite.engine.comm_codec import CommCodec
from suite.engine.parallel import Parallel
from suite.errors import ConfigError
from suite.models.base import ONE_PROCESS, Ranks, RecModel


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device: 'cuda' was asked for but no CUDA device is available (allowed here: cpu)"
        )
    return torch.device(name)


def seed_everything(seed: int, threads: int | None = None) -> None:
    """Seed python, numpy and torch; fix torch's CPU thread count when given."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if threads:
        torch.set_num_threads(threads)


def build_model(config: RunConfig, data: PreparedDataset, ranks: Ranks = ONE_PROCESS) -> RecModel:
    """The config's embedding method and backbone, seeded from ``config.seed``; with
    ``ranks`` of a distributed job, its tables sharded over them (a
    :class:`~suite.engine.distributed.ShardedRecModel` with the same interface)."""
    device = resolve_device(config.device)
    seed_everything(config.seed, config.train.threads)
    schema = data.schema
    context = EmbeddingContext(
        cardinalities=schema.cardinalities,
        device=device,
        seed=config.seed,
        sparse_optimizer=config.train.sparse_optimizer,
        sparse_lr=config.train.sparse_lr,
        feature_counts=lambda: data.feature_counts("train"),
        materialize_tables=not ranks.distributed,
    )
    embedding_cls = config.embedding.registry.get(config.embedding.name)
    embedding = embedding_cls(config.embedding.typed_options(), context)
    backbone_cls = config.model.registry.get(config.model.name)
    backbone = backbone_cls(
        schema.num_dense, schema.num_sparse, embedding.dim, config.model.typed_options()
    )
    backbone = backbone.to(device)
    if config.train.compile:
        # in place (nn.Module.compile): state_dict keys and checkpoints stay those of eager
        backbone.compile()
    model = RecModel(embedding, backbone, payload_codec(config, data))
    if isinstance(ranks, Parallel):
        from suite.engine.distributed import shard_model

        return shard_model(model, config, ranks, schema.sparse)
    return model


def payload_codec(config: RunConfig, data: PreparedDataset) -> CommCodec | None:
    """The all-to-all payload codec the config asks for, told the run's step count."""
    if config.comm.codec == "none":
        return None
    train = config.train
    steps = train.epochs * math.ceil(len(data.split("train")) / train.batch_size)
    return CommCodec(config.comm, min(steps, train.max_steps or steps))
