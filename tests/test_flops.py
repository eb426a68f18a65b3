"""Analytic FLOPs per example against torch's FlopCounterMode, and a hand count for DLRM.

FlopCounterMode counts ``mm``/``addmm``/``bmm`` as 2 x multiply-accumulates and ignores
elementwise ops (activations, LayerNorm, the cross network's product, a bias add); the
analytic counts follow the same convention, so for backbones they must agree exactly.
Embedding methods may count their elementwise combine (QR's add/mult, which
FlopCounterMode does not see), so whole models are held to a 1% relative tolerance.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from suite.data.loader import BatchLoader
from suite.data.prepared import PreparedDataset
from suite.data.source import get_prepared
from suite.embeddings.dhe import DHEEmbedding
from suite.engine.build import build_model
from suite.models.base import training_flops
from suite.models.dcnv2 import DCNv2, DCNv2Options
from suite.models.dlrm import DLRM, DLRMOptions
from suite.models.wukong import Wukong, WukongOptions
from suite.registry import EMBEDDINGS, MODELS
from tests.conftest import tiny_config

MODEL_TOLERANCE = 0.01  # relative, whole model (embedding elementwise combines)
BATCH = 32


def counted_flops(fn, *args) -> float:
    """FLOPs FlopCounterMode sees in ``fn(*args)``, per example."""
    with FlopCounterMode(display=False) as counter:
        fn(*args)
    return counter.get_total_flops() / BATCH


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("flops-cache")


def prepared(cache_dir: Path, model: str, embedding: str) -> tuple:
    config = tiny_config(
        model=model, embedding=embedding, overrides=[f"dataset.cache_dir={cache_dir}"]
    )
    data: PreparedDataset = get_prepared(config.dataset, progress=False)
    batch = next(iter(BatchLoader(data.split("train"), BATCH)))
    return build_model(config, data), batch


@pytest.mark.parametrize("embedding", EMBEDDINGS.names())
@pytest.mark.parametrize("backbone", MODELS.names())
def test_analytic_flops_match_flop_counter(cache_dir: Path, backbone: str, embedding: str) -> None:
    model, batch = prepared(cache_dir, backbone, embedding)
    model.train()  # the analytic count is a training step's forward
    with torch.no_grad():
        embedded = model.embedding(batch.sparse)
        backbone_flops = model.backbone.flops_per_example()
        assert counted_flops(model.backbone, batch.dense, embedded) == backbone_flops
        total = counted_flops(model, batch.dense, batch.sparse)
        analytic = model.flops_per_example()
        if isinstance(model.embedding, DHEEmbedding):
            # DHE decodes each distinct key of the batch once; its count is the paper's
            # computation, the network on every lookup, which bounds it
            assert total < analytic
            every = counted_flops(model.embedding.decode_every_lookup, batch.sparse)
            total = every + backbone_flops
    assert analytic > 0
    assert abs(analytic - total) <= MODEL_TOLERANCE * total, (analytic, total)


BACKBONE_VARIANTS = [
    (Wukong, WukongOptions(layers=3, num_fm=5, num_lcb=3, rank=6, fm_mlp=[32, 16], top_mlp=[])),
    (Wukong, WukongOptions(layers=2, num_fm=14, num_lcb=13, rank=2, fm_mlp=[])),
    (Wukong, WukongOptions(layers=1, num_fm=2, num_lcb=2, rank=40, dense_embeddings=3)),
    (DCNv2, DCNv2Options(cross_layers=2, rank=None, structure="stacked", mlp=[64])),
    (DCNv2, DCNv2Options(cross_layers=3, rank=4, structure="parallel", mlp=[32, 16])),
    (DCNv2, DCNv2Options(cross_layers=1, rank=4, structure="parallel", mlp=[])),
    (DLRM, DLRMOptions(interaction="cat")),
    (DLRM, DLRMOptions(interaction_self=True)),
]


@pytest.mark.parametrize("num_dense", [13, 0])
@pytest.mark.parametrize(("cls", "options"), BACKBONE_VARIANTS)
def test_backbone_variants_match_flop_counter(cls, options, num_dense: int) -> None:
    # Wukong's residual is an identity where n = n_F + n_L (second variant with dense
    # features: 1 + 26 = 14 + 13) and a projection elsewhere
    torch.manual_seed(0)
    backbone = cls(num_dense, 26, 8, options)
    dense, embedded = torch.randn(BATCH, num_dense), torch.randn(BATCH, 26, 8)
    with torch.no_grad():
        assert counted_flops(backbone, dense, embedded) == backbone.flops_per_example()


def test_dlrm_criteo_kaggle_reference_hand_count() -> None:
    """13 dense, 26 sparse, dim 16, bottom 13-512-256-64-16, dot interaction without self,
    top 367-512-256-1 (the DLRM reference's Criteo-Kaggle configuration)."""
    dense, sparse, dim = 13, 26, 16
    bottom = 2 * (13 * 512 + 512 * 256 + 256 * 64 + 64 * 16)  # 310,272
    vectors = sparse + 1  # 26 embeddings + the bottom MLP's output
    gram = 2 * vectors * vectors * dim  # the whole batched X X^T, as computed: 23,328
    pairs = vectors * (vectors - 1) // 2  # 351 lower-triangle dot products kept
    top = 2 * ((pairs + dim) * 512 + 512 * 256 + 256 * 1)  # 638,464
    hand = bottom + gram + top
    assert hand == 972_064

    options = DLRMOptions(
        bottom_mlp="512-256-64", top_mlp="512-256", interaction="dot", interaction_self=False
    )
    model = DLRM(dense, sparse, dim, options)
    assert model.flops_per_example() == hand
    with torch.no_grad():
        assert (
            counted_flops(model, torch.randn(BATCH, dense), torch.randn(BATCH, sparse, dim)) == hand
        )


def test_training_flops_is_three_forwards(cache_dir: Path) -> None:
    model, batch = prepared(cache_dir, "wukong", "full")
    assert training_flops(model, 1000) == 3 * 1000 * model.flops_per_example()
    # backward costs about two forwards: check the rule against the counter (the first layer
    # on the dense input needs no input gradient, so slightly under 3x)
    with FlopCounterMode(display=False) as counter:
        embedded = model.embedding(batch.sparse).detach().requires_grad_()
        model.backbone(batch.dense, embedded).sum().backward()
    ratio = counter.get_total_flops() / BATCH / model.backbone.flops_per_example()
    assert 2.8 <= ratio <= 3.0
