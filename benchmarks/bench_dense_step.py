"""The suite's DLRM training step under settings that should not change its numbers:
OpenMP wait policy and ``train.compile`` (also with Inductor's max-autotune C++ GEMM
templates), side by side in one run.

    python benchmarks/bench_dense_step.py [--rounds 3] [--variants default,passive,...]

The model is the one of issue 16 (bottom 512-256-64 to dim 16, top 512-256, 26
criteo-synth tables, fbgemm ``full`` tables, SGD lr 0.1 on both parts). Every variant
runs in its own fresh process (the OpenMP wait policy is read once, when libgomp
loads), and the variants are interleaved round by round, so that a shared machine's
load falls on all of them alike. Each process measures the real training loop
(:func:`suite.tasks.throughput.measure_training`: BatchLoader + ``train_step``) at each
batch size; compile time (the first steps of a compiled model) is reported apart.

Prints samples/s per variant and the ratio of each variant to the first one, per round,
with the mean and 95% CI over rounds (``suite.stats.mean_ci``); writes
``results/bench/dense_step.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

# torch first: the child's OpenMP wait policy must be the one its parent gave it, not
# the default ``import suite`` sets (torch loads libgomp, which reads the variable once).
import torch

if TYPE_CHECKING:
    from suite.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]

# name -> (environment, extra --set overrides)
VARIANTS: dict[str, tuple[dict[str, str], list[str]]] = {
    "default": ({}, ["train.compile=false"]),
    "passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, ["train.compile=false"]),
    "spin-10k": ({"GOMP_SPINCOUNT": "10000"}, ["train.compile=false"]),
    "spin-100k": ({"GOMP_SPINCOUNT": "100000"}, ["train.compile=false"]),
    "compile": ({}, ["train.compile=true"]),
    "passive+compile": ({"OMP_WAIT_POLICY": "PASSIVE"}, ["train.compile=true"]),
    # Inductor's own C++ GEMM templates, autotuned against ATen's. Static shapes: with a
    # dynamic batch size torch 2.13's compiled backward of the templated bmm asserts the
    # batch size it was compiled at and fails on any other.
    "compile-autotune": (
        {
            "TORCHINDUCTOR_MAX_AUTOTUNE": "1",
            "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS": "CPP,ATEN",
            "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES": "0",
        },
        ["train.compile=true"],
    ),
}
OPENMP = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
# every variable some variant sets: unset in the processes of the variants that do not
VARIANT_ENV = frozenset(OPENMP).union(*(env for env, _ in VARIANTS.values()))
MODEL = [
    "model.options.bottom_mlp=512-256-64",
    "model.options.top_mlp=512-256",
    "embedding.options.dim=16",
    "train.dense_optimizer=sgd",
    "train.dense_lr=0.1",
    "train.sparse_optimizer=sgd",
    "train.sparse_lr=0.1",
]
# a whole number of batches at every benched size (128 to 2048): a partial last batch
# would recompile a static-shape variant inside the timed window
DATA = {"train_rows": 102_400, "val_rows": 2_000, "test_rows": 2_000}
DEFAULT_BATCHES = "128,2048"


def bench_config(sets: Sequence[str] = ()) -> RunConfig:
    """Issue 16's DLRM on criteo-synth (``DATA`` and ``MODEL``), untracked, plus ``sets``
    (``--set`` overrides). The benchmarks of the dense step all build their config here."""
    from suite.config import build_config  # here: a variant's process sets OpenMP up first

    return build_config(
        components={"model": "dlrm", "embedding": "full", "dataset": "criteo-synth"},
        values={"train.progress": False, "tracking.enabled": False},
        overrides=[f"dataset.options.{k}={v}" for k, v in DATA.items()] + MODEL + list(sets),
    )


def child(sets: list[str], batches: list[int], seconds: float) -> dict:
    """One process: each batch size's steady training rate (and compile seconds)."""
    from suite.data.loader import BatchLoader
    from suite.data.source import get_prepared
    from suite.engine.build import build_model
    from suite.engine.train import make_dense_optimizer
    from suite.tasks.throughput import measure_training

    config = bench_config(sets)
    data = get_prepared(config.dataset, progress=False)
    out: dict = {"env": {k: os.environ.get(k) for k in sorted(VARIANT_ENV)}, "batches": {}}
    for size in batches:
        model = build_model(config, data)
        dense_opt = make_dense_optimizer(model.dense_parameters(), config.train)
        loader = BatchLoader(data.split("train"), size, shuffle=True, seed=config.seed)
        # the first steps (compilation, if any) apart from the steady window
        first, _ = measure_training(model, loader, dense_opt, torch.device("cpu"), 0, 3, None)
        window, loss = measure_training(
            model, loader, dense_opt, torch.device("cpu"), 2, None, seconds
        )
        out["batches"][str(size)] = {
            "samples_per_s": window.samples_per_second,
            "samples_per_cpu_s": window.samples_per_cpu_second,
            "steps": window.steps,
            "first_3_steps_s": first.seconds,
            "loss": loss,
        }
    return out


