"""What the validation curve (``tracking.val_curve``) costs the default run.

    python benchmarks/bench_val_curve.py [--rounds 2] [--points 10] [--rows 8192]

Trains the default run (``suite run``'s defaults: DLRM, full tables, criteo-synth, one
epoch) ``rounds`` times, then runs the evaluations the curve would add on the trained
model; CPU seconds of each (CPU time: other processes do not inflate it). Prints the
curve's cost as a share of training and writes ``results/bench/val_curve.json``. (That
the curve leaves training bit-identical is tests/test_val_curve.py's job.)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

# isort: off
import suite  # noqa: F401  first: sets OMP_WAIT_POLICY before torch loads libgomp

# isort: on
import torch

from suite.config import RunConfig
from suite.data.source import get_prepared
from suite.engine.build import build_model, seed_everything
from suite.engine.train import ValCurve, evaluate, train
from suite.stats import mean_ci

ROOT = Path(__file__).resolve().parents[1]


def one_round(config: RunConfig, points: int, rows: int) -> dict[str, float]:
    """CPU seconds of one default training run and of the evaluations its curve adds
    (timed on the trained model: an evaluation's cost does not depend on the weights)."""
    data = get_prepared(config.dataset, progress=False)
    seed_everything(config.seed, config.train.threads)
    model = build_model(config, data)
    cpu = torch.device("cpu")
    start = time.process_time()
    outcome = train(model, data, config.train, config.seed, cpu)
    train_cpu = time.process_time() - start
    curve = ValCurve(points, rows, lambda metrics, step: None)
    val = data.split("val")
    steps = curve.steps(outcome.steps)
    part = curve.split(val)
    start = time.process_time()
    for _ in steps:
        evaluate(model, part, config.train.eval_batch_size, cpu)
    return {
        "train_cpu_s": train_cpu,
        "curve_cpu_s": time.process_time() - start,
        "evaluations": len(steps),
        "curve_rows": len(part),
        "val_rows": len(val),
        "steps": outcome.steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--points", type=int, default=10)
    parser.add_argument("--rows", type=int, default=8192)
    args = parser.parse_args()
    config = RunConfig().with_overrides({"train.progress": False})
    rounds = [one_round(config, args.points, args.rows) for _ in range(args.rounds)]
    shares = [100 * r["curve_cpu_s"] / r["train_cpu_s"] for r in rounds]
    for r, share in zip(rounds, shares, strict=True):
        print(
            f"train {r['train_cpu_s']:.1f} CPU s ({r['steps']} steps), curve "
            f"{r['curve_cpu_s']:.2f} CPU s ({r['evaluations']} evaluations of "
            f"{r['curve_rows']:,} of {r['val_rows']:,} val rows): {share:.2f}%"
        )
    interval = mean_ci(shares) if len(shares) > 1 else None
    if interval is not None:
        print(
            f"curve cost: {interval.mean:.2f}% of training CPU time [{interval.low:.2f}, {interval.high:.2f}]"
        )
    out = ROOT / "results" / "bench" / "val_curve.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"args": vars(args), "rounds": rounds, "share_pct": shares}, indent=2)
    )


if __name__ == "__main__":
    main()
