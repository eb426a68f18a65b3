"""Training throughput: every backbone x embedding method, the loader alone, and the suite's
DLRM against a plain-PyTorch DLRM written the straightforward way.

    python benchmarks/bench_throughput.py [--quick] [--threads N]

Prints tables and writes ``results/bench/throughput[-quick]-t<threads>.json``.

The plain baseline (below, :class:`PlainDLRM`) is what one writes from the DLRM paper
without the suite: one ``nn.EmbeddingBag(sparse=True)`` per feature, a
``torch.utils.data.DataLoader`` over a ``TensorDataset`` with ``shuffle=True``, Adam on
the MLPs and sparse Adagrad on the tables. Both sides train on the same prepared
arrays, with the same layer sizes, embedding dim, batch size, thread count and timing
window (warm-up steps, then a timed window of steps, loader included on both sides).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path

# isort: off
import suite  # noqa: F401  first: sets OMP_WAIT_POLICY before torch loads libgomp

# isort: on
import numpy as np
import torch
from torch import nn

from suite.config import RunConfig, build_config
from suite.data.loader import BatchLoader
from suite.data.prepared import PreparedDataset
from suite.data.source import get_prepared
from suite.engine.build import build_model, seed_everything
from suite.engine.train import make_dense_optimizer
from suite.environment import environment
from suite.registry import EMBEDDINGS, MODELS
from suite.tasks.throughput import Window, measure_loader, measure_training, timed_window

RESULTS = Path("results/bench")


# --------------------------------------------------------------------------- plain DLRM
class PlainDLRM(nn.Module):
    """DLRM the straightforward way: per-table EmbeddingBag, bottom MLP, dot, top MLP."""

    def __init__(
        self, cardinalities: list[int], num_dense: int, dim: int, bottom: list[int], top: list[int]
    ) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(
            nn.EmbeddingBag(n, dim, mode="sum", sparse=True) for n in cardinalities
        )
        for emb, n in zip(self.embeddings, cardinalities, strict=True):
            nn.init.uniform_(emb.weight, -((1 / n) ** 0.5), (1 / n) ** 0.5)
        self.bottom = self._mlp([num_dense, *bottom, dim], final_relu=True)
        vectors = len(cardinalities) + 1
        rows, cols = torch.tril_indices(vectors, vectors, offset=-1)
        self.rows, self.cols = rows, cols
        self.top = self._mlp([len(rows) + dim, *top, 1], final_relu=False)

    @staticmethod
    def _mlp(sizes: list[int], final_relu: bool) -> nn.Sequential:
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if final_relu or i < len(sizes) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        embedded = [emb(sparse[:, i : i + 1]) for i, emb in enumerate(self.embeddings)]
        stacked = torch.stack([x, *embedded], dim=1)
        gram = torch.bmm(stacked, stacked.transpose(1, 2))
        features = torch.cat([x, gram[:, self.rows, self.cols]], dim=1)
        return self.top(features).squeeze(1)


def measure_plain(
    config: RunConfig, data: PreparedDataset, batch_size: int, warmup: int, steps: int
) -> Window:
    """Samples/s of the plain DLRM's training loop over a DataLoader(TensorDataset)."""
    seed_everything(config.seed)
    loader = plain_dataloader(data, batch_size)
    options = config.model.typed_options()
    model = PlainDLRM(
        data.schema.cardinalities,
        data.schema.num_dense,
        config.embedding.options["dim"],
        list(options.bottom_mlp),
        list(options.top_mlp),
    )
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("embeddings")]
    dense_opt = torch.optim.Adam(dense_params, lr=config.train.dense_lr)
    sparse_opt = torch.optim.Adagrad(model.embeddings.parameters(), lr=config.train.sparse_lr)
    loss_fn = nn.BCEWithLogitsLoss()

    stream = endless(loader)

    def step() -> int:
        dense, sparse, label = next(stream)
        dense_opt.zero_grad()
        sparse_opt.zero_grad()
        loss = loss_fn(model(dense, sparse), label)
        loss.backward()
        dense_opt.step()
        sparse_opt.step()
        return len(label)

    return timed_window(step, torch.device("cpu"), warmup, steps)


