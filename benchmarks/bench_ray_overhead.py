"""What the Ray executor costs and gives (issue 69): the same reproduction jobs on the local
pool with one worker and on a two-node Ray cluster of one CPU each, in one run.

The cluster is real (:class:`suite.executors.loopback.LoopbackCluster`: a head and a second
node on 127.0.0.1), started in a network namespace this script makes for itself
(``unshare --net``), so Ray never binds the machine's routable address; every process it
starts is ended by its process group. The data is prepared once before anything is timed
(both nodes read this machine's cache), and each pass is one ``suite reproduce`` process
with its own output folder and MLflow store, so the two passes differ only in the executor:

- ``wall_ratio``: the local pass's wall time over the Ray pass's (2.0 at best);
- ``overhead_per_job_s``: node-seconds the Ray pass used beyond the local pass's work,
  ``(2 x wall_ray - wall_local) / jobs``: scheduling, shipping each job and its arrays,
  the node's fingerprint check, a worker's start, and any idle tail (an upper bound);
- ``round_trip_s``: one empty task submitted and collected through the executor, one at a
  time (``--empty``): Ray's own per-task cost.

A third pass, the local pool with two workers on the same two cores, separates what Ray
costs from what two jobs at once cost this machine (``overhead_per_job_vs_local_2_workers_s``).
The passes must store the same AUCs (checked; a mismatch is an error); metrics that differ
otherwise are listed (``differing_metrics``). Figures go to
stdout and ``results/bench/ray-overhead.json``; progress to stderr.

    python benchmarks/bench_ray_overhead.py                      # quick's checknrun jobs
    python benchmarks/bench_ray_overhead.py --paper ttrec --empty 50
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import print_table, write_json  # noqa: E402

IN_NETNS = "RECSUITE_BENCH_IN_NETNS"
FIGURES = "ray-overhead"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--paper", action="append", default=None, help="default: checknrun")
    parser.add_argument("--claim", action="append", default=None)
    parser.add_argument("--set", action="append", default=[], help="a config override, as suite's")
    parser.add_argument("--empty", type=int, default=30, help="empty tasks for the round trip")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp folder")
    parser.add_argument("--no-write", action="store_true", help="print only; no JSON file")
    return parser.parse_args(argv)


def subset(args: argparse.Namespace) -> list[str]:
    chosen = ["--profile", args.profile]
    for paper in args.paper or ["checknrun"]:
        chosen += ["--paper", paper]
    for claim in args.claim or []:
        chosen += ["--claim", claim]
    return chosen + [f"--set={text}" for text in args.set]


def note(text: str) -> None:
    print(f"[bench_ray_overhead] {text}", file=sys.stderr, flush=True)


def prepare(args: argparse.Namespace) -> int:
    """Prepare every dataset the subset trains on (untimed); the number of jobs."""
    from suite.config import parse_override, set_dotted
    from suite.data.source import get_prepared
    from suite.reproduce.plan import build_plan

    overrides: dict[str, Any] = {}
    for text in args.set:
        set_dotted(overrides, *parse_override(text))
    plan = build_plan(args.profile, args.paper or ["checknrun"], args.claim, overrides)
    for dataset in {
        job.config.dataset.model_dump_json(): job.config.dataset for job in plan.jobs
    }.values():
        get_prepared(dataset, progress=False)
    return len(plan.jobs)


def reproduce(name: str, workdir: Path, chosen: list[str], *extra: str) -> float:
    """One ``suite reproduce`` pass in its own process; its wall time (s)."""
    out = workdir / name
    uri = f"sqlite:///{workdir / f'{name}.db'}"
    command = [sys.executable, "-m", "suite", "reproduce", *chosen, "--quiet"]
    command += ["--out", str(out), "--tracking-uri", uri, *extra]
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"error: the {name} pass exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall


def stored_figures(out: Path) -> dict[str, dict[str, float]]:
    """``<config hash>/seed-<n>`` -> the run's metrics that are not timings."""
    from suite.registry import TASKS
    from suite.reproduce.store import RUNS_DIR
    from suite.results import TaskResult, repeatable_metrics

    figures = {}
    for path in sorted((out / RUNS_DIR).glob("*/seed-*.json")):
        result = TaskResult.read(path)
        figures[f"{path.parent.name}/{path.stem}"] = repeatable_metrics(
            result.metrics, TASKS.get(result.task).metrics
        )
    return figures


