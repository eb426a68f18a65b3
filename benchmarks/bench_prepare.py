"""How fast is `prepare` next to a bare pyarrow parse of the same Criteo file?

    python benchmarks/bench_prepare.py [--rows N] [--out results/bench/prepare.json]

Writes a Criteo Kaggle-format ``train.txt`` of N rows (default 1,000,000) with realistic
value distributions (per-feature missing rates, heavy-tailed counts with a few negatives,
Zipf-distributed 8-hex-digit categorical values over vocabularies scaled from the real
ones), then times, each in its own fresh process with the file in the page cache:

- ``bare``: ``pyarrow.csv.read_csv`` of the file (type inference, all cores), the floor;
- ``prepare``: ``criteo-kaggle`` (protocol ``dlrm``) from raw text to published arrays:
  parse, vocabulary, ids, split, writing and fingerprint.

Prints both, the ratio (target: prepare <= 3x bare) and each process's peak RSS, and
writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FULL_ROWS = 45_840_617
# Criteo Kaggle: distinct values per categorical feature and share of empty fields
from suite.datasets.synthetic import CRITEO_CARDINALITIES as CARDINALITIES  # noqa: E402

CAT_MISSING = [
    0,
    0,
    0.034,
    0.034,
    0,
    0.12,
    0,
    0,
    0,
    0,
    0,
    0.034,
    0,
    0,
    0,
    0.034,
    0,
    0,
    0.44,
    0.44,
    0.034,
    0.76,
    0,
    0.034,
    0.44,
    0.44,
]
INT_MISSING = [0.45, 0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0005, 0.04, 0.45, 0.04, 0.77, 0.22]
NAMES = ["label", *(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))]


def generate(path: Path, rows: int, seed: int = 0) -> None:
    """Write ``rows`` Criteo-format lines to ``path`` (tab-separated, no header)."""
    rng = np.random.default_rng(seed)
    columns: dict[str, pa.Array] = {"label": pa.array((rng.random(rows) < 0.256).astype(np.int64))}
    for j in range(13):
        counts = np.floor(np.exp(rng.normal(rng.uniform(0.5, 3.0), 1.6, rows))).astype(np.int64)
        if j == 1:  # I2 holds a few small negatives
            counts -= rng.integers(1, 4, rows) * (rng.random(rows) < 0.05)
        columns[f"I{j + 1}"] = pa.array(counts, mask=rng.random(rows) < INT_MISSING[j])
    for j, real in enumerate(CARDINALITIES):
        size = real if real < 10_000 else max(10_000, int(real * rows / FULL_ROWS * 2))
        vocab = np.frombuffer(
            rng.integers(0, 2**32, size, dtype=np.uint64).astype(">u4").tobytes().hex().encode(),
            "S8",
        )
        cdf = np.cumsum(1.0 / np.arange(1, size + 1) ** 1.05)
        ranks = np.minimum(np.searchsorted(cdf / cdf[-1], rng.random(rows)), size - 1)
        values = pa.array(vocab[ranks], type=pa.binary(8)).cast(pa.string())
        columns[f"C{j + 1}"] = pc_mask(values, rng.random(rows) < CAT_MISSING[j])
    table = pa.table(columns)
    options = pacsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    pacsv.write_csv(table, str(path), write_options=options)


def pc_mask(values: pa.Array, mask: np.ndarray) -> pa.Array:
    import pyarrow.compute as pc

    return pc.if_else(pa.array(mask), pa.scalar(None, pa.string()), values)


def run_bare(path: Path) -> dict[str, object]:
    start = time.perf_counter()
    table = pacsv.read_csv(
        str(path),
        read_options=pacsv.ReadOptions(column_names=NAMES),
        parse_options=pacsv.ParseOptions(delimiter="\t"),
    )
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "rows": table.num_rows, "peak_rss_mb": _peak_rss_mb()}


def run_prepare(path: Path, out: Path) -> dict[str, object]:
    from suite.datasets.criteo import CriteoKaggle, CriteoOptions

    start = time.perf_counter()
    data = CriteoKaggle().build(CriteoOptions(), "dlrm", path, out, progress=False)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "rows": data.manifest["rows"],
        "fingerprint": data.fingerprint,
        "ids": int(sum(data.schema.cardinalities)),
        "peak_rss_mb": _peak_rss_mb(),
    }


def _peak_rss_mb() -> float:
    """Peak resident memory of this process image (``VmHWM``: unlike ``ru_maxrss`` it does
    not inherit the parent's memory across fork and exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _child(kind: str, path: Path, out: Path) -> dict[str, object]:
    """Run one measurement in a fresh interpreter (own peak RSS, nothing warm but the file)."""
    command = [sys.executable, __file__, "--_child", kind, str(path), str(out)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the generated file")
    parser.add_argument(
        "--out", default=str(ROOT / "results" / "bench" / "prepare.json"), help="JSON result"
    )
    parser.add_argument(
        "--workdir", help="where to write the file and prepared arrays (default: a temp dir)"
    )
    parser.add_argument("--_child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        kind, path, out = args._child
        if kind == "generate":
            generate(Path(path), int(out))
            result: dict[str, object] = {"peak_rss_mb": _peak_rss_mb()}
        elif kind == "bare":
            result = run_bare(Path(path))
        else:
            result = run_prepare(Path(path), Path(out))
        print(json.dumps(result))
        return 0

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-prepare-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        raw = work / "train.txt"
        start = time.perf_counter()
        _child("generate", raw, Path(str(args.rows)))  # in a child: the parent stays small
        print(
            f"generated {args.rows:,} rows, {raw.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - start:.1f}s"
        )
        raw.read_bytes()  # into the page cache, for both contenders
        bare = _child("bare", raw, work / "prepared")
        prepared = _child("prepare", raw, work / "prepared")
        ratio = float(prepared["seconds"]) / float(bare["seconds"])
        size_mb = raw.stat().st_size / 1e6
        print(
            f"bare pyarrow.csv.read_csv: {bare['seconds']:.2f}s ({args.rows / float(bare['seconds']):,.0f} rows/s, "
            f"{size_mb / float(bare['seconds']):.0f} MB/s, peak RSS {bare['peak_rss_mb']} MB)"
        )
        print(
            f"prepare criteo-kaggle:     {prepared['seconds']:.2f}s ({args.rows / float(prepared['seconds']):,.0f} "
            f"rows/s, {size_mb / float(prepared['seconds']):.0f} MB/s, peak RSS {prepared['peak_rss_mb']} MB)"
        )
        print(f"ratio prepare / bare: {ratio:.2f} (target <= 3)")
        import pyarrow

        report = {
            "benchmark": "prepare",
            "rows": args.rows,
            "file_bytes": raw.stat().st_size,
            "bare_parse_s": round(float(bare["seconds"]), 3),
            "prepare_s": round(float(prepared["seconds"]), 3),
            "ratio": round(ratio, 3),
            "target_ratio": 3.0,
            "within_target": ratio <= 3.0,
            "bare_peak_rss_mb": bare["peak_rss_mb"],
            "prepare_peak_rss_mb": prepared["peak_rss_mb"],
            "prepared_rows": prepared["rows"],
            "prepared_ids": prepared["ids"],
            "fingerprint": prepared["fingerprint"],
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
                "pyarrow": pyarrow.__version__,
                "numpy": np.__version__,
                "load_average": os.getloadavg(),
            },
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {out}")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
