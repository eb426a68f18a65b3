"""Training and inference samples/s of every embedding method relative to ``full``, with
DLRM on criteo-synth, side by side in one run.

    python benchmarks/bench_embeddings.py [--quick] [--steps N] [--repeats R] [--threads T]
        [--methods full fiited ...]

Each repeat trains every method in turn through the suite's one training loop
(``suite.engine.train.train``, default options, ``max_steps`` steps), then times
inference (``suite.engine.train.predict``) over the test split with the trained model and,
for composed methods, with its int8 and int4 tables (:func:`quantize_embedding`). Methods
are interleaved within a repeat and the median over repeats is reported, so drift on a
shared machine hits them alike. FIITED prunes every ``steps // 4`` steps and reaches its
budget at ``steps // 2``, so its pruning and its pruned store are part of what is timed.
``total vs full`` compares parameters + auxiliary + sparse optimizer state.

Prints a table and writes ``results/bench/embeddings.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from _common import print_table, write_json

from suite.config import build_config
from suite.data.source import get_prepared
from suite.embeddings.base import ComposedEmbedding
from suite.embeddings.quantize import quantize_embedding
from suite.engine.build import build_model
from suite.engine.train import predict, train
from suite.models.base import RecModel

METHODS = ["full", "hash", "qr", "mixed_dim", "fiited"]
LOW_PRECISIONS = ["int8", "int4"]
CPU = torch.device("cpu")


def config_for(method: str, steps: int, threads: int, dataset: dict[str, int]):
    values = {
        "model": "dlrm",
        "embedding.name": method,
        "train.max_steps": steps,
        "train.progress": False,
        "train.threads": threads,
        "train.checkpoint": "final",
        "tracking.enabled": False,
        **{f"dataset.options.{k}": v for k, v in dataset.items()},
    }
    if method == "fiited":
        values["embedding.options.prune_every"] = max(1, steps // 4)
        values["embedding.options.warmup_steps"] = max(1, steps // 2)
    return build_config(values=values)


def inference_rate(model: RecModel, split, batch_size: int) -> float:
    predict(model, split, batch_size, CPU)  # warm-up
    tick = time.perf_counter()
    predict(model, split, batch_size, CPU)
    return len(split) / (time.perf_counter() - tick)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--eval-batch", type=int, default=4096)
    parser.add_argument("--quick", action="store_true", help="smaller test split, fewer steps")
    parser.add_argument(
        "--methods", nargs="+", default=METHODS, choices=METHODS, help="methods (full always)"
    )
    args = parser.parse_args()
    methods = ["full", *(m for m in args.methods if m != "full")]
    steps, repeats = (60, 2) if args.quick else (args.steps, args.repeats)
    dataset = {"test_rows": 10_000, "val_rows": 5_000} if args.quick else {}

    train_rate: dict[str, list[float]] = {m: [] for m in methods}
    infer_rate: dict[str, list[float]] = {}
    memory: dict[str, int] = {}
    total: dict[str, int] = {}
    for _ in range(repeats):
        for method in methods:
            config = config_for(method, steps, args.threads, dataset)
            data = get_prepared(config.dataset, progress=False)
            model = build_model(config, data)
            outcome = train(model, data, config.train, config.seed, CPU)
            train_rate[method].append(outcome.samples_per_second)
            test = data.split("test")
            variants = {method: model}
            if isinstance(model.embedding, ComposedEmbedding):
                for p in LOW_PRECISIONS:
                    low = RecModel(quantize_embedding(model.embedding, p), model.backbone)
                    variants[f"{method}@{p}"] = low
            for name, variant in variants.items():
                infer_rate.setdefault(name, []).append(
                    inference_rate(variant, test, args.eval_batch)
                )
                m = variant.embedding.memory()
                memory[name] = m.parameters + m.auxiliary
                total[name] = m.total

    base_train = statistics.median(train_rate["full"])
    base_infer = statistics.median(infer_rate["full"])
    rows = []
    for name, rates in infer_rate.items():
        method = name.split("@")[0]
        trained = statistics.median(train_rate[method]) if "@" not in name else None
        infer = statistics.median(rates)
        rows.append(
            {
                "method": name,
                "train samples/s": trained,
                "train vs full": trained / base_train if trained else None,
                "infer samples/s": infer,
                "infer vs full": infer / base_infer,
                "embedding MiB": memory[name] / 2**20,
                "bytes vs full": memory[name] / memory["full"],
                "total vs full": total[name] / total["full"],
            }
        )
    print(
        f"DLRM on criteo-synth, batch {config.train.batch_size}, {steps} training steps, "
        f"{args.threads} threads, median of {repeats}; inference over {len(test)} test rows"
    )
    columns = [
        "method", "train samples/s", "train vs full", "infer samples/s", "infer vs full",
        "embedding MiB", "bytes vs full", "total vs full",
    ]  # fmt: skip
    print_table(rows, columns)
    path = write_json(
        "embeddings",
        {
            "quick": args.quick,
            "steps": steps,
            "repeats": repeats,
            "threads": args.threads,
            "batch_size": config.train.batch_size,
            "eval_batch_size": args.eval_batch,
            "test_rows": len(test),
            "rows": rows,
            "samples": {"train": train_rate, "inference": infer_rate},
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
