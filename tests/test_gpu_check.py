"""The GPU check's dry run on CPU: CUDA steps skipped with their reason, CPU analogs real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import suite.gpu_check as gpu_check
from suite.gpu_check import DRY_RUN, NO_CUDA, STEPS, Step, slug, table
from suite.gpu_check.__main__ import main
from suite.gpu_check.bandwidth import TBEShape, tbe_bytes
from suite.gpu_check.steps import StepOutcome, expected_quantized_bytes
from suite.registry import EMBEDDINGS


def test_dry_run_skips_cuda_steps_with_a_reason_and_runs_the_cpu_analogs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--dry-run", "--out", str(tmp_path / "bench")]) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "bench" / "gpu-dry-run.json").read_text())
    assert report["dry_run"] is True and report["format"] == 1
    assert report["versions"]["torch"] and report["versions"]["fbgemm"]
    assert "available" in report["nvidia_smi"]
    assert "unique rows" in report["bytes_counted"]

    by_device = {(r["step"], r["device"]): r for r in report["steps"]}
    for step in STEPS:  # every step is there, its CUDA run skipped with the reason
        cuda = by_device[(step.name, "cuda")]
        assert cuda["status"] == "skipped"
        assert cuda["reason"] in (NO_CUDA, DRY_RUN)
        assert ((step.name, "cpu") in by_device) == step.cpu_analog
    cpu = {name: r for (name, device), r in by_device.items() if device == "cpu"}
    assert {r["status"] for r in cpu.values()} == {"ok"}, [r["reason"] for r in cpu.values()]
    assert report["counts"] == {"ok": len(cpu), "failed": 0, "skipped": len(STEPS)}

    # the CPU steps' figures are real: both backends trained alike, bytes agree, rates positive
    accuracy = cpu["accuracy"]["figures"]
    assert 0.0 < accuracy["fbgemm"]["test_auc"] < 1.0
    assert accuracy["fbgemm"]["test_auc"] == pytest.approx(accuracy["torch"]["test_auc"], abs=1e-3)
    memory = cpu["memory"]["figures"]
    assert memory["fbgemm"]["embedding_bytes"] == memory["torch"]["embedding_bytes"] > 0
    assert cpu["throughput"]["figures"]["torch"]["train_samples_per_s_b128"] > 0
    for figures in cpu["nbit-bytes"]["figures"].values():  # fbgemm's CPU layout: rows unpadded
        assert figures["kernel_tensor_bytes"] == figures["suite_parameter_bytes"]
        assert figures["kernel_tensor_bytes"] == figures["expected_bytes"]
        assert figures["row_bytes_physical"] == figures["row_bytes_unpadded"]
    shares = cpu["caching-replay"]["figures"]["simulated_top_tier_share"]
    assert shares["hbm 10% + dram (lru)"] >= shares["hbm 1% + dram (lru)"] > 0
    bandwidth = cpu["tbe-bandwidth"]["figures"]
    assert bandwidth["copy_bytes_per_s"] > 0
    for shape in bandwidth["shapes"]:
        assert shape["forward_bytes_per_s"] > 0 and shape["backward_bytes_per_s"] > 0
        assert 0 < shape["unique_rows"] <= shape["tables"] * shape["batch"] * shape["pooling"]
    methods = cpu["methods"]["figures"]  # every registered method trained, compared, restored
    assert set(methods) == set(EMBEDDINGS.names())
    for name, figures in methods.items():
        assert figures["lookup_max_abs_gap"] == figures["step_max_abs_gap"] == 0.0, name
        assert 0.0 < figures["test_auc"] < 1.0 and figures["train_step_cost_vs_full"] > 0
    assert methods["full"]["train_step_cost_vs_full"] == 1.0
    assert methods["alpt"]["compared_with_nearest_rounding"]
    assert not methods["full"]["compared_with_nearest_rounding"]

    # the table prints every row, the reason of the skipped ones
    assert printed.count(NO_CUDA) + printed.count(DRY_RUN) == len(STEPS)
    assert table(report).splitlines()[0].split()[:3] == ["step", "device", "status"]


def test_bytes_counted_by_hand() -> None:
    # 2 tables, batch 3, 4 ids per bag, dim 8: 24 rows of 32 B read, 24 + 7 int64 ids,
    # 6 pooled rows of 32 B written; backward reads 6 grads and writes 5 unique rows twice
    moved = tbe_bytes(TBEShape(tables=2, rows=100, dim=8, batch=3, pooling=4), unique_rows=5)
    assert moved["forward"] == 24 * 32 + (24 + 7) * 8 + 6 * 32
    assert moved["backward"] == 6 * 32 + (24 + 7) * 8 + 5 * 2 * (32 + 4)


def test_fbgemm_row_padding_by_hand() -> None:
    # int8 dim 16: 16 + 4 B scale/bias = 20 B, padded to 32 on CUDA; 10 rows -> 320 -> 384
    assert expected_quantized_bytes([10], [16], 8, "cuda") == 384
    assert expected_quantized_bytes([10], [16], 8, "cpu") == 256  # 200 B to a 128 B line
    # int4 dim 16: 8 + 4 = 12 B -> 16 on CUDA
    assert expected_quantized_bytes([8], [16], 4, "cuda") == 128
    assert slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_a_failing_step_is_recorded_with_its_reason_and_the_others_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(device: torch.device) -> StepOutcome:
        raise RuntimeError("kernel exploded\nsecond line")

    def wrong(device: torch.device) -> StepOutcome:
        return StepOutcome({"bytes": 1}, "1 B", ["bytes differ"])

    fine = Step("fine", "fine", lambda device: StepOutcome({"x": 1.0}, "x 1.0"))
    steps = [Step("broken", "broken", broken), Step("wrong", "wrong", wrong), fine]
    monkeypatch.setattr(gpu_check, "STEPS", steps)
    assert main(["--dry-run", "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "gpu-dry-run.json").read_text())
    cpu = {r["step"]: r for r in report["steps"] if r["device"] == "cpu"}
    assert cpu["broken"]["status"] == "failed"
    assert cpu["broken"]["reason"] == "RuntimeError: kernel exploded"
    assert (cpu["wrong"]["status"], cpu["wrong"]["reason"]) == ("failed", "bytes differ")
    assert cpu["wrong"]["figures"] == {"bytes": 1}
    assert (cpu["fine"]["status"], cpu["fine"]["figures"]) == ("ok", {"x": 1.0})
    assert report["counts"] == {"ok": 1, "failed": 2, "skipped": 3}


def test_a_partial_check_writes_its_own_record_beside_the_full_one(tmp_path: Path) -> None:
    assert main(["--dry-run", "--only", "methods", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu-dry-run-methods.json").read_text())
    assert [r["step"] for r in report["steps"]] == ["methods", "methods"]
    assert not (tmp_path / "gpu-dry-run.json").exists()


def test_the_kaggle_step_dry_run_trains_the_full_job_through_the_kaggle_loader(
    tmp_path: Path,
) -> None:
    """Without CUDA the ``full`` DLRM job trains, both backends, at the CPU batches, on a
    tiny gen_criteo file through ``criteo-kaggle``: rates, the profile's phases and the
    targets (not judged on CPU) are in the record."""
    from suite.gpu_check.kaggle import BACKENDS, PHASES, SIZES, TARGETS, full_job

    assert main(["--dry-run", "--only", "kaggle-full", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu-dry-run-kaggle-full.json").read_text())
    cuda, cpu = report["steps"]
    assert (cuda["device"], cuda["status"]) == ("cuda", "skipped")
    assert cuda["reason"] in (NO_CUDA, DRY_RUN)
    assert cpu["status"] == "ok", cpu["reason"]
    figures = cpu["figures"]
    job = full_job()
    assert job["dataset.name"] == "criteo-kaggle" and job["dataset.protocol"] == "dlrm"
    assert job["embedding.options.dim"] == 16 and job["model.options.top_mlp"] == "512-256"
    assert figures["dataset"]["name"] == "criteo-kaggle"
    batches = SIZES["cpu"]["batches"]
    assert set(figures["runs"]) == {f"{b}_b{n}" for b in BACKENDS for n in batches}
    for name, run in figures["runs"].items():
        assert run["samples_per_s"] > 0 and run["table_backends"] == [name.split("_")[0]]
        phases = run["profile"]
        assert all(phases[f"{phase}_ms"] >= 0 for phase in PHASES), phases
        for phase in ("embedding_forward", "embedding_backward", "dense_forward", "optimizer"):
            assert phases[f"{phase}_ms"] > 0, (name, phase)
        assert run["gpu_busy_share"] is None and phases["host_gaps_ms"] is None
        assert 0 < run["unique_rows_per_batch"] <= run["batch"] * run["tables"]
    targets = figures["versus_targets"]
    assert {name: targets[name]["met"] for name in TARGETS} == dict.fromkeys(TARGETS)
    assert targets["fbgemm_vs_torch_samples_per_s"]["value"] > 0
    assert "fbgemm_vs_torch_samples_per_s n/a" in cpu["summary"]


def test_gpu_busy_time_is_the_union_of_the_device_spans() -> None:
    from types import SimpleNamespace

    from suite.gpu_check.kaggle import _busy_seconds

    def span(lo: float, hi: float, device: object = torch.autograd.DeviceType.CUDA) -> object:
        return SimpleNamespace(time_range=SimpleNamespace(start=lo, end=hi), device_type=device)

    events = [span(0, 10), span(5, 12), span(20, 30), span(21, 22), span(0, 100, "cpu")]
    prof = SimpleNamespace(events=lambda: events)
    assert _busy_seconds(prof) == pytest.approx(22e-6)  # µs spans: [0, 12] and [20, 30]