def plain_dataloader(data: PreparedDataset, batch_size: int) -> torch.utils.data.DataLoader:
    """``DataLoader(TensorDataset(...), shuffle=True)`` over the train split, as usual."""
    split = data.split("train")
    dataset = torch.utils.data.TensorDataset(
        torch.from_numpy(np.array(split.dense, dtype=np.float32)),
        torch.from_numpy(np.array(split.sparse, dtype=np.int64)),
        torch.from_numpy(np.array(split.label, dtype=np.float32)),
    )
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True)


def endless(loader: Iterable) -> Iterator:
    while True:
        yield from loader


def plain_loader_rate(data: PreparedDataset, batch_size: int, warmup: int, steps: int) -> float:
    stream = endless(plain_dataloader(data, batch_size))
    window = timed_window(lambda: len(next(stream)[2]), torch.device("cpu"), warmup, steps)
    return window.samples_per_second


# --------------------------------------------------------------------------- the suite
def suite_config(
    base: dict, model: str = "dlrm", embedding: str = "full", sets: list[str] | None = None
) -> RunConfig:
    return build_config(
        components={"model": model, "embedding": embedding, "dataset": "criteo-synth"},
        values={"train.progress": False, "tracking.enabled": False},
        overrides=[f"dataset.options.{k}={v}" for k, v in base.items()] + (sets or []),
    )


def measure_suite(
    config: RunConfig, data: PreparedDataset, batch_size: int, warmup: int, steps: int
) -> Window:
    """Samples/s of the suite's real training loop (BatchLoader + train_step)."""
    model = build_model(config, data)
    dense_opt = make_dense_optimizer(model.dense_parameters(), config.train)
    loader = BatchLoader(data.split("train"), batch_size, shuffle=True, seed=config.seed)
    window, _ = measure_training(model, loader, dense_opt, torch.device("cpu"), warmup, steps, None)
    return window


