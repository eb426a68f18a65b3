"""Training samples/s of DLRM with fbgemm's table-batched kernel vs plain
``torch.nn.EmbeddingBag`` tables, side by side in one run, at batch 128 and 2048.

Both go through the suite's one training loop on criteo-synth; the runs are interleaved
and repeated, and the median is reported, so drift on a shared machine hits both alike.

    python benchmarks/bench_backends.py [--steps N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _common import print_table, write_json

from suite.config import build_config
from suite.data.source import get_prepared
from suite.engine.build import build_model
from suite.engine.train import train


def measure(backend: str, batch_size: int, steps: int, threads: int) -> float:
    config = build_config(
        values={
            "embedding.options.backend": backend,
            "train.batch_size": batch_size,
            "train.max_steps": steps,
            "train.progress": False,
            "train.threads": threads,
            "train.checkpoint": "final",
            "tracking.enabled": False,
        }
    )
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    outcome = train(model, data, config.train, config.seed, torch.device("cpu"))
    return outcome.samples_per_second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="training steps per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    args = parser.parse_args()
    steps, repeats = (20, 1) if args.quick else (args.steps, args.repeats)

    rows = []
    for batch_size in (128, 2048):
        samples: dict[str, list[float]] = {"fbgemm": [], "torch": []}
        for _ in range(repeats):
            for backend in samples:
                samples[backend].append(measure(backend, batch_size, steps, args.threads))
        fbgemm, plain = statistics.median(samples["fbgemm"]), statistics.median(samples["torch"])
        rows.append(
            {
                "batch": batch_size,
                "fbgemm samples/s": fbgemm,
                "nn.EmbeddingBag samples/s": plain,
                "ratio fbgemm/nn": fbgemm / plain,
            }
        )
    print(f"DLRM training throughput on criteo-synth, {args.threads} threads, median of {repeats}")
    print_table(rows, ["batch", "fbgemm samples/s", "nn.EmbeddingBag samples/s", "ratio fbgemm/nn"])
    path = write_json(
        "backends", {"steps": steps, "repeats": repeats, "threads": args.threads, "rows": rows}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
