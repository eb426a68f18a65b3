"""How long does the ``suite`` command take to start, next to a bare interpreter?

    python benchmarks/bench_startup.py [--rounds 5] [--out results/bench/startup.json]

Times, each in a fresh process and interleaved over rounds, ``python -c pass`` (the
floor), ``suite --help``, ``suite list --json`` (every entry with options and defaults)
the same with its source-reading cache off (cold: every entry file parsed), and
``python -c "import torch"`` (what a command that needs torch pays on top). Prints
the median wall and CPU seconds of each and the ratio to the floor; the targets are
``suite --help`` and ``suite list --json`` under 1 s of wall time on a quiet machine.
CPU time (user + sys of the child) is shown too: on a busy machine wall time includes
waiting for a core.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import print_table, write_json  # noqa: E402

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "suite --help": [sys.executable, "-m", "suite.cli", "--help"],
    "suite list --json": [sys.executable, "-m", "suite.cli", "list", "--json"],
    "suite list --json (cold)": [
        "env",
        "RECSUITE_CATALOG_CACHE=0",
        sys.executable,
        "-m",
        "suite.cli",
        "list",
        "--json",
    ],
    "python -c 'import torch'": [sys.executable, "-c", "import torch"],
}


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + sys) seconds of one run of ``argv`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="startup")
    args = parser.parse_args()
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env_path}" if env_path else str(ROOT)
    walls: dict[str, list[float]] = {name: [] for name in COMMANDS}
    cpus: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():  # warm the page cache (and the listing's cache) once
        timed(argv)
    for _ in range(args.rounds):
        for name, argv in COMMANDS.items():
            wall, cpu = timed(argv)
            walls[name].append(wall)
            cpus[name].append(cpu)
    floor = statistics.median(walls["python -c pass"])
    rows = [
        {
            "command": name,
            "wall_s": statistics.median(walls[name]),
            "cpu_s": statistics.median(cpus[name]),
            "x_python": statistics.median(walls[name]) / floor,
            "under_1s": statistics.median(walls[name]) < 1.0,
        }
        for name in COMMANDS
    ]
    print(f"start-up, median of {args.rounds} interleaved rounds (fresh process each)")
    print_table(rows, ["command", "wall_s", "cpu_s", "x_python", "under_1s"])
    path = write_json(args.out, {"rounds": args.rounds, "rows": rows, "walls": walls})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
