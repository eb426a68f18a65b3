"""Write a Criteo Kaggle-format ``train.txt`` of any size, deterministically.

    python benchmarks/gen_criteo.py PATH [--rows 45840617] [--seed 0]

Tab-separated, no header: label, 13 integer counts, 26 categorical 8-hex-digit values,
with the real file's shape: per-feature missing rates, heavy-tailed counts (a few small
negatives in I2), Zipf-distributed categorical values over vocabularies scaled from the
real ones. Written in chunks of ``--chunk`` rows (bounded memory at any size, 45M rows
is ~11 GB on disk); the same ``--rows``, ``--seed`` and ``--chunk`` give the same bytes. The file is
benchmark input: write it to a local disk, never into the repository.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from suite.datasets.criteo import CRITEO_CARDINALITIES  # noqa: E402

FULL_ROWS = 45_840_617
CAT_MISSING = [0, 0, 0.034, 0.034, 0, 0.12, 0, 0, 0, 0, 0, 0.034, 0, 0, 0, 0.034, 0, 0, 0.44]
CAT_MISSING += [0.44, 0.034, 0.76, 0, 0.034, 0.44, 0.44]
INT_MISSING = [0.45, 0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0005, 0.04, 0.45, 0.04, 0.77, 0.22]
NAMES = ["label", *(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))]


class Vocabularies:
    """Each categorical feature's values (``S8`` hex) and Zipf CDF, sized for ``rows``."""

    def __init__(self, rows: int, seed: int) -> None:
        rng = np.random.default_rng([seed, 0])
        self.values, self.cdfs = [], []
        for real in CRITEO_CARDINALITIES:
            size = real if real < 10_000 else max(10_000, int(real * rows / FULL_ROWS * 2))
            raw = rng.integers(0, 2**32, size, dtype=np.uint64).astype(">u4").tobytes()
            self.values.append(np.frombuffer(raw.hex().encode(), "S8"))
            cdf = np.cumsum(1.0 / np.arange(1, size + 1) ** 1.05)
            self.cdfs.append(cdf / cdf[-1])


def chunk_table(vocab: Vocabularies, rows: int, seed: int, index: int) -> pa.Table:
    """Rows of chunk ``index`` (its own seeded stream: chunks do not depend on each other)."""
    rng = np.random.default_rng([seed, 1, index])
    columns: dict[str, pa.Array] = {"label": pa.array((rng.random(rows) < 0.256).astype(np.int64))}
    for j in range(13):
        mu = np.random.default_rng([seed, 2, j]).uniform(0.5, 3.0)  # per feature, all chunks
        counts = np.floor(np.exp(rng.normal(mu, 1.6, rows))).astype(np.int64)
        if j == 1:
            counts -= rng.integers(1, 4, rows) * (rng.random(rows) < 0.05)
        columns[f"I{j + 1}"] = pa.array(counts, mask=rng.random(rows) < INT_MISSING[j])
    for j, (values, cdf) in enumerate(zip(vocab.values, vocab.cdfs, strict=True)):
        ranks = np.minimum(np.searchsorted(cdf, rng.random(rows)), len(values) - 1)
        strings = pa.array(values[ranks], type=pa.binary(8)).cast(pa.string())
        missing = pa.array(rng.random(rows) < CAT_MISSING[j])
        columns[f"C{j + 1}"] = pc.if_else(missing, pa.scalar(None, pa.string()), strings)
    return pa.table(columns)


def generate(path: Path, rows: int, seed: int = 0, chunk: int = 1_000_000, progress=None) -> None:
    """Write ``rows`` lines to ``path`` atomically (a temp file renamed at the end)."""
    vocab = Vocabularies(rows, seed)
    options = pacsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    tmp = path.with_name(f".{path.name}.partial")
    with pa.OSFile(str(tmp), "wb") as sink:
        for index, start in enumerate(range(0, rows, chunk)):
            table = chunk_table(vocab, min(chunk, rows - start), seed, index)
            pacsv.write_csv(table, sink, write_options=options)
            if progress:
                progress(min(start + chunk, rows))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path, help="file to write (e.g. /data/criteo/train.txt)")
    parser.add_argument("--rows", type=int, default=FULL_ROWS, help="rows (Kaggle: 45840617)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=1_000_000, help="rows per written chunk")
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error(f"--rows: expected a positive count, got {args.rows}")
    args.path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    def progress(done: int) -> None:
        if sys.stderr.isatty():
            rate = done / (time.perf_counter() - start)
            eta = (args.rows - done) / rate
            print(
                f"\r{done:,}/{args.rows:,} rows, {rate:,.0f} rows/s, ETA {eta:.0f}s",
                end="",
                file=sys.stderr,
            )

    generate(args.path, args.rows, args.seed, args.chunk, progress)
    size = args.path.stat().st_size
    print(
        f"\nwrote {args.path}: {args.rows:,} rows, {size / 1e9:.2f} GB in {time.perf_counter() - start:.0f}s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
