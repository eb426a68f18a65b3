"""What machine and software a run ran on."""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import torch

from suite import __version__
from suite.kernel_backend import fallback_note, fbgemm_available


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def git_commit() -> str:
    """The suite checkout's commit (with ``-dirty`` when it has local changes), or ``unknown``."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}-dirty" if dirty else commit


def fbgemm_version() -> str | None:
    """The installed fbgemm-gpu's version, or ``None`` where it is missing or does not
    import (built for another torch)."""
    version = _version("fbgemm-gpu") or _version("fbgemm-gpu-cpu")
    return version if version is not None and fbgemm_available()[0] else None


@functools.cache
def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``platform.processor()`` is often empty
    or just the architecture), else the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ram_available_bytes() -> int | None:
    """RAM this process may still allocate: ``MemAvailable`` plus free swap from
    ``/proc/meminfo``; ``None`` where it cannot be read."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        kib = int(info["MemAvailable"].split()[0]) + int(info.get("SwapFree", "0 kB").split()[0])
    except (OSError, KeyError, ValueError):
        return None
    return kib * 1024


def gpu_model() -> str | None:
    """The first CUDA device's name, or ``None`` without one."""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def device_name(device: str) -> str:
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return cpu_model()


DEVICE_ENV = "CUDA_VISIBLE_DEVICES"


def listed_gpus() -> list[str] | None:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` lists (``-1`` and blanks dropped: none), or
    ``None`` where it is unset."""
    listed = os.environ.get(DEVICE_ENV)
    if listed is None:
        return None
    return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]


def job_device(device: str) -> str:
    """The device this process trains on: ``cpu``, or ``cuda:<id>`` with the GPU's id as
    the machine numbers it (the first ``CUDA_VISIBLE_DEVICES`` entry, which an executor
    sets to the worker's own GPU; else torch's current device)."""
    if device != "cuda":
        return device
    listed = listed_gpus()
    if listed:
        return f"cuda:{listed[0]}"
    return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cuda"


def node_name() -> str:
    """This machine's host name; inside a Ray task or driver, with ``/ray:<node id>`` (its
    first 8 hex digits) after it, so nodes that share a host are told apart."""
    host = socket.gethostname()
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return f"{host}/ray:{ray.get_runtime_context().get_node_id()[:8]}"
    return host


def environment(device: str = "cpu") -> dict[str, str | int | None]:
    """Versions, commit, device (and :func:`job_device`, :func:`node_name`: which one, on
    which machine), CPU/GPU model and thread count of this process; where
    fbgemm-gpu does not import, also ``embedding_backend``: ``"torch (fbgemm-gpu
    unavailable: <reason>)"`` (tables asking for fbgemm ran on torch)."""
    env: dict[str, str | int | None] = {
        "suite_version": __version__,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "fbgemm": fbgemm_version(),
        "mlflow": _version("mlflow"),
        "device": device,
        "device_name": device_name(device),
        "job_device": job_device(device),
        "node": node_name(),
        "cpu_model": cpu_model(),
        "gpu_model": gpu_model(),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "platform": platform.platform(),
    }
    note = fallback_note()
    if note is not None:
        env["embedding_backend"] = note
    return env
