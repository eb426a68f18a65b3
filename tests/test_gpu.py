"""The suite's CUDA path (marker ``gpu``; skipped without a CUDA device; ``nox -s gpu`` and
``python -m suite.gpu_check`` run them): fbgemm's TBE on CUDA against the torch backend,
int8/int4 bytes from the kernel's own CUDA tensors, the ``MANAGED_CACHING`` replay of the
``tiered`` task, and the bandwidth benchmark."""

from __future__ import annotations

import pytest
import torch

from suite.data.source import get_prepared
from suite.embeddings.quantize import quantize_embedding
from suite.embeddings.tables import PhysicalTables
from suite.engine.build import build_model
from suite.gpu_check.bandwidth import TBEShape, bandwidth_report
from suite.gpu_check.steps import quantized_bytes
from suite.kernel_backend import fbgemm_available
from suite.runs.single import execute
from tests.conftest import tiny_config

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(
        not fbgemm_available()[0], reason=f"fbgemm-gpu unavailable: {fbgemm_available()[1]}"
    ),
]

CUDA = torch.device("cuda")
ROWS = [50, 30, 1000]  # small tables, so a batch of 256 repeats rows and grads accumulate


def tables_on_cuda(backend: str, optimizer: str, lr: float) -> PhysicalTables:
    return PhysicalTables(ROWS, [16] * 3, backend, optimizer, lr, device=CUDA, seed=3)


def ids_for(rows: list[int], batch: int = 256, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    columns = [torch.randint(0, n, (batch,), generator=generator) for n in rows]
    return torch.stack(columns, dim=1).to(CUDA)


@pytest.mark.parametrize(("optimizer", "lr"), [("sgd", 1.0), ("rowwise_adagrad", 0.1)])
def test_fbgemm_tables_on_cuda_equal_the_torch_backend(optimizer: str, lr: float) -> None:
    fbgemm, plain = (tables_on_cuda(b, optimizer, lr) for b in ("fbgemm", "torch"))
    assert fbgemm.table_backends() == ["fbgemm"] * 3 and fbgemm.weights()[0].is_cuda
    assert plain.table_backends() == ["torch"] * 3
    for step in range(2):
        ids = ids_for(ROWS, seed=step)
        upstream = torch.randn(ids.shape[0], 48, generator=torch.Generator().manual_seed(9))
        before = [w.detach().clone() for w in plain.weights()]
        outputs = []
        for tables in (fbgemm, plain):
            out = tables(ids)
            out.backward(upstream.to(CUDA))
            tables.step()
            outputs.append(out.detach())
        torch.testing.assert_close(outputs[0], outputs[1])  # pooled embeddings
        for a, b, w0 in zip(fbgemm.weights(), plain.weights(), before, strict=True):
            # with SGD at lr 1 the update is the gradient itself: grads equal, duplicates summed
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
            assert not torch.equal(b, w0)


def test_int8_int4_bytes_from_the_kernels_cuda_tensors() -> None:
    config = tiny_config(overrides=["device=cuda"])
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    on_cpu = build_model(config.with_overrides({"device": "cpu"}), data)
    ids = ids_for(data.schema.cardinalities, batch=64)
    for precision, row in (("int8", 32), ("int4", 16)):  # dim 16: 20 and 12 B padded to 16s
        outcome = quantized_bytes(model.embedding, precision)
        assert outcome.problems == []
        figures = outcome.figures
        assert figures["kernel_tensor_device"] == "cuda"
        assert figures["row_bytes_physical"] == row
        assert figures["kernel_tensor_bytes"] == figures["suite_parameter_bytes"]
        assert figures["kernel_tensor_bytes"] > figures["unpadded_bytes"]
        # the padded CUDA rows hold the very bytes of fbgemm's unpadded CPU rows ...
        on_gpu = quantize_embedding(model.embedding, precision)
        on_host = quantize_embedding(on_cpu.embedding, precision)
        gpu_rows = on_gpu.kernel.split_embedding_weights()[0]
        host_rows = on_host.kernel.split_embedding_weights()[0]
        for gpu_part, host_part in zip(gpu_rows, host_rows, strict=True):
            assert torch.equal(gpu_part.cpu(), host_part)
        # ... and look up the same values up to half-precision rounding: on an H200 with
        # fbgemm 1.6.0 CUDA's kernel differed by up to 2.0e-4 at |value| <= 0.57
        gpu, cpu = on_gpu(ids).cpu(), on_host(ids.cpu())
        half_ulp = torch.finfo(torch.float16).eps * float(cpu.abs().max())
        torch.testing.assert_close(gpu, cpu, rtol=0.0, atol=half_ulp)


def test_accuracy_and_memory_tasks_on_cuda_with_both_backends() -> None:
    results = {
        backend: execute(tiny_config(overrides=["device=cuda", f"embedding.options.backend={backend}"]))
        for backend in ("fbgemm", "torch")
    }  # fmt: skip
    for backend, result in results.items():
        assert set(result.details["embedding_layout"]["table_backends"]) == {backend}
        assert result.environment["device"] == "cuda"
    aucs = [r.metrics["test_auc"] for r in results.values()]
    assert abs(aucs[0] - aucs[1]) < 0.01
    memory = execute(tiny_config(task="memory", overrides=["device=cuda"]))
    assert memory.metrics["analytic_mismatch_bytes"] == 0
    assert memory.metrics["train_step_peak_bytes"] > memory.metrics["embedding_bytes"] > 0


def test_managed_caching_replay_of_the_tiered_task() -> None:
    config = tiny_config(
        task="tiered",
        overrides=[
            "device=cuda",
            "task.options.fbgemm_replay=true",
            "task.options.plot=false",
            "task.options.max_lookups=20000",
        ],
    )
    replay = execute(config).details["fbgemm_replay"]
    assert {(r["share"], r["policy"]) for r in replay} == {
        (s, p) for s in (0.01, 0.1) for p in ("lru", "lfu")
    }
    for r in replay:
        assert 0.0 <= r["fbgemm"] <= 1.0 and 0.0 <= r["simulated"] <= 1.0
        if r["policy"] == "lru":  # the suite's count agrees with fbgemm's own statistics
            assert r["fbgemm_stats"] == pytest.approx(r["fbgemm"], abs=1e-9)
        else:
            assert r["fbgemm_stats"] is None
    lru = {r["share"]: r["fbgemm"] for r in replay if r["policy"] == "lru"}
    assert lru[0.1] >= lru[0.01] - 0.02  # a ten times larger cache does not hit less


def test_tbe_bandwidth_on_cuda() -> None:
    report = bandwidth_report([TBEShape(4, 100_000, 64, 4096, 8)], CUDA, 256 << 20, 5)
    assert report["copy_bytes_per_s"] > 1e10  # any GPU copies faster than 10 GB/s
    (shape,) = report["shapes"]
    assert shape["forward_bytes_per_s"] > 0 and shape["backward_bytes_per_s"] > 0
    assert 0 < shape["unique_rows"] <= 4 * 4096 * 8