def child_env(name: str, parent: dict[str, str]) -> dict[str, str]:
    """The environment of variant ``name``'s process: ``parent``'s, less every variable
    some variant sets, plus the variant's own."""
    env = {k: v for k, v in parent.items() if k not in VARIANT_ENV}
    env.update(VARIANTS[name][0])
    return env


def run_child(name: str, batches: list[int], seconds: float) -> dict:
    env = child_env(name, dict(os.environ))
    sets = VARIANTS[name][1]
    payload = json.dumps({"sets": sets, "batches": batches, "seconds": seconds})
    command = [sys.executable, __file__, "--_child", payload]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode:
        raise RuntimeError(f"variant {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--variants", default="default,passive,compile,compile-autotune")
    parser.add_argument("--batches", default=DEFAULT_BATCHES)
    parser.add_argument("--seconds", type=float, default=3.0, help="steady window per batch")
    parser.add_argument("--out", default=str(ROOT / "results" / "bench" / "dense_step.json"))
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        spec = json.loads(args._child)
        print(json.dumps(child(spec["sets"], spec["batches"], spec["seconds"])))
        return 0

    from suite.stats import mean_ci

    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}; known: {', '.join(VARIANTS)}")
    batches = [int(b) for b in args.batches.split(",")]
    partial = [b for b in batches if DATA["train_rows"] % b]
    static = [
        n for n in names if VARIANTS[n][0].get("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_SHAPES") == "0"
    ]
    if partial and static:
        parser.error(
            f"--batches: {DATA['train_rows']} training rows are not a whole number of batches "
            f"of {partial}; {', '.join(static)} compile static shapes and would recompile on "
            "the last, partial batch inside the timed window"
        )
    load_start = os.getloadavg()
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]  # alternate who goes first
        for name in order:
            runs[name].append(run_child(name, batches, args.seconds))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    base = names[0]
    report: dict = {
        "variants": {n: {"env": VARIANTS[n][0], "sets": VARIANTS[n][1]} for n in names},
        "runs": runs,
        "summary": [],
    }
    print(f"\nDLRM train step, samples/s (mean over {args.rounds} interleaved rounds)")
    print(
        f"{'batch':>6}  {'variant':<18} {'samples/s':>10}  {'ratio to ' + base:>22}  first 3 steps"
    )
    for size in batches:
        key = str(size)
        for name in names:
            rates = [run["batches"][key]["samples_per_s"] for run in runs[name]]
            ratios = [
                run["batches"][key]["samples_per_s"] / ref["batches"][key]["samples_per_s"]
                for run, ref in zip(runs[name], runs[base], strict=True)
            ]
            ci = mean_ci(ratios)
            first = max(run["batches"][key]["first_3_steps_s"] for run in runs[name])
            report["summary"].append(
                {
                    "batch": size,
                    "variant": name,
                    "samples_per_s": rates,
                    "ratio": ratios,
                    "ratio_mean": ci.mean,
                    "ratio_ci": [ci.low, ci.high],
                    "first_3_steps_s_max": first,
                }
            )
            print(
                f"{size:>6}  {name:<18} {sum(rates) / len(rates):>10,.0f}  "
                f"{ci.mean:>6.2f}x [{ci.low:.2f}, {ci.high:.2f}] "
                f"({min(ratios):.2f}-{max(ratios):.2f})  {first:.1f}s"
            )
    report["load_average"] = {"start": load_start, "end": os.getloadavg()}
    report["threads"] = torch.get_num_threads()
    report["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
