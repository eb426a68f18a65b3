"""``import suite`` picks the OpenMP wait policy before torch loads libgomp: passive on an
oversubscribed machine, libgomp's default otherwise; the processes the suite starts
(distributed workers, benchmark children) inherit it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# the load the probe reports, then the entry point `suite` runs, then a child process of it
# reports what it sees
CHILD = "import os; print(os.environ.get('OMP_WAIT_POLICY'))"
PROBE = """
import os, subprocess, sys
os.getloadavg = lambda: ({load}, 0.0, 0.0)
import suite.cli
subprocess.run([sys.executable, "-c", {child!r}], check=True)
"""


def _probe(load: float, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(load=load, child=CHILD)],
        env={**base, **env},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_oversubscribed_machine_gets_passive_and_a_subprocess_sees_it() -> None:
    assert _probe(load=10.0 * (os.cpu_count() or 1)) == "PASSIVE"


def test_a_quiet_machine_keeps_libgomps_default() -> None:
    assert _probe(load=0.0) == "None"


@pytest.mark.parametrize("load", [0.0, 1000.0])
def test_a_users_wait_policy_wins(load: float) -> None:
    assert _probe(load=load, OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"
