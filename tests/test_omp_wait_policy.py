"""``import suite`` sets a passive OpenMP wait policy before torch loads libgomp, and the
processes the suite starts (distributed workers, benchmark children) inherit it."""

from __future__ import annotations

import os
import subprocess
import sys

# the entry point `suite` runs, then a child process of it reports what it sees
PROBE = (
    "import subprocess, sys, suite.cli; "
    "subprocess.run([sys.executable, '-c', "
    "'import os; print(os.environ.get(\"OMP_WAIT_POLICY\"))'], check=True)"
)


def _probe(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_entry_point_sets_passive_and_a_subprocess_sees_it() -> None:
    assert _probe() == "PASSIVE"


def test_a_users_wait_policy_wins() -> None:
    assert _probe(OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"
