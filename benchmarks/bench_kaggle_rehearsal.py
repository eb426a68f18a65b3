"""The ``full`` profile's DLRM job rehearsed on CPU at Kaggle size (issue 70, item 2).

    python benchmarks/bench_kaggle_rehearsal.py [--rows 45840617] [--raw PATH]
        [--workdir DIR] [--steps 200] [--batch-size N] [--threads N] [--out PATH]

A Criteo Kaggle-format file of ``--rows`` rows made by ``benchmarks/gen_criteo.py`` (at
``--raw PATH``, written there once and reused; else in the work directory) goes through
the ``criteo-kaggle`` loader with the ``dlrm`` protocol (days 1-6 train, day 7's halves
test and validation), then the job of ``suite/reproductions/dlrm.yaml``'s ``full``
profile (DLRM 13-512-256-64-16 / 512-256-1, ``full`` tables at dim 16, SGD 0.1, batch
128) runs on the CPU: ``--steps`` training steps by the suite's loop (which validates on
the whole validation half-day at the end, as every run does), then an evaluation on the
whole test half-day. Prepare and train+evaluate each run in a fresh process, so each
has its own peak RSS.

Recorded: prepare seconds and peak RSS; training samples/s; validation and test
evaluation seconds; resident memory after building the model, after training and after
the test evaluation (``VmRSS``, split into ``RssAnon``, memory the process owns, and
``RssFile``, pages of the memory-mapped prepared arrays, which the kernel can drop)
against the tables', optimizer's and dense parameters' bytes and the prepared arrays'
bytes. Below Kaggle's row count, the full run's prepare time, epoch time, evaluation
time and disk are extrapolated linearly in rows. Prints a table and writes JSON
(default ``results/bench/kaggle-rehearsal-<rows>.json``). The full size writes ~11 GB
of text and ~7 GB of arrays: point ``--raw`` and ``--workdir`` at a local disk.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402
from gen_criteo import FULL_ROWS, generate  # noqa: E402

DIM = 16
MIB = 2**20


def job(raw: Path, cache: Path, steps: int, batch: int | None, threads: int | None) -> dict:
    """The ``full`` profile's DLRM job on ``raw`` as dotted overrides, on the CPU."""
    from suite.gpu_check.kaggle import full_job

    values = {
        **full_job(),
        "device": "cpu",
        "dataset.raw": str(raw),
        "dataset.cache_dir": str(cache),
        "train.max_steps": steps,
        "train.progress": False,
        "tracking.enabled": False,
    }
    if batch:
        values["train.batch_size"] = batch
    if threads:
        values["train.threads"] = threads
    return values


def memory_now() -> dict[str, float]:
    """This process's ``VmRSS``, ``RssAnon``, ``RssFile`` and ``VmHWM`` (peak) in MiB."""
    wanted = {"VmRSS", "RssAnon", "RssFile", "VmHWM"}
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in wanted:
            out[f"{key}_mib"] = round(int(value.split()[0]) / 1024, 1)
    return out


def child_prepare(values: dict[str, Any]) -> dict[str, Any]:
    from suite.api import resolve
    from suite.data.source import get_prepared

    spec = resolve(None, values).dataset
    start = time.perf_counter()
    data = get_prepared(spec, progress=False)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "rows": {split: len(data.split(split)) for split in ("train", "val", "test")},
        "embedding_rows": int(sum(data.schema.cardinalities)),
        "arrays_bytes": _arrays_bytes(data),
        "memory": memory_now(),
    }


def _arrays_bytes(data: Any) -> dict[str, int]:
    out = {}
    for name in ("train", "val", "test"):
        split = data.split(name)
        out[name] = int(split.dense.nbytes + split.sparse.nbytes + split.label.nbytes)
    return out


def child_train(values: dict[str, Any]) -> dict[str, Any]:
    import torch

    from suite.api import resolve
    from suite.data.source import get_prepared
    from suite.engine.build import build_model
    from suite.engine.train import evaluate, train

    config = resolve(None, values)
    data = get_prepared(config.dataset, progress=False)
    cpu = torch.device("cpu")
    start = time.perf_counter()
    model = build_model(config, data)
    build_s = time.perf_counter() - start
    memory = {"built": memory_now()}
    start = time.perf_counter()
    outcome = train(model, data, config.train, config.seed, cpu)
    train_wall = time.perf_counter() - start
    memory["trained"] = memory_now()
    test = data.split("test")
    start = time.perf_counter()
    metrics = evaluate(model, test, config.train.eval_batch_size, cpu)
    test_s = time.perf_counter() - start
    memory["evaluated"] = memory_now()
    tables = model.embedding.memory()
    dense = sum(p.nbytes for p in model.dense_parameters())
    return {
        "build_seconds": build_s,
        "steps": outcome.steps,
        "batch_size": config.train.batch_size,
        "threads": torch.get_num_threads(),
        "train_seconds": outcome.seconds,
        "train_samples_per_s": outcome.samples_per_second,
        "validation_seconds": train_wall - outcome.seconds,  # the end-of-training validation
        "validation_rows": len(data.split("val")),
        "test_seconds": test_s,
        "test_rows": len(test),
        "test_auc": metrics["auc"],
        "test_logloss": metrics["logloss"],
        "table_bytes": tables.parameters,
        "optimizer_bytes": tables.optimizer,
        "dense_parameter_bytes": dense,
        "arrays_bytes": _arrays_bytes(data),
        "memory": memory,
    }


