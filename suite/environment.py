"""What machine and software a run ran on."""

from __future__ import annotations

import functools
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import torch

from suite import __version__


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
    return _version("fbgemm-gpu") or _version("fbgemm-gpu-cpu")


def device_name(device: str) -> str:
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return platform.processor() or platform.machine()


def environment(device: str = "cpu") -> dict[str, str | int | None]:
    """Versions, commit, device and thread count of this process."""
    return {
        "suite_version": __version__,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "fbgemm": fbgemm_version(),
        "mlflow": _version("mlflow"),
        "device": device,
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }
