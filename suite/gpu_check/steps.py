"""The GPU check's steps. Each takes the device and a size and returns a :class:`StepOutcome`:
figures for the JSON, a one-line summary for the table, and the problems that fail it.

Every step goes through the suite's own entry points (``suite.api.run``, ``build_model``,
``quantize_embedding``, the ``tiered`` task's fbgemm replay, ``PhysicalTables``); on CPU
the same code runs at a tiny size, so a dry run exercises it where no GPU is.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from suite.gpu_check.bandwidth import PUBLISHED_FRACTION_OF_PEAK, TBEShape, bandwidth_report
from suite.results import TaskResult

REPO = Path(__file__).resolve().parents[2]

DATA = {
    "cuda": {"train_rows": 100_000, "val_rows": 20_000, "test_rows": 20_000},
    "cpu": {
        "train_rows": 4000,
        "val_rows": 1000,
        "test_rows": 1000,
        "vocab_scale": 0.0002,
        "keep_below": 200,
    },
}
"""criteo-synth at the check's sizes: small on CUDA, tiny for the CPU dry run."""

TRAIN = {
    "cuda": {"train.batch_size": 1024},
    "cpu": {"train.batch_size": 128, "train.max_steps": 20, "train.threads": 1},
}
TASK_OPTIONS = {
    "cuda": {
        "throughput": {"batch_sizes": [2048], "warmup_steps": 10, "measure_steps": 50},
        "tiered": {"max_lookups": 1_000_000},
    },
    "cpu": {
        "throughput": {"batch_sizes": [128], "warmup_steps": 2, "measure_steps": 5},
        "memory": {"compare_full": False},
        "tiered": {"max_lookups": 20_000},
    },
}
TIERED_PLACEMENTS = [
    {"name": f"hbm {share:.0%} + dram ({policy})", "policy": policy,
     "levels": [{"tier": "hbm", "share": share}, {"tier": "dram"}]}
    for policy in ("lru", "lfu") for share in (0.01, 0.1)
]  # fmt: skip
"""HBM caching DRAM at 1% and 10% of rows: the placements the replay checks."""

BANDWIDTH = {
    "cuda": {
        "shapes": [TBEShape(8, 500_000, 128, 65_536, 1), TBEShape(8, 500_000, 128, 2048, 32)],
        "copy_bytes": 1 << 30,
        "iterations": 20,
    },
    "cpu": {
        "shapes": [TBEShape(2, 20_000, 16, 512, 1), TBEShape(2, 20_000, 16, 64, 8)],
        "copy_bytes": 16 << 20,
        "iterations": 3,
    },
}
BACKENDS = ("fbgemm", "torch")
AUC_TOLERANCE = 0.01
"""Largest test-AUC gap between the two backends that the check accepts: the same
model, data and update, so only float rounding (and CUDA's atomics) separate them."""


@dataclass
class StepOutcome:
    """What a step found: ``figures`` (JSON-able), ``summary`` (one table line) and
    ``problems`` (each fails the step)."""

    figures: dict[str, Any]
    summary: str
    problems: list[str] = field(default_factory=list)


def kind(device: torch.device) -> str:
    return "cuda" if device.type == "cuda" else "cpu"


def run_overrides(device: torch.device, task: str, results_dir: str) -> dict[str, Any]:
    """Dotted overrides for one check run of ``task`` on criteo-synth at the device's size."""
    k = kind(device)
    values: dict[str, Any] = {
        "task.name": task,
        "dataset.name": "criteo-synth",
        "device": device.type,
        "train.progress": False,
        "tracking.enabled": False,
        "tracking.results_dir": results_dir,
        **{f"dataset.options.{key}": v for key, v in DATA[k].items()},
        **TRAIN[k],
    }
    options = TASK_OPTIONS[k].get(task, {})
    values.update({f"task.options.{key}": v for key, v in options.items()})
    return values


def _run(overrides: dict[str, Any]) -> TaskResult:
    from suite.api import run

    result = run(None, overrides)
    assert isinstance(result, TaskResult)
    return result


def _fell_back(result: TaskResult, backend: str) -> str | None:
    """Why a run asking for ``backend`` ran elsewhere, or ``None``."""
    note = result.environment.get("embedding_backend")
    return note if backend == "fbgemm" and note else None


TASK_FIGURES = {
    "accuracy": ("test_auc", "test_logloss", "train_samples_per_s", "embedding_bytes"),
    "memory": (
        "embedding_bytes",
        "sparse_optimizer_bytes",
        "train_step_peak_bytes",
        "inference_step_peak_bytes",
        "analytic_mismatch_bytes",
    ),
    "throughput": ("train_samples_per_s_b*", "infer_samples_per_s_b*", "infer_latency_ms_p99_b*"),
}


