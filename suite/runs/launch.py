"""``suite run --nproc-per-node N``: the same command again under ``torchrun``, one process
per rank on this machine (for many machines, run ``torchrun`` yourself; README)."""

from __future__ import annotations

import os
import subprocess
import sys

NPROC_FLAG = "--nproc-per-node"


def without_nproc(argv: list[str]) -> list[str]:
    """``argv`` without its ``--nproc-per-node N`` / ``--nproc-per-node=N``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == NPROC_FLAG:
            skip = True
        elif not arg.startswith(f"{NPROC_FLAG}="):
            out.append(arg)
    return out


def torchrun_command(argv: list[str], nproc: int) -> list[str]:
    """The ``torchrun`` command line that runs ``suite <argv>`` on ``nproc`` local ranks
    (a standalone rendezvous on a free local port)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "suite",
        *without_nproc(argv),
    ]


def relaunch(argv: list[str], nproc: int) -> int:
    """Run ``suite <argv>`` under ``torchrun`` with ``nproc`` ranks; its exit status.
    Each rank gets ``cores / nproc`` torch threads unless ``OMP_NUM_THREADS`` is set."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.run(torchrun_command(argv, nproc), env=env, check=False).returncode