def job_seconds(out: Path) -> tuple[float, list[str]]:
    """The stored jobs' own training time (s, summed) and the nodes they recorded."""
    from suite.reproduce.store import RUNS_DIR
    from suite.results import TaskResult

    results = [TaskResult.read(p) for p in (out / RUNS_DIR).glob("*/seed-*.json")]
    nodes = sorted({str(r.environment.get("node")) for r in results})
    return sum(r.duration_s or 0.0 for r in results), nodes


def empty(job: int) -> int:
    return job


def round_trips(address: str, count: int) -> list[float]:
    """``count`` empty tasks through the executor one at a time: each one's seconds."""
    from suite.executors.base import Needs
    from suite.executors.ray_cluster import RayExecutor

    seconds = []
    with RayExecutor(address).connect() as session:
        for job in range(count + 1):  # the first starts a worker process: not counted
            started = time.monotonic()
            session.submit(job, empty, Needs(cpus=1))
            session.next()
            if job:
                seconds.append(time.monotonic() - started)
    return seconds


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from suite.executors.loopback import LoopbackCluster

    chosen = subset(args)
    os.environ["RECSUITE_CACHE"] = str(workdir / "cache")  # the driver's and both nodes'
    jobs = prepare(args)
    note(f"{jobs} jobs ({' '.join(chosen)}); data prepared; local pass, 1 worker ...")
    local = reproduce("local", workdir, chosen, "--workers", "1")
    note(f"local pass {local:.1f} s; local pass, 2 workers ...")
    local2 = reproduce("local2", workdir, chosen, "--workers", "2")
    note(f"local 2-worker pass {local2:.1f} s; starting a two-node loopback Ray cluster ...")
    with LoopbackCluster(workdir, head_cpus=1, node_cpus=1) as cluster:
        note("Ray pass (two nodes of one CPU) ...")
        on_ray = reproduce(
            "ray", workdir, chosen, "--executor", "ray", "--address", cluster.address
        )
        note(f"Ray pass {on_ray:.1f} s; {args.empty} empty tasks ...")
        trips = round_trips(cluster.address, args.empty)
    figures = {name: stored_figures(workdir / name) for name in ("local", "local2", "ray")}
    differing = sorted(
        {
            metric
            for name in ("local2", "ray")
            for key, values in figures["local"].items()
            for metric, value in values.items()
            if figures[name].get(key, {}).get(metric) != value
        }
    )
    if any(m.endswith("auc") for m in differing):
        raise SystemExit(f"error: the passes stored different AUCs: {differing}")
    work = {name: job_seconds(workdir / name) for name in ("local", "local2", "ray")}
    return {
        "subset": " ".join(chosen),
        "jobs": jobs,
        "local_wall_s": round(local, 2),
        "local_2_workers_wall_s": round(local2, 2),
        "ray_wall_s": round(on_ray, 2),
        "wall_ratio": round(local / on_ray, 3),
        "wall_ratio_local_2_workers": round(local / local2, 3),
        "overhead_per_job_s": round((2 * on_ray - local) / jobs, 3),
        "overhead_per_job_vs_local_2_workers_s": round(2 * (on_ray - local2) / jobs, 3),
        "job_s_sum_local": round(work["local"][0], 1),
        "job_s_sum_local_2_workers": round(work["local2"][0], 1),
        "job_s_sum_ray": round(work["ray"][0], 1),
        "ray_nodes_used": len(work["ray"][1]),
        "round_trip_s_median": round(median(trips), 4),
        "round_trip_s_max": round(max(trips), 4),
        "empty_tasks": len(trips),
        "differing_metrics": differing,
    }


def inside(args: argparse.Namespace) -> int:
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-ray-"))
    workdir.mkdir(parents=True, exist_ok=True)
    figures = measure(args, workdir.resolve())
    print(json.dumps(figures))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.environ.get(IN_NETNS):
        return inside(args)
    from suite.executors.loopback import netns_command, netns_unavailable

    why = netns_unavailable()
    if why:
        print(
            f"error: bench_ray_overhead needs a network namespace of its own: {why}",
            file=sys.stderr,
        )
        return 2
    proc = subprocess.run(  # progress (stderr) passes through; the figures come back
        netns_command([str(Path(__file__).resolve()), *(argv or sys.argv[1:])]),
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, IN_NETNS: "1", "RAY_USAGE_STATS_ENABLED": "0"},
    )
    if proc.returncode != 0:
        return proc.returncode
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    differing = figures.pop("differing_metrics")
    print_table([{"figure": k, "value": v} for k, v in figures.items()], ["figure", "value"])
    print(f"metrics that differ between the passes (AUCs never): {', '.join(differing) or 'none'}")
    figures["differing_metrics"] = differing
    if not args.no_write:
        print(f"wrote {write_json(FIGURES, figures)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
