"""Low-precision tables on fbgemm's n-bit inference kernel, and the ``lowprec`` task."""

from __future__ import annotations

import pytest
import torch

from suite.data.loader import BatchLoader
from suite.data.source import get_prepared
from suite.embeddings.base import ComposedEmbedding
from suite.embeddings.quantize import quantizable_methods, quantize_embedding
from suite.engine.build import build_model
from suite.errors import ConfigError
from suite.runs.single import execute
from tests.conftest import TINY_DATA, tiny_config

COMPOSED = quantizable_methods()


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory):
    spec = tiny_config().dataset.model_copy(
        update={"cache_dir": str(tmp_path_factory.mktemp("prepared"))}
    )
    return get_prepared(spec, progress=False)


def trained_like(emb: ComposedEmbedding) -> None:
    """Give the tables trained-looking values of different scales per row."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for w in emb.tables.weights():
            w.copy_(torch.randn(w.shape, generator=gen) * torch.rand(w.shape[0], 1, generator=gen))


def test_composed_methods_are_all_covered() -> None:
    assert {"full", "hash", "qr", "mixed_dim"} <= set(COMPOSED)


@pytest.mark.parametrize("backend", ["fbgemm", "torch"])
@pytest.mark.parametrize("method", COMPOSED)
def test_quantized_lookup_matches_the_method(tiny_data, method: str, backend: str) -> None:
    config = tiny_config(embedding=method, overrides=[f"embedding.options.backend={backend}"])
    emb = build_model(config, tiny_data).embedding
    trained_like(emb)
    sparse = next(iter(BatchLoader(tiny_data.split("test"), 256))).sparse
    with torch.no_grad():
        ref = emb(sparse)
        scale = ref.abs().max()
        errors = {}
        for precision in ("fp32", "fp16", "int8", "int4"):
            low = quantize_embedding(emb, precision)
            out = low(sparse)
            assert out.shape == ref.shape and out.dtype == torch.float32
            errors[precision] = float((out - ref).abs().max() / scale)
    assert errors["fp32"] < 1e-6  # the kernel path itself is exact
    assert errors["fp16"] < 2e-3
    assert errors["int8"] < 0.03
    assert errors["int4"] < 0.3
    assert errors["int8"] < errors["int4"]


@pytest.mark.parametrize("bits", [8, 4])
def test_rowwise_quantization_error_is_within_half_a_step(tiny_data, bits: int) -> None:
    emb = build_model(tiny_config(embedding="full"), tiny_data).embedding
    trained_like(emb)
    low = quantize_embedding(emb, "int8" if bits == 8 else "int4")
    weights = emb.tables.weights()
    sparse = next(iter(BatchLoader(tiny_data.split("test"), 512))).sparse
    with torch.no_grad():
        out, ref = low(sparse), emb(sparse)
    for f, w in enumerate(weights):
        rows = w.detach()[sparse[:, f]]
        step = (rows.amax(1) - rows.amin(1)) / (2**bits - 1)  # scale of each row
        error = (out[:, f] - ref[:, f]).abs().amax(1)
        # half a quantization step, plus the fp16 rounding of scale and bias
        assert (error <= step / 2 + 2e-3 * rows.abs().amax(1) + 1e-6).all()


def test_memory_is_honest_and_shrinks_with_precision(tiny_data) -> None:
    emb = build_model(tiny_config(embedding="full"), tiny_data).embedding
    rows_dims = [(w.shape[0], w.shape[1]) for w in emb.tables.weights()]
    params = {}
    for precision, bytes_per_row in (
        ("fp32", lambda d: 4 * d),
        ("fp16", lambda d: 2 * d),
        ("int8", lambda d: d + 4),
        ("int4", lambda d: d // 2 + 4),
    ):
        low = quantize_embedding(emb, precision)
        memory, tensors = low.memory(), low.storage_tensors()
        assert memory.parameters == sum(t.nbytes for t in tensors["parameters"])
        assert memory.auxiliary == sum(t.nbytes for t in tensors["auxiliary"])
        assert memory.optimizer == 0
        # values + fp16 scale/bias per row; the kernel may align rows, never less
        floor = sum(n * bytes_per_row(d) for n, d in rows_dims)
        assert floor <= memory.parameters < 1.5 * floor
        params[precision] = memory.parameters
    assert params["int4"] < params["int8"] < params["fp16"] < params["fp32"]
    # the same floats as training held, plus the kernel's per-table cache-line alignment
    assert 0 <= params["fp32"] - emb.memory().parameters <= 128 * len(rows_dims)


def test_padded_dims_for_torch_mixed_dim(tiny_data) -> None:
    config = tiny_config(
        embedding="mixed_dim",
        overrides=["embedding.options.backend=torch", "embedding.options.alpha=0.5"],
    )
    emb = build_model(config, tiny_data).embedding
    assert any(d % 4 for d in emb.dims)  # dims the kernel cannot hold unpadded
    low = quantize_embedding(emb, "fp32")
    sparse = next(iter(BatchLoader(tiny_data.split("test"), 128))).sparse
    with torch.no_grad():
        torch.testing.assert_close(low(sparse), emb(sparse))


def test_fiited_is_refused(tiny_data) -> None:
    emb = build_model(tiny_config(embedding="fiited"), tiny_data).embedding
    with pytest.raises(TypeError, match="composed"):
        quantize_embedding(emb, "int8")
    with pytest.raises(ConfigError, match="lowprec"):
        execute(tiny_config(embedding="fiited", task="lowprec"))


def test_lowprec_task_int8_auc_within_0002_of_fp32() -> None:
    sizes = {**TINY_DATA, "train_rows": 20_000, "val_rows": 2_000, "test_rows": 5_000}
    config = tiny_config(
        task="lowprec", overrides=[f"dataset.options.{k}={v}" for k, v in sizes.items()]
    )
    result = execute(config)
    m = result.metrics
    assert m["test_auc"] > 0.6  # it learned something
    assert abs(m["auc_delta_int8"]) <= 0.002, m
    assert abs(m["auc_delta_fp16"]) <= 0.0005, m
    assert m["auc_delta_int8"] == pytest.approx(m["test_auc_int8"] - m["test_auc"])
    assert m["embedding_bytes_int4"] < m["embedding_bytes_int8"] < m["embedding_bytes_fp16"]
    assert m["embedding_bytes_fp16"] < m["embedding_bytes"]
    assert result.higher_is_better["auc_delta_int8"] is True
    assert set(result.details["embedding_memory"]) == {"fp32", "fp16", "int8", "int4"}
    print({k: round(v, 5) for k, v in m.items()})
