"""DHE's train step decoding each distinct key of a batch once, against decoding every lookup.

    python benchmarks/bench_dhe_training.py [--steps 60] [--rounds 3] [--rows 400000]

Builds DLRM with the DHE spec's network (k = 300, four hidden layers of 300, dim 16) on
criteo-synth at the standard profile's size, twice from one seed: the suite's DHE (the
network on the batch's distinct keys, batch norm weighting each by its count) and the
paper's computation (the network on every one of the ``B * F`` lookups, ``nn.BatchNorm1d``).
Both train on the same batches, one torch thread, alternating in each round; prints CPU
ms a step of each, their ratio with a 95% CI over rounds, the batches' distinct keys per
lookup and the two models' largest logit gap on the first batch before any step (after
steps they part: under Adam the biases feeding batch norm get gradients of rounding noise
alone, which Adam's normalised step turns into moves of about the learning rate); writes
``results/bench/dhe_training.json``. (That the two compute the same embeddings, gradients
and statistics is tests/test_dhe.py's job.)
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# isort: off
import suite  # noqa: F401  first: sets OMP_WAIT_POLICY before torch loads libgomp

# isort: on
import torch
from _common import print_table, write_json

from suite.config import RunConfig
from suite.data.loader import BatchLoader
from suite.data.source import get_prepared
from suite.embeddings.dhe import DHEEmbedding
from suite.engine.build import build_model, seed_everything
from suite.engine.train import make_dense_optimizer, train_step
from suite.models.base import RecModel
from suite.stats import mean_ci


class EveryLookupDHE(DHEEmbedding):
    """The paper's computation: the network decodes each of the batch's lookups."""

    forward = DHEEmbedding.decode_every_lookup


def timed_steps(model: RecModel, batches: list, config: RunConfig) -> float:
    """CPU seconds of one train step on each batch (a fresh dense optimizer)."""
    optimizer = make_dense_optimizer(model.dense_parameters(), config.train)
    model.train()
    start = time.process_time()
    for step, batch in enumerate(batches, start=1):
        train_step(model, batch, optimizer, step)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=400_000)
    args = parser.parse_args()
    config = RunConfig().with_overrides(
        {
            "dataset.options.train_rows": args.rows,
            "embedding.name": "dhe",
            "embedding.options": {"dim": 16, "k": 300, "hidden": [300, 300, 300, 300]},
            "train.progress": False,
            "train.threads": 1,
        }
    )
    data = get_prepared(config.dataset, progress=False)
    loader = BatchLoader(data.split("train"), config.train.batch_size)
    batches = list(itertools.islice(iter(loader), args.steps))
    seed_everything(config.seed, 1)
    distinct_model = build_model(config, data)
    seed_everything(config.seed, 1)
    every_model = build_model(config, data)
    every_model.embedding.__class__ = EveryLookupDHE
    offsets = distinct_model.embedding.offsets
    distinct = [len(torch.unique(b.sparse + offsets)) / b.sparse.numel() for b in batches]
    with torch.no_grad():  # training mode: batch norm on the batch's statistics
        probe = batches[0]
        gap = (
            (distinct_model(probe.dense, probe.sparse) - every_model(probe.dense, probe.sparse))
            .abs()
            .max()
            .item()
        )

    rows = []
    for round_ in range(args.rounds):
        every_s = timed_steps(every_model, batches, config)
        distinct_s = timed_steps(distinct_model, batches, config)
        rows.append(
            {
                "round": round_,
                "every_lookup_ms": 1000 * every_s / len(batches),
                "distinct_ms": 1000 * distinct_s / len(batches),
                "speedup": every_s / distinct_s,
            }
        )
    print_table(rows, ["round", "every_lookup_ms", "distinct_ms", "speedup"])
    speedups = [r["speedup"] for r in rows]
    interval = mean_ci(speedups) if len(speedups) > 1 else None
    share = sum(distinct) / len(distinct)
    summary = f"distinct keys per lookup {share:.3f}; largest logit gap before training {gap:.1e}"
    if interval is not None:
        summary = (
            f"distinct-key step {interval.mean:.2f}x faster [{interval.low:.2f}, "
            f"{interval.high:.2f}]; " + summary
        )
    print(summary)
    write_json(
        "dhe_training",
        {
            "args": vars(args),
            "rounds": rows,
            "distinct_per_lookup": share,
            "logit_gap": gap,
            "speedup_mean": interval.mean if interval else speedups[0],
        },
    )


if __name__ == "__main__":
    main()
