"""How fast is `prepare` next to a bare pyarrow parse of the same Criteo file?

    python benchmarks/bench_prepare.py [--rows N] [--raw PATH] [--profile]
                                       [--out results/bench/prepare.json]

Writes a Criteo Kaggle-format ``train.txt`` of N rows (default 1,000,000) with
``benchmarks/gen_criteo.py`` (or takes an existing one with ``--raw``; the Kaggle size is
``--rows 45840617``, ~11 GB: generate it once on a local disk and pass it with ``--raw``),
then times, each in its own fresh process with the file in the page cache:

- ``bare``: ``pyarrow.csv``'s streaming reader over the file at pyarrow's default 1 MB
  block (all cores, bounded memory), the floor. That is the fastest bare parse measured
  here: 16 MB blocks halve its rate (313k against 636-734k rows/s on 10M rows), and a
  whole-file ``read_csv`` is no faster and needs ~5x the file in RAM;
- ``prepare``: ``criteo-kaggle`` (protocol ``dlrm``) from raw text to published arrays:
  parse, vocabulary, ids, split, writing and fingerprint.

Prints both as rows/s of work, the ratio (target: prepare <= 3x bare) and each process's
peak RSS, and writes them as JSON. ``--profile`` runs the prepare process once more under
``cProfile`` (after the timed run, so the timing is clean) and prints where its time goes.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_criteo import NAMES, generate  # noqa: E402

BARE_BLOCK_BYTES = 1 << 20
"""pyarrow's default block: its fastest here (larger blocks parse with less parallelism)."""


def run_bare(path: Path) -> dict[str, object]:
    """``pyarrow.csv``'s streaming reader over the whole file, batch by batch."""
    read = pacsv.ReadOptions(column_names=NAMES, block_size=BARE_BLOCK_BYTES)
    parse = pacsv.ParseOptions(delimiter="\t")
    # categorical values stay strings (an all-digit hex value must not make a column int)
    convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in NAMES if n[0] == "C"})
    start = time.perf_counter()
    rows = sum(len(b) for b in pacsv.open_csv(str(path), read, parse, convert))
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "rows": rows, "mode": "open_csv", "peak_rss_mb": _peak_rss_mb()}


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


def run_profile(path: Path, out: Path, top: int = 30) -> dict[str, object]:
    """Prepare under cProfile: the functions with the most cumulative and own time."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    run_prepare(path, out)
    profiler.disable()
    lines = {}
    for key in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(top)
        lines[key] = text.getvalue()
    return {"profile": lines}


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
    parser.add_argument("--raw", help="an existing Criteo-format file to use (not generated)")
    parser.add_argument("--profile", action="store_true", help="also profile prepare")
    parser.add_argument("--_child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        kind, path, out = args._child
        if kind == "generate":
            generate(Path(path), int(out))
            result: dict[str, object] = {"peak_rss_mb": _peak_rss_mb()}
        elif kind == "bare":
            result = run_bare(Path(path))
        elif kind == "profile":
            result = run_profile(Path(path), Path(out))
        else:
            result = run_prepare(Path(path), Path(out))
        print(json.dumps(result))
        return 0

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-prepare-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        raw = Path(args.raw) if args.raw else work / "train.txt"
        if not args.raw:
            start = time.perf_counter()
            _child("generate", raw, Path(str(args.rows)))  # in a child: the parent stays small
            print(
                f"generated {args.rows:,} rows, {raw.stat().st_size / 1e6:.0f} MB in "
                f"{time.perf_counter() - start:.1f}s"
            )
        with raw.open("rb") as handle:  # into the page cache, for both contenders
            while handle.read(64 << 20):
                pass
        bare = _child("bare", raw, work / "prepared")
        prepared = _child("prepare", raw, work / "prepared")
        rows = int(bare["rows"])
        ratio = float(prepared["seconds"]) / float(bare["seconds"])
        size_mb = raw.stat().st_size / 1e6
        print(
            f"bare pyarrow.csv.{bare['mode']}: {bare['seconds']:.2f}s ({rows / float(bare['seconds']):,.0f} rows/s, "
            f"{size_mb / float(bare['seconds']):.0f} MB/s, peak RSS {bare['peak_rss_mb']} MB)"
        )
        print(
            f"prepare criteo-kaggle:     {prepared['seconds']:.2f}s ({rows / float(prepared['seconds']):,.0f} "
            f"rows/s, {size_mb / float(prepared['seconds']):.0f} MB/s, peak RSS {prepared['peak_rss_mb']} MB)"
        )
        print(f"ratio prepare / bare: {ratio:.2f} (target <= 3)")
        import pyarrow

        report = {
            "benchmark": "prepare",
            "rows": rows,
            "bare_rows_per_s": round(rows / float(bare["seconds"])),
            "prepare_rows_per_s": round(rows / float(prepared["seconds"])),
            "target_rows_per_s": 400_000,
            "file_bytes": raw.stat().st_size,
            "bare_parse_s": round(float(bare["seconds"]), 3),
            "bare_mode": bare["mode"],
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
        if args.profile:
            shutil.rmtree(work / "prepared", ignore_errors=True)
            profile = _child("profile", raw, work / "prepared")["profile"]
            print("\nprepare, by cumulative time:\n" + profile["cumulative"])
            print("prepare, by own time:\n" + profile["tottime"])
            report["profile"] = profile
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
