"""Peak memory of building a model, per process, against the bytes of its tables.

    python benchmarks/bench_shard_memory.py [--vocab-scale 0.05] [--dim 64] [--worlds 1,2]

Builds the suite's DLRM on criteo-synth (``vocab_scale`` 0.05: 1.7M table rows) with
``dim``-wide tables in one process (world 1) and sharded row-wise over ``world`` gloo
ranks on this machine. Each process imports TorchRec first, then records how far its
peak resident set grows while ``build_model`` runs (the ``memory`` task's
``peak_memory``) and the table bytes it ends up holding. A sharded rank should peak near its own shards, never near the whole
tables; one process near the tables once (not a second copy while they are filled).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import print_table, write_json  # noqa: E402


def bench_config(vocab_scale: float, dim: int):
    """criteo-synth with few rows but ``vocab_scale``-sized vocabularies, ``dim``-wide
    tables, row-wise sharding, SGD (no optimizer state)."""
    from suite.config import build_config

    return build_config(
        components={"model": "dlrm", "embedding": "full", "dataset": "criteo-synth"},
        values={"train.progress": False, "tracking.enabled": False, "train.threads": 1},
        overrides=[
            "dataset.options.train_rows=4000",
            "dataset.options.val_rows=1000",
            "dataset.options.test_rows=1000",
            f"dataset.options.vocab_scale={vocab_scale}",
            f"embedding.options.dim={dim}",
            "sharding.default=row_wise",
            "train.sparse_optimizer=sgd",
        ],
    )


def local_table_bytes(model) -> int:
    """Bytes of the embedding tables this process holds (its shards when sharded)."""
    if not hasattr(model, "table_shards"):
        return sum(w.nbytes for w in model.embedding.tables.weights())
    return sum(t.nbytes for pieces in model.table_shards().values() for *_, t in pieces)


def peak_while_building(rank: int, world: int, vocab_scale: float, dim: int, out: str) -> None:
    """In a process of a ``world``-rank gloo group (one process, unsharded, when
    ``world`` is 1): the growth of peak RSS while the model is built, and its table bytes,
    gathered by rank 0 into ``out`` (JSON, one entry per rank)."""
    import torch

    from suite.data.source import get_prepared
    from suite.engine.build import build_model
    from suite.engine.parallel import Parallel, gather_to_file
    from suite.engine.planning import quiet_torchrec
    from suite.tasks.memory import peak_memory

    with quiet_torchrec():  # import torchrec's modules first: their import is not the tables
        import torchrec.distributed.model_parallel
        import torchrec.distributed.planner  # noqa: F401

    config = bench_config(vocab_scale, dim)
    data = get_prepared(config.dataset, progress=False)
    built = []
    peak = peak_memory(
        lambda: built.append(
            build_model(config, data, Parallel(rank, world) if world > 1 else None)
        ),
        torch.device("cpu"),
    )
    figures = {
        "peak_growth": peak["extra"],
        "local_bytes": local_table_bytes(built[0]),
        "table_bytes": 4 * dim * sum(data.schema.cardinalities),
    }
    gather_to_file(rank, figures, out)


def measure(world: int, vocab_scale: float, dim: int) -> list[dict[str, int]]:
    """Each process's figures from :func:`peak_while_building` (fresh processes)."""
    from suite.engine.parallel import spawn_gloo

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        spawn_gloo(peak_while_building, world, vocab_scale, dim, str(out))
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-scale", type=float, default=0.05)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--worlds", default="1,2", help="process counts, 1 = unsharded")
    parser.add_argument("--out", default="shard_memory", help="JSON name under results/bench/")
    args = parser.parse_args(argv)
    if not Path("/proc/self/clear_refs").exists():
        print("needs Linux's /proc/self/clear_refs to reset the peak RSS; skipped")
        return 0
    from suite.data.source import get_prepared

    get_prepared(bench_config(args.vocab_scale, args.dim).dataset, progress=True)
    rows = []
    for world in (int(w) for w in args.worlds.split(",")):
        for rank, figures in enumerate(measure(world, args.vocab_scale, args.dim)):
            table, local, peak = (
                figures["table_bytes"],
                figures["local_bytes"],
                figures["peak_growth"],
            )
            rows.append(
                {
                    "world": world,
                    "rank": rank,
                    "table MiB": table / 2**20,
                    "held MiB": local / 2**20,
                    "peak growth MiB": peak / 2**20,
                    "peak / tables": peak / table,
                    "peak / held": peak / local,
                }
            )
    print(f"building DLRM, criteo-synth vocab_scale={args.vocab_scale}, dim {args.dim}")
    print_table(rows, list(rows[0]))
    path = write_json(
        args.out, {"vocab_scale": args.vocab_scale, "dim": args.dim, "processes": rows}
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
