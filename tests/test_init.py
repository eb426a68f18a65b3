"""Reference initialisation (``init: reference``) of backbones and embedding methods draws
from the reference code's distributions; ``init: torch`` keeps the earlier behaviour."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from suite.data.source import get_prepared
from suite.embeddings.base import EmbeddingContext, EmbeddingOptions
from suite.embeddings.full import FullEmbedding
from suite.embeddings.mixed_dim import MixedDimEmbedding, MixedDimOptions
from suite.embeddings.qr import QREmbedding, QROptions
from suite.engine.build import build_model
from suite.errors import ConfigError
from suite.models.dcnv2 import DCNv2, DCNv2Options
from suite.models.dlrm import DLRM, DLRMOptions
from suite.models.wukong import Wukong, WukongOptions
from suite.registry import EMBEDDINGS
from tests.conftest import tiny_config

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory):
    spec = tiny_config().dataset.model_copy(
        update={"cache_dir": str(tmp_path_factory.mktemp("prepared"))}
    )
    return get_prepared(spec, progress=False)


def context(cards: list[int], seed: int = 0) -> EmbeddingContext:
    return EmbeddingContext(cardinalities=cards, device=CPU, seed=seed)


def uniform_std(low: float, high: float) -> float:
    return (high - low) / math.sqrt(12)


# ------------------------------------------------------------------ backbones


def test_dlrm_reference_mlp_draws_from_the_reference_normals() -> None:
    torch.manual_seed(0)
    options = DLRMOptions(bottom_mlp=[2048], top_mlp=[1024])
    model = DLRM(512, 4, 16, options)
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(layers) == 4
    big = model.bottom[0]  # n = 512 in, m = 2048 out: a million weights
    m, n = big.out_features, big.in_features
    std = math.sqrt(2 / (m + n))
    assert big.weight.std().item() == pytest.approx(std, rel=0.01)
    assert abs(big.weight.mean().item()) < 0.001
    assert big.bias.std().item() == pytest.approx(math.sqrt(1 / m), rel=0.05)
    for layer in layers:  # every layer, including the one-logit output
        out, inp = layer.out_features, layer.in_features
        if out * inp >= 10_000:
            assert layer.weight.std().item() == pytest.approx(math.sqrt(2 / (out + inp)), rel=0.05)
        # normal, not uniform: values beyond 3 std exist on big layers, none beyond 6
        assert layer.weight.abs().max().item() < 6 * math.sqrt(2 / (out + inp))
    assert (big.weight.abs() > 3 * std).sum() > 1000  # 0.27% of a million


def test_dlrm_torch_init_keeps_torch_defaults() -> None:
    torch.manual_seed(5)
    model = DLRM(13, 4, 16, DLRMOptions(init="torch"))
    torch.manual_seed(5)
    first = nn.Linear(13, 64)  # the first layer DLRM builds, drawn by the same generator
    torch.testing.assert_close(model.bottom[0].weight, first.weight, rtol=0, atol=0)
    torch.testing.assert_close(model.bottom[0].bias, first.bias, rtol=0, atol=0)
    assert DLRMOptions().init == "reference"


def test_dcnv2_reference_init_follows_the_tensorflow_code() -> None:
    torch.manual_seed(0)
    model = DCNv2(13, 26, 16, DCNv2Options(mlp=[512], cross_layers=2))
    width = 13 + 26 * 16
    for layer in model.cross:
        w = layer.weight.weight
        assert w.abs().max().item() <= 0.1  # truncated at two std of 0.05
        # std of a normal cut at +-2 std: 0.05 * 0.8796
        assert w.std().item() == pytest.approx(0.05 * 0.8796, rel=0.02)
        assert torch.count_nonzero(layer.weight.bias) == 0
    dense = model.mlp[0]
    bound = math.sqrt(6 / (width + 512))  # Glorot-uniform
    assert dense.weight.abs().max().item() <= bound
    assert dense.weight.std().item() == pytest.approx(uniform_std(-bound, bound), rel=0.02)
    assert torch.count_nonzero(dense.bias) == 0 and torch.count_nonzero(model.head.bias) == 0
    low_rank = DCNv2(13, 26, 16, DCNv2Options(rank=64))
    for linear in low_rank.cross[0].weight:
        assert linear.weight.abs().max().item() <= 0.1


def test_dcnv2_torch_init_keeps_torch_defaults() -> None:
    torch.manual_seed(2)
    model = DCNv2(13, 4, 8, DCNv2Options(init="torch", cross_layers=1))
    torch.manual_seed(2)
    first = nn.Linear(13 + 32, 13 + 32)
    torch.testing.assert_close(model.cross[0].weight.weight, first.weight, rtol=0, atol=0)
    torch.testing.assert_close(model.cross[0].weight.bias, first.bias, rtol=0, atol=0)


def test_wukong_has_no_reference_init_and_says_so() -> None:
    assert WukongOptions().init == "torch"
    Wukong(13, 4, 8, WukongOptions())
    with pytest.raises(ConfigError, match="init.*no published reference"):
        tiny_config(model="wukong", overrides=["model.options.init=reference"])


# ------------------------------------------------------------------ embedding methods


def test_full_tables_start_uniform_in_sqrt_one_over_n() -> None:
    cards = [50_000, 300]
    for init in ("reference", "torch"):  # the DLRM reference's scheme is also the old one
        emb = FullEmbedding(EmbeddingOptions(dim=16, init=init), context(cards))
        for n, w in zip(cards, emb.tables.weights(), strict=True):
            bound = math.sqrt(1 / n)
            assert w.abs().max().item() <= bound
            if n == 50_000:
                assert w.std().item() == pytest.approx(uniform_std(-bound, bound), rel=0.01)


def test_qr_reference_tables_as_qr_embedding_bag() -> None:
    """``nn.init.uniform_(w, sqrt(1/n))``: uniform in ``[sqrt(1/n), 1)`` for both tables."""
    n, c = 40_000, 8
    cards = [n, 100]  # the second feature is below the threshold: a plain table
    emb = QREmbedding(QROptions(collisions=c, dim=16), context(cards))
    quotient, remainder, plain = (w.detach() for w in emb.tables.weights())
    assert quotient.shape == (n // c, 16) and remainder.shape == (c, 16)
    low = math.sqrt(1 / n)
    for w in (quotient, remainder):
        assert w.min().item() >= low and w.max().item() < 1.0
    assert quotient.mean().item() == pytest.approx((low + 1) / 2, rel=0.01)
    assert quotient.std().item() == pytest.approx(uniform_std(low, 1.0), rel=0.01)
    assert plain.abs().max().item() <= math.sqrt(1 / 100) and plain.min().item() < 0

    old = QREmbedding(QROptions(collisions=c, dim=16, init="torch"), context(cards))
    quotient, remainder, plain = (w.detach() for w in old.tables.weights())
    assert quotient.abs().max().item() <= math.sqrt(1 / (n // c))  # its own rows
    assert remainder.abs().max().item() <= math.sqrt(1 / c) and remainder.min().item() < 0


def test_md_tables_and_projections_as_the_reference() -> None:
    """``create_emb``: tables uniform in ``±sqrt(1/n)`` (``n`` the feature's ids);
    ``PrEmbeddingBag``: Xavier-uniform projections."""
    cards = [3, 100_000]
    emb = MixedDimEmbedding(MixedDimOptions(dim=16, alpha=0.2), context(cards))
    d = emb.dims[1]
    assert emb.dims[0] == 16 and d < 16
    table = next(w for w in emb.tables.weights() if w.shape[0] == 100_000)
    bound = math.sqrt(1 / 100_000)
    assert table.abs().max().item() <= bound
    assert table.std().item() == pytest.approx(uniform_std(-bound, bound), rel=0.02)
    projection = emb.combine.projections[0]
    assert projection.abs().max().item() <= math.sqrt(6 / (d + 16))


@pytest.mark.parametrize("embedding", EMBEDDINGS.names())
def test_init_is_an_option_of_every_method(embedding: str) -> None:
    config = tiny_config(embedding=embedding, overrides=["embedding.options.init=torch"])
    assert config.embedding.typed_options().init == "torch"
    assert tiny_config(embedding=embedding).embedding.typed_options().init == "reference"
    with pytest.raises(ConfigError, match="init"):
        tiny_config(embedding=embedding, overrides=["embedding.options.init=xavier"])


def test_backbone_init_does_not_depend_on_the_embedding_method(tiny_data) -> None:
    """Building the tables draws nothing from torch's global generator, so one seed gives
    the backbone the same start under every method and backend (paired comparisons)."""
    starts = []
    for embedding, backend in (("full", "fbgemm"), ("full", "torch"), ("mixed_dim", "fbgemm")):
        config = tiny_config(
            embedding=embedding, overrides=[f"embedding.options.backend={backend}"]
        )
        starts.append(
            [p.detach().clone() for p in build_model(config, tiny_data).backbone.parameters()]
        )
    for other in starts[1:]:
        for a, b in zip(starts[0], other, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
