"""Test drivers in a network namespace of their own (loopback only), where a real Ray
cluster binds 127.0.0.1 (:mod:`suite.executors.loopback`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from suite.executors.loopback import netns_command

ROOT = Path(__file__).resolve().parent.parent


def run_in_netns(args: list[str], timeout: float = 300, env: dict[str, str] | None = None) -> Any:
    """Run ``python args...`` in a new network namespace (loopback up) from the checkout's
    root and return the JSON its last stdout line holds; its stderr is kept on failure."""
    proc = subprocess.run(
        netns_command(args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})},
    )
    if proc.returncode != 0:
        raise AssertionError(f"{args} exited {proc.returncode}:\n{proc.stderr[-6000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