CHILDREN = {"prepare": child_prepare, "train": child_train}


def _child(kind: str, values: dict[str, Any]) -> dict[str, Any]:
    """Run one phase in a fresh interpreter (its own peak RSS)."""
    command = [sys.executable, __file__, "--_child", kind, json.dumps(values)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def extrapolate(rows: int, file_bytes: int, prepared: dict, trained: dict) -> dict[str, Any]:
    """The full Kaggle run's figures from this one's, linear in rows (the rate per row of
    prepare, evaluation and disk stays; a whole epoch at the measured samples/s)."""
    from suite.datasets.criteo import CRITEO_CARDINALITIES

    scale = FULL_ROWS / rows
    train_rows = prepared["rows"]["train"] * scale
    test_rows = trained["test_rows"] * scale

    return {
        "rows": FULL_ROWS,
        "prepare_seconds": prepared["seconds"] * scale,
        "epoch_seconds": train_rows / trained["train_samples_per_s"],
        "test_seconds": trained["test_seconds"] / trained["test_rows"] * test_rows,
        "validation_seconds": trained["validation_seconds"]
        / trained["validation_rows"]
        * test_rows,  # fmt: skip
        "file_bytes": file_bytes * scale,
        "arrays_bytes": sum(prepared["arrays_bytes"].values()) * scale,
        "kaggle_table_bytes": sum(CRITEO_CARDINALITIES) * DIM * 4,
    }


def rehearse(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    raw = args.raw or work / "train.txt"
    generated_s = None
    if not raw.is_file():
        raw.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        generate(raw, args.rows)
        generated_s = time.perf_counter() - start
    values = job(raw, work / "prepared", args.steps, args.batch_size, args.threads)
    prepared = _child("prepare", values)
    trained = _child("train", values)
    rows = sum(prepared["rows"].values())
    file_bytes = raw.stat().st_size
    report: dict[str, Any] = {
        "rows": rows,
        "file_bytes": file_bytes,
        "generate_seconds": generated_s,
        "job": values,
        "prepare": prepared,
        "train": trained,
    }
    if rows < FULL_ROWS:
        report["extrapolated_to_kaggle"] = extrapolate(rows, file_bytes, prepared, trained)
    return report


def table_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    prepared, trained = report["prepare"], report["train"]
    resident = (
        trained["table_bytes"] + trained["optimizer_bytes"] + trained["dense_parameter_bytes"]
    )
    rows = [
        {"figure": "prepare s", "value": prepared["seconds"]},
        {"figure": "prepare peak RSS MiB", "value": prepared["memory"]["VmHWM_mib"]},
        {"figure": "train samples/s", "value": trained["train_samples_per_s"]},
        {"figure": f"validation s ({trained['validation_rows']:,} rows)",
         "value": trained["validation_seconds"]},
        {"figure": f"test evaluation s ({trained['test_rows']:,} rows)",
         "value": trained["test_seconds"]},
        {"figure": "tables + optimizer + dense MiB", "value": resident / MIB},
        {"figure": "prepared arrays MiB", "value": sum(trained["arrays_bytes"].values()) / MIB},
    ]  # fmt: skip
    for point, memory in trained["memory"].items():
        rows.append(
            {
                "figure": f"RSS {point} MiB (anon / file / peak)",
                "value": f"{memory['VmRSS_mib']:,.0f} ({memory['RssAnon_mib']:,.0f} / "
                f"{memory['RssFile_mib']:,.0f} / {memory['VmHWM_mib']:,.0f})",
            }
        )
    full = report.get("extrapolated_to_kaggle")
    if full:
        rows += [
            {"figure": "Kaggle size: prepare s (est.)", "value": full["prepare_seconds"]},
            {"figure": "Kaggle size: one epoch s (est.)", "value": full["epoch_seconds"]},
            {"figure": "Kaggle size: test evaluation s (est.)", "value": full["test_seconds"]},
            {"figure": "Kaggle size: file GB (est.)", "value": full["file_bytes"] / 1e9},
            {"figure": "Kaggle size: arrays GB (est.)", "value": full["arrays_bytes"] / 1e9},
            {"figure": "Kaggle size: tables GiB", "value": full["kaggle_table_bytes"] / 2**30},
        ]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=FULL_ROWS, help="rows (Kaggle: 45840617)")
    parser.add_argument("--raw", type=Path, help="the generated file (written once if missing)")
    parser.add_argument("--workdir", type=Path, help="prepared arrays (default: a temp dir)")
    parser.add_argument("--steps", type=int, default=200, help="training steps")
    parser.add_argument("--batch-size", type=int, help="default: the profile's (128)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--out", type=Path, help="JSON (default results/bench/...)")
    parser.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        kind, values = args._child
        print(json.dumps(CHILDREN[kind](json.loads(values))))
        return 0
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        report = rehearse(args, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="kaggle-rehearsal-") as work:
            report = rehearse(args, Path(work))
    print(f"full DLRM job on a {report['rows']:,}-row gen_criteo file (criteo-kaggle, dlrm):")
    print_table(table_rows(report), ["figure", "value"])
    name = f"kaggle-rehearsal-{report['rows']}"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        path = args.out
    else:
        path = write_json(name, report)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
