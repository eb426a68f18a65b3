"""Each compression-curve point's train step cost against ``full``'s, timed side by side.

    python benchmarks/bench_curve_steps.py [--profile curve] [--budgets 2 4 ...]
        [--methods dhe ttrec ...] [--steps N] [--repeats R] [--quick]

The curve report's step cost column divides ``full``'s samples/s by the method's from the
reproduction's own jobs, which trained over many sittings; where a method and ``full``
trained in different sittings (marked ``‡`` there) the ratio carries the machine's drift
between them too. Here every point's config is resolved as the reproduction resolves it
(``suite.reproduce.plan.run_config``: the options its ``options_at_budget`` chose, the
tuned learning rates, the profile's data and thread count) and each trains ``--steps``
steps in turn through the suite's one training loop, ``full`` first and last in every
repeat, the order reversed on odd repeats. A point's step cost in a repeat is ``full``'s
mean rate in that repeat over the point's rate; the median over repeats is reported, so
drift on a shared machine hits ``full`` and the point alike. ``--quick`` times the
``curve-smoke`` profile's points for a few steps.

Prints a table and writes ``results/bench/curve_steps.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _common import print_table, write_json

from suite.config import RunConfig
from suite.data.source import get_prepared
from suite.embeddings.budget import BudgetUnreachable
from suite.engine.build import build_model
from suite.engine.train import train
from suite.reproduce.plan import run_config
from suite.reproduce.spec import load_spec

SPEC = "compression"
CPU = torch.device("cpu")
PROGRESS_EVERY_S = 30.0


def curve_points(
    profile: str, budgets: list[int] | None, methods: list[str] | None, steps: int
) -> list[tuple[str, int, RunConfig]]:
    """``(method, budget, config)`` for the reference (budget 1) and every curve point the
    profile reaches, each set to train ``steps`` steps without tracking or checkpoints."""
    spec = load_spec(SPEC)
    curve = spec.curve
    assert curve is not None, f"{SPEC}: no curve"
    timing = {
        "train": {"max_steps": steps, "progress": False, "checkpoint": "final"},
        "tracking": {"enabled": False},
    }
    points = [("full", 1, run_config(spec, profile, curve.reference, timing))]
    for budget in budgets or spec.profiles[profile].budgets or curve.budgets:
        for method in methods or curve.methods:
            try:
                config = run_config(spec, profile, curve.run_id(method, budget), timing)
            except BudgetUnreachable:
                continue
            points.append((method, budget, config))
    return points


def samples_per_second(config: RunConfig) -> float:
    """One timed training of ``config``'s model from scratch (seed 0)."""
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)  # sets the config's thread count
    return train(model, data, config.train, 0, CPU).samples_per_second


def side_by_side(points: list[tuple[str, int, RunConfig]], repeats: int) -> list[dict[str, Any]]:
    """Each point's median step cost against ``full``'s over ``repeats`` interleaved rounds."""
    reference, others = points[0], points[1:]
    costs: dict[tuple[str, int], list[float]] = {(m, b): [] for m, b, _ in points}
    rates: dict[tuple[str, int], list[float]] = {(m, b): [] for m, b, _ in points}
    start = last = time.perf_counter()
    for repeat in range(repeats):
        order = others if repeat % 2 == 0 else others[::-1]
        first = samples_per_second(reference[2])
        timed = {}
        for i, (m, b, config) in enumerate(order):
            timed[(m, b)] = samples_per_second(config)
            if time.perf_counter() - last > PROGRESS_EVERY_S:
                last = time.perf_counter()
                print(
                    f"repeat {repeat + 1}/{repeats}: {i + 1}/{len(order)} points", file=sys.stderr
                )
        full = (first + samples_per_second(reference[2])) / 2
        timed[(reference[0], reference[1])] = full
        for point, rate in timed.items():
            rates[point].append(rate)
            costs[point].append(full / rate)
        per_repeat = (time.perf_counter() - start) / (repeat + 1)
        print(
            f"repeat {repeat + 1}/{repeats} done, {per_repeat:.0f} s a repeat, about "
            f"{per_repeat * (repeats - repeat - 1) / 60:.1f} min left",
            file=sys.stderr,
            flush=True,
        )
    return [
        {
            "budget": f"1/{b}" if b > 1 else "full",
            "method": m,
            "train samples/s": statistics.median(rates[(m, b)]),
            "step cost vs full": statistics.median(costs[(m, b)]),
            "spread (min-max)": f"{min(costs[(m, b)]):.2f}-{max(costs[(m, b)]):.2f}",
        }
        for m, b, _ in points
    ]


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="curve", help="the compression spec's profile")
    parser.add_argument("--budgets", type=int, nargs="+", help="budgets b of 1/b (default all)")
    parser.add_argument("--methods", nargs="+", help="curve methods (default all)")
    parser.add_argument("--steps", type=int, default=200, help="training steps per timing")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="curve-smoke, 20 steps, 2 repeats")
    args = parser.parse_args(argv)
    profile, steps, repeats = (
        ("curve-smoke", 20, 2) if args.quick else (args.profile, args.steps, args.repeats)
    )
    spec = load_spec(SPEC)
    assert spec.curve is not None, f"{SPEC}: no curve"
    if profile not in spec.profiles:
        parser.error(f"--profile {profile}: not a profile of {SPEC} ({', '.join(spec.profiles)})")
    budgets = spec.profiles[profile].budgets or spec.curve.budgets
    for name, given, known in (
        ("--budgets", args.budgets, budgets),
        ("--methods", args.methods, spec.curve.methods),
    ):
        unknown = [str(x) for x in given or [] if x not in known]
        if unknown:
            parser.error(
                f"{name} {' '.join(unknown)}: not on {profile}'s curve "
                f"({', '.join(map(str, known))})"
            )
    points = curve_points(profile, args.budgets, args.methods, steps)
    rows = side_by_side(points, repeats)
    threads = points[0][2].train.threads
    print(
        f"{SPEC} curve, profile {profile}: {len(points)} points, {steps} training steps each, "
        f"batch {points[0][2].train.batch_size}, {threads} thread(s), median of {repeats} "
        "interleaved repeats"
    )
    print_table(
        rows, ["budget", "method", "train samples/s", "step cost vs full", "spread (min-max)"]
    )
    path = write_json(
        "curve_steps",
        {"profile": profile, "steps": steps, "repeats": repeats, "threads": threads, "rows": rows},
    )
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()
