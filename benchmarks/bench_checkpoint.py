"""What the checkpoint path costs: its share of training time at the default interval,
measured in one training run, and each kind's write time against a training step.

    python benchmarks/bench_checkpoint.py [--seconds S] [--every 1m] [--threads T]

1. One run of DLRM on criteo-synth (default config) through the suite's training loop
   for about ``--seconds`` of training, writing full checkpoints (what ``--set
   train.checkpoint_every=1m`` does, atomically, fsync'ed) at ``--every`` (default: the
   suite's recommended interval). The loop clocks training and checkpoint writing
   apart; the ratio is checkpoint seconds / training seconds of that one run. Target:
   <= 5%.
2. Side by side on one model: the mean write time of a full, an incremental, a 4-bit and
   an incremental 4-bit checkpoint, and the per-step cost of tracking modified rows
   (incremental kinds), each as a multiple of one training step.

Prints a table and writes ``results/bench/checkpoint.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _common import print_table, write_json

from suite.config import build_config
from suite.data.loader import BatchLoader
from suite.data.source import get_prepared
from suite.engine.build import build_model
from suite.engine.checkpoint import (
    DEFAULT_EVERY,
    Checkpointer,
    CheckpointEvery,
    CheckpointPolicy,
    LoopState,
)
from suite.engine.train import make_dense_optimizer, train, train_step

CPU = torch.device("cpu")
KINDS = {
    "full": CheckpointPolicy(keep_all=True),
    "incremental": CheckpointPolicy(incremental=True, restore_budget=100.0, keep_all=True),
    "4-bit": CheckpointPolicy(bits=4, keep_all=True),
    "incremental-4-bit": CheckpointPolicy(
        incremental=True, bits=4, restore_budget=100.0, keep_all=True
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=150.0, help="training time of run 1")
    parser.add_argument("--every", default=DEFAULT_EVERY, help="checkpoint interval of run 1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--interval-steps", type=int, default=50, help="for the per-kind rows")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = build_config(values={"train.progress": False, "train.threads": args.threads})
    data = get_prepared(config.dataset, progress=False)
    identity = {"config_hash": config.config_hash(), "data_fingerprint": data.fingerprint}

    # per-step time, to size run 1 and as the unit of part 2
    model = build_model(config, data)
    dense_opt = make_dense_optimizer(model.dense_parameters(), config.train)
    batches = iter(BatchLoader(data.split("train"), config.train.batch_size, shuffle=True))
    for step in range(1, 6):
        train_step(model, next(batches), dense_opt, step)
    started = time.perf_counter()
    for step in range(6, 36):
        train_step(model, next(batches), dense_opt, step)
    step_seconds = (time.perf_counter() - started) / 30

    # 1. the checkpoint path's share of one run at the default interval
    steps = max(50, int(args.seconds / step_seconds))
    per_epoch = len(BatchLoader(data.split("train"), config.train.batch_size))
    run_cfg = config.train.model_copy(update={"max_steps": steps, "epochs": -(-steps // per_epoch)})
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as tmp:
        model = build_model(config, data)
        with Checkpointer(Path(tmp) / "run", identity, CheckpointEvery.parse(args.every)) as writer:
            outcome = train(model, data, run_cfg, config.seed, CPU, checkpoints=writer)
            written = list(writer.written)
    ratio = outcome.checkpoint_seconds / outcome.seconds
    print(
        f"run: {outcome.steps} steps, {outcome.seconds:.1f} s training, {len(written)} full "
        f"checkpoints at {args.every} ({written[0].bytes / 1e6 if written else 0:.1f} MB each), "
        f"{outcome.checkpoint_seconds:.2f} s writing them"
    )
    print(
        f"checkpoint path / training time at the default interval: {100 * ratio:.2f}% "
        f"(target <= 5%): {'holds' if ratio <= 0.05 else 'does not hold'}"
    )

    # 2. each kind's write time and tracking cost, in training steps
    rows = []
    model = build_model(config, data)
    dense_opt = make_dense_optimizer(model.dense_parameters(), config.train)
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as tmp:
        writers = {n: Checkpointer(Path(tmp) / n, identity, policy=p) for n, p in KINDS.items()}
        for writer in writers.values():
            writer.start(model)
        tracker = writers["incremental"].tracker
        assert tracker is not None
        seconds: dict[str, list[float]] = {name: [] for name in KINDS}
        observe_seconds = []
        batches = iter(BatchLoader(data.split("train"), config.train.batch_size, shuffle=True))
        state = LoopState()
        for _ in range(4):  # 4 checkpoints of each kind, interleaved
            for _ in range(args.interval_steps):
                state.step += 1
                batch = next(batches)
                tick = time.perf_counter()
                for writer in writers.values():
                    writer.observe(model, batch.sparse)
                observe_seconds.append((time.perf_counter() - tick) / 2)  # two tracking kinds
                train_step(model, batch, dense_opt, state.step)
            for name, writer in writers.items():
                seconds[name].append(writer.save(model, dense_opt, state).seconds)
        fraction = statistics.mean(i.rows_fraction for i in writers["incremental"].written[1:])
        for name, writer in writers.items():
            infos = writer.written[1:]  # after the first, full, one
            write = statistics.median(seconds[name][1:])
            rows.append(
                {
                    "kind": name,
                    "MB": statistics.mean(i.bytes for i in infos) / 1e6,
                    "embedding MB": statistics.mean(i.embedding_bytes for i in infos) / 1e6,
                    "write s": write,
                    "write / step": write / step_seconds,
                    f"overhead @{args.interval_steps} steps": write
                    / (args.interval_steps * step_seconds),
                }
            )
            writer.close()
    track = statistics.median(observe_seconds)
    print(
        f"\nper kind, checkpoint every {args.interval_steps} steps (training step "
        f"{1e3 * step_seconds:.1f} ms; rows modified per interval {100 * fraction:.1f}%; "
        f"row tracking {1e3 * track:.3f} ms/step = {100 * track / step_seconds:.2f}% of a step):"
    )
    print_table(rows, list(rows[0]))
    path = write_json(
        "checkpoint",
        {
            "every": args.every,
            "steps": outcome.steps,
            "train_seconds": outcome.seconds,
            "checkpoint_seconds": outcome.checkpoint_seconds,
            "checkpoints": len(written),
            "ratio": ratio,
            "step_seconds": step_seconds,
            "tracking_seconds_per_step": track,
            "modified_rows_fraction": fraction,
            "kinds": rows,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
