"""The GPU check in one command: ``python -m suite.gpu_check [--dry-run] [--out DIR]``
(``nox -s gpu`` installs the suite and runs it).

On a CUDA machine it runs, in order: the tests marked ``gpu``; the accuracy, memory and
throughput tasks on criteo-synth with fbgemm's TBE and with the torch backend; int8/int4
table bytes read from the kernel's own CUDA tensors; the ``tiered`` task's replay through
fbgemm's ``MANAGED_CACHING`` tables; TBE forward/backward bytes per second against the
device's measured copy bandwidth; and every registered embedding method against its CPU
build (same init and bytes, one step and its lookups up to rounding, a checkpoint restored
bit for bit) with its train step cost against ``full``'s; and the ``full`` DLRM job at
Kaggle size with both backends at batch 2048 and 8192 (samples/s, the step's profile, the
GPU's busy share, against issue 70's targets: :mod:`suite.gpu_check.kaggle`). It writes
``<out>/gpu-<device-slug>.json`` (``nvidia-smi`` figures, versions, each step's status,
reason and figures; with ``--only STEP ...``, ``gpu-<device-slug>-<step>....json``, so a
partial check leaves the full record alone) and prints a table.

Without CUDA, or with ``--dry-run``, every CUDA step is recorded ``skipped`` with its
reason and the steps that have a CPU analog run it at a tiny size (the tasks with both
backends, the n-bit bytes with fbgemm's CPU layout, the tiered simulation, the bandwidth
benchmark on CPU), so the code keeps working where no GPU is; the JSON is then
``gpu-dry-run.json``.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from suite.environment import environment, fbgemm_version
from suite.fileio import write_text_atomic
from suite.gpu_check import steps
from suite.gpu_check.bandwidth import BYTES_COUNTED
from suite.gpu_check.kaggle import kaggle_step
from suite.gpu_check.methods import methods_step
from suite.kernel_backend import fbgemm_available

FORMAT = 1
NO_CUDA = "no CUDA device (dry run)"
DRY_RUN = "--dry-run given (dry run)"
NVIDIA_SMI_QUERY = "name,driver_version,memory.total,clocks.max.memory"


@dataclass(frozen=True)
class Step:
    """One step of the check; ``cpu_analog``: it also runs, tiny, on CPU in a dry run."""

    name: str
    title: str
    run: Callable[[torch.device], steps.StepOutcome]
    cpu_analog: bool = True


STEPS = [
    Step("gpu-tests", "pytest -m gpu", steps.gpu_tests_step, cpu_analog=False),
    Step("accuracy", "accuracy task, fbgemm vs torch", steps.task_step("accuracy")),
    Step("memory", "memory task, fbgemm vs torch", steps.task_step("memory")),
    Step("throughput", "throughput task, fbgemm vs torch", steps.task_step("throughput")),
    Step("nbit-bytes", "int8/int4 bytes from kernel tensors", steps.lowprec_bytes_step),
    Step("caching-replay", "tiered task, MANAGED_CACHING replay", steps.tiered_step),
    Step("tbe-bandwidth", "TBE bytes/s vs copy bandwidth", steps.bandwidth_step),
    Step("methods", "every embedding method: cpu agreement, restore, cost", methods_step),
    Step("kaggle-full", "full DLRM job at Kaggle size: samples/s, profile, busy", kaggle_step),
]


def slug(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def nvidia_smi() -> dict[str, Any]:
    """``nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory`` as one
    dict per GPU, or ``{"available": False, "reason": ...}``."""
    if not shutil.which("nvidia-smi"):
        return {"available": False, "reason": "nvidia-smi not found"}
    command = ["nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"available": False, "reason": f"{type(exc).__name__}: {exc}"}
    if done.returncode != 0:
        return {"available": False, "reason": (done.stderr or done.stdout).strip()[:200]}
    rows = list(csv.reader(io.StringIO(done.stdout.strip())))
    header = [h.strip() for h in rows[0]]
    gpus = [dict(zip(header, (v.strip() for v in row), strict=False)) for row in rows[1:]]
    return {"available": True, "query": NVIDIA_SMI_QUERY, "gpus": gpus}


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip().rstrip(":")[:300]


def run_step(step: Step, device: torch.device) -> dict[str, Any]:
    """Run ``step`` on ``device``: ``ok`` with its figures, or ``failed`` with the reason
    (its problems, or the exception in one line)."""
    start = time.perf_counter()
    record: dict[str, Any] = {"step": step.name, "title": step.title, "device": device.type}
    try:
        outcome = step.run(device)
    except Exception as exc:  # a step's failure is a finding; the others still run
        record.update(status="failed", reason=_one_line(exc), figures={}, summary="")
    else:
        failed = bool(outcome.problems)
        record.update(
            status="failed" if failed else "ok",
            reason="; ".join(outcome.problems) if failed else None,
            figures=outcome.figures,
            summary=outcome.summary,
        )
    record["seconds"] = round(time.perf_counter() - start, 2)
    return record


def skipped(step: Step, reason: str) -> dict[str, Any]:
    return {"step": step.name, "title": step.title, "device": "cuda", "status": "skipped",
            "reason": reason, "figures": {}, "summary": "", "seconds": 0.0}  # fmt: skip


def run_check(
    out: str | Path = "results/bench", dry_run: bool = False, only: list[str] | None = None
) -> tuple[dict[str, Any], Path]:
    """Run the check (see the module docstring); returns the report and the JSON's path."""
    chosen = [s for s in STEPS if only is None or s.name in only]
    unknown = set(only or []) - {s.name for s in STEPS}
    if unknown:
        raise ValueError(f"unknown steps {sorted(unknown)} (steps: {[s.name for s in STEPS]})")
    has_cuda = torch.cuda.is_available()
    cuda = has_cuda and not dry_run
    records = []
    for step in chosen:
        if cuda:
            records.append(run_step(step, torch.device("cuda")))
            continue
        records.append(skipped(step, DRY_RUN if has_cuda else NO_CUDA))
        if step.cpu_analog:
            records.append(run_step(step, torch.device("cpu")))
    device_name = torch.cuda.get_device_name(0) if cuda else None
    counts = {s: sum(r["status"] == s for r in records) for s in ("ok", "failed", "skipped")}
    report = {
        "format": FORMAT,
        "kind": "recsuite gpu check",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "dry_run": not cuda,
        "device": {
            "cuda": cuda,
            "name": device_name,
            "capability": list(torch.cuda.get_device_capability(0)) if cuda else None,
            "torch_cuda": torch.version.cuda,
        },
        "nvidia_smi": nvidia_smi(),
        "versions": {
            "torch": torch.__version__,
            "fbgemm": fbgemm_version(),
            "fbgemm_available": fbgemm_available()[0],
        },
        "environment": environment("cuda" if cuda else "cpu"),
        "bytes_counted": BYTES_COUNTED,
        "counts": counts,
        "steps": records,
    }
    part = "".join(f"-{name}" for name in only or [])  # a partial check keeps the full record
    name = f"gpu-{slug(device_name)}{part}.json" if cuda else f"gpu-dry-run{part}.json"
    path = write_text_atomic(Path(out) / name, json.dumps(report, indent=2, sort_keys=True) + "\n")
    return report, path


def table(report: dict[str, Any]) -> str:
    """The report as an aligned text table: step, device, status, seconds, then the
    summary (or the reason for a step that did not pass)."""
    rows = [("step", "device", "status", "s", "figures / reason")]
    for r in report["steps"]:
        text = r["summary"] if r["status"] == "ok" else r["reason"] or ""
        rows.append((r["step"], r["device"], r["status"], f"{r['seconds']:.1f}", text))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
             for row in rows]  # fmt: skip
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 16)
    return "\n".join(lines)