def best(windows: list[Window]) -> dict[str, float]:
    """The best wall-clock and CPU-time rates among windows (the least disturbed ones)."""
    return {
        "wall": max(w.samples_per_second for w in windows),
        "cpu": max(w.samples_per_cpu_second for w in windows),
    }


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\n{title}")
    print("  " + "  ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  " + "  ".join(f"{c:>{w}}" for c, w in zip(row, widths, strict=True)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller data, fewer steps")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch CPU threads")
    parser.add_argument("--out", default=str(RESULTS), help="directory of the JSON result")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved windows per side")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    data_options = {"train_rows": 200_000, "val_rows": 10_000, "test_rows": 10_000}
    if args.quick:
        data_options = {"train_rows": 50_000, "val_rows": 2_000, "test_rows": 2_000}
    warmup, steps = (2, 6) if args.quick else (5, 30)
    args.repeats = args.repeats or (2 if args.quick else 3)
    matrix_steps = (1, 3) if args.quick else (3, 10)
    load_start = os.getloadavg()
    base = suite_config(data_options)
    data = get_prepared(base.dataset, progress=False)
    cards = data.schema.cardinalities
    env = environment("cpu")
    print(
        f"criteo-synth: {len(data.split('train'))} train rows, {len(cards)} tables, "
        f"{sum(cards)} rows in all; threads {torch.get_num_threads()}; torch {env['torch']}; "
        f"load average {load_start[0]:.1f} on {os.cpu_count()} CPUs"
    )
    report: dict = {
        "environment": env,
        "threads": torch.get_num_threads(),
        "data": {"options": data_options, "fingerprint": data.fingerprint, "cardinalities": cards},
        "window": {"warmup_steps": warmup, "measure_steps": steps, "repeats": args.repeats},
    }

    # 1. the loader alone
    loader_rows = []
    report["loader"] = {}
    for size in (128, 2048):
        loader = BatchLoader(data.split("train"), size, shuffle=True, seed=0)
        window = measure_loader(loader, warmup, steps * 4, None)
        plain = plain_loader_rate(data, size, warmup, steps * 4)
        report["loader"][str(size)] = {
            "suite_batchloader": window.samples_per_second,
            "plain_dataloader": plain,
        }
        loader_rows.append([str(size), f"{window.samples_per_second:,.0f}", f"{plain:,.0f}"])
    table(
        "Loaders alone (samples/s)",
        ["batch", "suite BatchLoader", "DataLoader(TensorDataset)"],
        loader_rows,
    )

    # 2. suite DLRM vs plain PyTorch DLRM, interleaved; best window of each side is kept
    #    (on a shared machine, the least disturbed window is the closest to the truth)
    compare_rows = []
    report["comparison"] = []
    variants = {
        "suite (fbgemm, rowwise adagrad)": [],
        "suite (fbgemm, adagrad)": ["train.sparse_optimizer=adagrad"],
        "suite (torch backend, adagrad)": [
            "train.sparse_optimizer=adagrad",
            "embedding.options.backend=torch",
        ],
    }
    for size in (2048, 128):
        size_steps = steps if size >= 1024 else steps * 4
        plain_runs: list[Window] = []
        ours_runs: dict[str, list[Window]] = {name: [] for name in variants}
        for _ in range(args.repeats):
            plain_runs.append(measure_plain(base, data, size, warmup, size_steps))
            for name, sets in variants.items():
                config = suite_config(data_options, sets=sets)
                ours_runs[name].append(measure_suite(config, data, size, warmup, size_steps))
        plain = best(plain_runs)
        for name in variants:
            ours = best(ours_runs[name])
            entry = {
                "batch": size,
                "variant": name,
                "suite_samples_per_s": ours["wall"],
                "plain_samples_per_s": plain["wall"],
                "ratio": ours["wall"] / plain["wall"],
                "suite_samples_per_cpu_s": ours["cpu"],
                "plain_samples_per_cpu_s": plain["cpu"],
                "ratio_cpu": ours["cpu"] / plain["cpu"],
                "suite_runs": [asdict(w) for w in ours_runs[name]],
                "plain_runs": [asdict(w) for w in plain_runs],
            }
            report["comparison"].append(entry)
            compare_rows.append(
                [
                    str(size),
                    name,
                    f"{ours['wall']:,.0f}",
                    f"{plain['wall']:,.0f}",
                    f"{entry['ratio']:.2f}x",
                    f"{ours['cpu']:,.0f}",
                    f"{plain['cpu']:,.0f}",
                    f"{entry['ratio_cpu']:.2f}x",
                ]
            )
    table(
        f"DLRM training: suite vs plain PyTorch (best of {args.repeats} interleaved windows; "
        "wall samples/s, and samples per CPU-second of this process)",
        [
            "batch",
            "suite variant",
            "suite",
            "plain",
            "ratio",
            "suite/cpu-s",
            "plain/cpu-s",
            "ratio",
        ],
        compare_rows,
    )

    # 3. every backbone x embedding method
    size = 2048
    matrix_rows = []
    report["matrix"] = {"batch": size, "results": []}
    for model in MODELS.names():
        for embedding in EMBEDDINGS.names():
            entry = {"model": model, "embedding": embedding}
            try:
                config = suite_config(data_options, model, embedding)
                window = measure_suite(config, data, size, *matrix_steps)
                entry["samples_per_s"] = window.samples_per_second
                entry["samples_per_cpu_s"] = window.samples_per_cpu_second
                cell = f"{window.samples_per_second:,.0f}"
                cpu_cell = f"{window.samples_per_cpu_second:,.0f}"
            except Exception as exc:  # report and go on
                entry["error"] = f"{type(exc).__name__}: {exc}"
                cell = cpu_cell = "error"
                traceback.print_exc(file=sys.stderr)
            report["matrix"]["results"].append(entry)
            matrix_rows.append([model, embedding, cell, cpu_cell])
    table(
        f"Training samples/s, batch {size}, every backbone x embedding",
        ["model", "embedding", "samples/s", "samples/cpu-s"],
        matrix_rows,
    )

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "throughput-quick" if args.quick else "throughput"
    path = out / f"{name}-t{torch.get_num_threads()}.json"
    report["created"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    report["load_average"] = {"start": load_start, "end": os.getloadavg()}
    path.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
