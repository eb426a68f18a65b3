"""The payload codecs on a real all-to-all: bytes on the wire, ratio, codec and exchange time.

    python benchmarks/bench_comm.py [--world 2] [--batch B] [--steps 10] [--train-steps 200]
                                    [--bound 0.01]

The payload is what a table-wise sharded DLRM sends each step: every rank looks up its
tables (table ``t`` on rank ``t % W``) for the global batch and sends each rank its slice,
``[W * B, F / W, D]`` per rank. The values are the pooled embeddings of the suite's default
model on criteo-synth after ``--train-steps`` training steps, on the train split's batches.
``W`` gloo processes on this machine exchange them with ``all_to_all_single``
(``suite.engine.comm_codec.all_to_all_pooled``) as float32, fp16, bf16 and the lossy
codec's codes (``--bound`` of each table's value range), the codecs interleaved step by
step. Per codec: bytes each rank sends to the others per step, the ratio to float32, codec
(encode + decode) and all-to-all milliseconds per step (median over steps, slowest rank;
the ranks meet after encoding, so the all-to-all time is the transfer's),
their sum against float32's, and the largest received error as a fraction of its bound.
Loopback gloo moves bytes at memory speed, so the time columns show the codec's cost, not
the network time it saves. Writes ``results/bench/comm.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import torch
from _common import print_table, write_json

from suite.config import build_config
from suite.data.loader import BatchLoader
from suite.data.source import get_prepared
from suite.engine.build import build_model
from suite.engine.comm_codec import all_to_all_pooled, table_bounds
from suite.engine.parallel import gather_to_file, spawn_gloo
from suite.engine.train import make_dense_optimizer, train_step

CODECS = ("none", "fp16", "bf16", "lossy")


def pooled_payloads(world: int, batch: int, steps: int, train_steps: int) -> np.ndarray:
    """Every rank's payload of every step: ``[steps, W, W * B, F // W, D]`` float32."""
    config = build_config(values={"train.progress": False, "train.threads": 1})
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    dense_opt = make_dense_optimizer(model.dense_parameters(), config.train)
    loader = iter(BatchLoader(data.split("train"), config.train.batch_size, shuffle=True))
    for step in range(1, train_steps + 1):
        train_step(model, next(loader), dense_opt, step)
    model.eval()
    global_batch = BatchLoader(
        data.split("train"), world * batch, shuffle=True, seed=1, drop_last=True
    )
    out = []
    with torch.no_grad():
        for _, sample in zip(range(steps), global_batch, strict=False):
            pooled = model.embedding(sample.sparse).float().numpy()  # [W * B, F, D]
            per_rank = pooled.shape[1] // world
            out.append([pooled[:, r::world][:, :per_rank] for r in range(world)])
    return np.asarray(out, dtype=np.float32)


def _exchange(rank: int, world: int, path: str, bound: float, out_path: str) -> None:
    import torch.distributed as dist

    payloads = np.load(path, mmap_mode="r")
    b = payloads.shape[2] // world
    figures: dict[str, dict[str, list[float]]] = {
        c: {"raw": [], "wire": [], "codec_ms": [], "comm_ms": [], "error_over_bound": []}
        for c in CODECS
    }
    for step in range(payloads.shape[0]):
        for codec in CODECS:
            dist.barrier()
            sent = torch.from_numpy(np.array(payloads[step, rank]))
            received, stats = all_to_all_pooled(sent, codec, relative_bound=bound, sync=True)
            if step == 0:
                continue  # warm-up
            worst = 0.0
            if codec == "lossy":
                for src in range(world):
                    source = np.asarray(payloads[step, src], dtype=np.float64)
                    bounds = table_bounds(source, bound)[None, :, None]
                    error = np.abs(received[src].numpy() - source[rank * b : (rank + 1) * b])
                    worst = max(worst, float((error / bounds).max()))
            f = figures[codec]
            f["raw"].append(stats.raw_bytes)
            f["wire"].append(stats.wire_bytes)
            f["codec_ms"].append(stats.codec_seconds * 1e3)
            f["comm_ms"].append(stats.comm_seconds * 1e3)
            f["error_over_bound"].append(worst)
    gather_to_file(rank, figures, out_path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2, help="gloo processes")
    parser.add_argument("--batch", type=int, default=2048, help="samples per rank")
    parser.add_argument("--steps", type=int, default=10, help="exchanges per codec (+1 warm-up)")
    parser.add_argument("--train-steps", type=int, default=200, help="training before payloads")
    parser.add_argument("--bound", type=float, default=0.01, help="lossy: of each table's range")
    args = parser.parse_args()
    torch.set_num_threads(1)
    payloads = pooled_payloads(args.world, args.batch, args.steps + 1, args.train_steps)
    _, _, rows, tables, dim = payloads.shape
    with tempfile.TemporaryDirectory(prefix="bench-comm-") as tmp:
        path = str(Path(tmp) / "payloads.npy")
        np.save(path, payloads)
        out = str(Path(tmp) / "figures.json")
        spawn_gloo(_exchange, args.world, path, args.bound, out)
        ranks = json.loads(Path(out).read_text())
    rows_out = []
    total_fp32 = None
    for codec in CODECS:
        per_rank = [r[codec] for r in ranks]
        raw = statistics.mean(statistics.mean(r["raw"]) for r in per_rank)
        wire = statistics.mean(statistics.mean(r["wire"]) for r in per_rank)
        codec_ms = max(statistics.median(r["codec_ms"]) for r in per_rank)
        comm_ms = max(statistics.median(r["comm_ms"]) for r in per_rank)
        total = codec_ms + comm_ms
        total_fp32 = total_fp32 or total
        rows_out.append(
            {
                "codec": {"none": "float32"}.get(codec, codec),
                "KB sent/step": wire / 1e3,
                "ratio": raw / wire,
                "bits/value": 8 * wire / (raw / 4),
                "codec ms": codec_ms,
                "all-to-all ms": comm_ms,
                "total / float32": total / total_fp32,
                "max error / bound": max(max(r["error_over_bound"]) for r in per_rank)
                if codec == "lossy"
                else None,
            }
        )
    print(
        f"{args.world} gloo ranks, {args.batch} samples per rank, {tables} tables of dim {dim} "
        f"per rank (payload [{rows}, {tables}, {dim}]), lossy bound {args.bound} of each "
        f"table's range, median of {args.steps} steps"
    )
    columns = list(rows_out[0])
    print_table(rows_out, columns)
    path = write_json(
        "comm",
        {
            "args": vars(args),
            "payload_shape_per_rank": [rows, tables, dim],
            "rows": rows_out,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