def _pick(metrics: dict[str, float], patterns: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for pattern in patterns:
        regex = re.compile(re.escape(pattern).replace(r"\*", ".*") + "$")
        out.update({k: v for k, v in metrics.items() if regex.match(k)})
    return out


def task_step(task: str) -> Callable[[torch.device], StepOutcome]:
    """A step running ``task`` with fbgemm's TBE and with the torch backend."""

    def step(device: torch.device) -> StepOutcome:
        per_backend: dict[str, dict[str, float]] = {}
        problems = []
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as results:
            for backend in BACKENDS:
                overrides = run_overrides(device, task, results)
                result = _run({**overrides, "embedding.options.backend": backend})
                per_backend[backend] = _pick(result.metrics, TASK_FIGURES[task])
                if note := _fell_back(result, backend):
                    problems.append(f"{backend} run fell back: {note}")
        fb, pt = per_backend["fbgemm"], per_backend["torch"]
        if task == "accuracy":
            gap = abs(fb["test_auc"] - pt["test_auc"])
            if gap > AUC_TOLERANCE:
                problems.append(f"test AUC differs by {gap:.4f} between backends")
            summary = f"test AUC fbgemm {fb['test_auc']:.4f}, torch {pt['test_auc']:.4f}"
        elif task == "memory":
            for backend, figures in per_backend.items():
                if figures["analytic_mismatch_bytes"]:
                    problems.append(f"{backend}: analytic bytes differ from the tensors'")
            if fb["embedding_bytes"] != pt["embedding_bytes"]:
                problems.append("embedding bytes differ between backends")
            same = fb["embedding_bytes"] == pt["embedding_bytes"]
            torch_bytes = (
                "(both backends)" if same else f"fbgemm, {pt['embedding_bytes']:,.0f} B torch"
            )
            summary = (
                f"embedding {fb['embedding_bytes']:,.0f} B {torch_bytes}; train peak fbgemm "
                f"{fb['train_step_peak_bytes'] / 2**20:,.0f} MiB, torch "
                f"{pt['train_step_peak_bytes'] / 2**20:,.0f} MiB"
            )
        else:
            key = next(k for k in fb if k.startswith("train_samples_per_s_b"))
            batch = key.rsplit("_b", 1)[1]
            summary = (
                f"train samples/s at batch {batch}: fbgemm {fb[key]:,.0f}, torch {pt[key]:,.0f}"
            )
        return StepOutcome(per_backend, summary, problems)

    return step


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


ROW_ALIGNMENT = {"cuda": 16, "cpu": 1}
"""fbgemm's n-bit kernel pads each row to this many bytes (its ``row_alignment``)."""
TABLE_ALIGNMENT = 128
"""... and each table to a 128-byte cache line."""
SCALE_BIAS_BYTES = 4


def unpadded_row_bytes(dim: int, bits: int) -> int:
    """An n-bit row's own bytes: ``ceil(dim x bits / 8)`` plus its fp16 scale and bias."""
    return math.ceil(dim * bits / 8) + SCALE_BIAS_BYTES


def expected_quantized_bytes(rows: list[int], dims: list[int], bits: int, device: str) -> int:
    """Bytes fbgemm's n-bit tables should hold: per table ``rows x round_up(unpadded row,
    row alignment)``, rounded up to a 128-byte line."""
    align = ROW_ALIGNMENT[device]
    return sum(
        _round_up(n * _round_up(unpadded_row_bytes(d, bits), align), TABLE_ALIGNMENT)
        for n, d in zip(rows, dims, strict=True)
    )


def quantized_bytes(method: Any, precision: str) -> StepOutcome:
    """int8/int4 bytes of ``method``'s tables read from the kernel's own tensors, against
    the suite's accounting (``memory()``, what ``lowprec`` reports) and fbgemm's layout."""
    from suite.embeddings.quantize import quantize_embedding

    bits = {"int8": 8, "int4": 4}[precision]
    quantized = quantize_embedding(method, precision)
    kernel = quantized.kernel
    device = kind(next(iter(method.tables.weights())).device)
    own = kernel.weights_dev if device == "cuda" else kernel.weights_host
    splits = kernel.split_embedding_weights()
    dims = [w.shape[1] for w in method.tables.weights()]
    rows = [w.shape[0] for w in method.tables.weights()]
    data, scale_bias = splits[0][0], splits[0][1]
    figures = {
        "kernel_tensor_device": own.device.type,
        "kernel_tensor_bytes": own.nbytes,
        "suite_parameter_bytes": quantized.memory().parameters,
        "expected_bytes": expected_quantized_bytes(rows, dims, bits, device),
        "unpadded_bytes": sum(
            n * unpadded_row_bytes(d, bits) for n, d in zip(rows, dims, strict=True)
        ),
        "row_bytes_physical": data.stride(0),
        "row_bytes_unpadded": data.shape[1] + scale_bias.shape[1],
        "row_alignment": ROW_ALIGNMENT[device],
    }
    problems = []
    if own.device.type != device:
        problems.append(f"{precision} kernel tensor is on {own.device.type}, not {device}")
    for name in ("suite_parameter_bytes", "expected_bytes"):
        if figures[name] != figures["kernel_tensor_bytes"]:
            problems.append(
                f"{precision}: {name} {figures[name]:,} != kernel tensor "
                f"{figures['kernel_tensor_bytes']:,}"
            )
    if figures["row_bytes_physical"] != _round_up(
        figures["row_bytes_unpadded"], ROW_ALIGNMENT[device]
    ):
        problems.append(f"{precision}: row stride {figures['row_bytes_physical']} not as aligned")
    summary = (
        f"{precision} {figures['row_bytes_physical']} B/row "
        f"({figures['row_bytes_unpadded']} unpadded), {figures['kernel_tensor_bytes']:,} B"
    )
    return StepOutcome(figures, summary, problems)


def lowprec_bytes_step(device: torch.device) -> StepOutcome:
    """int8 and int4 tables of a full-embedding DLRM built on ``device``."""
    from suite.api import resolve
    from suite.data.source import get_prepared
    from suite.engine.build import build_model

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as results:
        config = resolve(None, run_overrides(device, "accuracy", results))
    model = build_model(config, get_prepared(config.dataset, progress=False))
    outcomes = {p: quantized_bytes(model.embedding, p) for p in ("int8", "int4")}
    return StepOutcome(
        {p: o.figures for p, o in outcomes.items()},
        "; ".join(o.summary for o in outcomes.values()),
        [p for o in outcomes.values() for p in o.problems],
    )


def tiered_step(device: torch.device) -> StepOutcome:
    """The ``tiered`` task; on CUDA with ``fbgemm_replay`` (fbgemm's ``MANAGED_CACHING``
    tables, LRU and LFU, replaying the stream), on CPU its simulation alone."""
    replay = device.type == "cuda"
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as results:
        overrides = run_overrides(device, "tiered", results)
        overrides |= {
            "task.options.plot": False,
            "task.options.placements": TIERED_PLACEMENTS,
            "task.options.fbgemm_replay": replay,
        }
        result = _run(overrides)
    simulated = {p["name"]: p["levels"][0]["lookup_share"] for p in result.details["placements"]}
    figures: dict[str, Any] = {"simulated_top_tier_share": simulated}
    problems = []
    if not replay:
        shares = ", ".join(
            f"{name.removeprefix('hbm ').replace(' + dram', '')} {share:.3f}"
            for name, share in simulated.items()
        )
        return StepOutcome(figures, f"simulated hits: {shares} (replay needs CUDA)", problems)
    rows = result.details["fbgemm_replay"]
    figures["fbgemm_replay"] = rows
    for row in rows:
        if not 0.0 <= row["fbgemm"] <= 1.0:
            problems.append(f"fbgemm hit rate {row['fbgemm']} outside [0, 1]")
    summary = ", ".join(
        f"{r['policy']} {r['share']:.0%} fbgemm {r['fbgemm']:.3f} sim {r['simulated']:.3f}"
        for r in rows
    )
    return StepOutcome(figures, summary, problems)


def bandwidth_step(device: torch.device) -> StepOutcome:
    """TBE forward and backward bytes/s against the measured copy bandwidth."""
    sizes = BANDWIDTH[kind(device)]
    report = bandwidth_report(sizes["shapes"], device, sizes["copy_bytes"], sizes["iterations"])
    problems = [
        f"non-positive {d} rate at shape {r['batch']}x{r['pooling']}"
        for r in report["shapes"]
        for d in ("forward", "backward")
        if not r[f"{d}_bytes_per_s"] > 0
    ]
    copy = report["copy_bytes_per_s"]
    parts = [
        f"L={r['pooling']} fwd {r['forward_bytes_per_s'] / 1e9:,.1f} GB/s "
        f"({r['forward_ratio_to_copy']:.2f}) bwd {r['backward_bytes_per_s'] / 1e9:,.1f} GB/s "
        f"({r['backward_ratio_to_copy']:.2f})"
        for r in report["shapes"]
    ]
    published = PUBLISHED_FRACTION_OF_PEAK
    summary = (
        f"copy {copy / 1e9:,.1f} GB/s; {'; '.join(parts)} (x of copy; published x of peak: "
        f"fwd {published['forward']:.2f} bwd {published['backward']:.2f})"
    )
    return StepOutcome(report, summary, problems)


PASSED = re.compile(r"(\d+) (passed|failed|skipped|error|errors|deselected)")


def gpu_tests_step(device: torch.device) -> StepOutcome:
    """``pytest -m gpu`` in the suite's checkout (CUDA only)."""
    if not (REPO / "tests").is_dir():
        raise RuntimeError(f"no tests/ beside the suite at {REPO} (installed without its checkout)")
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=3600)
    lines = (done.stdout + done.stderr).strip().splitlines()
    counts = {word: int(n) for n, word in PASSED.findall(lines[-1] if lines else "")}
    figures = {"returncode": done.returncode, "counts": counts, "tail": lines[-15:]}
    problems = [] if done.returncode == 0 else [f"pytest -m gpu exit {done.returncode}"]
    if done.returncode == 0 and not counts.get("passed"):
        problems.append("no gpu test passed")
    return StepOutcome(figures, lines[-1] if lines else "no output", problems)
