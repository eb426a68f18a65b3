"""How far an honest CPU re-run of a leaderboard submission drifts: the measurement behind
``suite leaderboard verify``'s CPU tolerance.

Every recorded seed of every submission under ``leaderboard/submissions/`` (or the files
given) is re-run through ``verify`` as another x86 CPU would run it: PyTorch's vector
kernels forced to another instruction set (``ATEN_CPU_CAPABILITY=default`` i.e. no
AVX, ``avx2``, and ``avx512`` where this CPU has it), and optionally at another thread
count. Each re-run is a child process (the variable is read when torch loads). Prints the
largest absolute difference of each quality metric against the recorded value.

    PYTHONPATH=. python benchmarks/verify_tolerance.py [FILE ...] [--threads 2] [--seeds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import print_table, write_json  # noqa: E402


def child(file: str, seed: int, threads: int | None) -> None:
    """Re-run one seed and print its comparisons as JSON (run in a fresh process)."""
    from suite.leaderboard.verify import VerifyOptions, verify

    options = VerifyOptions(seed=seed, tracking=False, tolerance=0.5)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    outcome = verify(Path(file), options, log=lambda _: None)
    rows = [
        {"metric": c.metric, "recorded": c.recorded, "rerun": c.rerun, "tolerance": c.tolerance}
        for c in outcome.comparisons
    ]
    print("RESULT " + json.dumps(rows))


def capabilities() -> list[str]:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    caps = ["default", "avx2"]
    if " avx512f" in flags and " avx512bw" in flags:
        caps.append("avx512")
    return caps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--seeds", help="comma-separated seeds (default: every recorded one)")
    parser.add_argument("--threads", type=int, help="also re-run at this thread count")
    parser.add_argument(
        "--child", nargs=3, metavar=("FILE", "SEED", "THREADS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        file, seed, threads = args.child
        child(file, int(seed), int(threads) if threads != "-" else None)
        return 0

    files = args.files or sorted(str(p) for p in (ROOT / "leaderboard/submissions").glob("*.json"))
    variants = [(cap, None) for cap in capabilities()]
    if args.threads:
        variants.append(("native", args.threads))
    rows = []
    worst: dict[str, float] = {}
    for file in files:
        recorded = json.loads(Path(file).read_text())
        seeds = [s["seed"] for s in recorded["seeds"]]
        if args.seeds:
            seeds = [s for s in seeds if str(s) in args.seeds.split(",")]
        for seed in seeds:
            for cap, threads in variants:
                env = dict(os.environ, PYTHONPATH=str(ROOT))
                if cap != "native":
                    env["ATEN_CPU_CAPABILITY"] = cap
                command = [
                    sys.executable,
                    __file__,
                    "--child",
                    file,
                    str(seed),
                    str(threads or "-"),
                ]
                done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
                lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
                if done.returncode != 0 or not lines:
                    print(done.stderr[-2000:], file=sys.stderr)
                    return 1
                row = {
                    "file": Path(file).name[:40],
                    "seed": seed,
                    "kernels": cap,
                    "threads": threads or "as recorded",
                }
                for c in json.loads(lines[-1][len("RESULT ") :]):
                    if c["tolerance"] is None or c["tolerance"] == 0.0:
                        continue
                    diff = abs(c["rerun"] - c["recorded"])
                    row[c["metric"]] = f"{diff:.1e}"
                    worst[c["metric"]] = max(worst.get(c["metric"], 0.0), diff)
                rows.append(row)
                print(json.dumps(row), flush=True)
    metrics = sorted(worst)
    print_table(rows, ["file", "seed", "kernels", "threads", *metrics])
    print("largest |re-run - recorded| per metric:")
    for metric in metrics:
        print(f"  {metric}: {worst[metric]:.2e}")
    write_json("verify_tolerance", {"rows": rows, "worst": worst})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
