"""How fast is `prepare` next to a bare pyarrow parse of the same Criteo file?

    python benchmarks/bench_prepare.py [--rows N] [--raw PATH | --kaggle PATH] [--rounds 3]
                                       [--profile] [--out results/bench/prepare.json]

Writes a Criteo Kaggle-format ``train.txt`` of N rows (default 1,000,000) with
``benchmarks/gen_criteo.py`` (or takes an existing one with ``--raw``; the Kaggle size is
``--rows 45840617``, ~11 GB: ``--kaggle PATH`` generates it at PATH once, atomically, and
reuses it after, writing ``results/bench/prepare-kaggle-45m.json``; ``nox -s bench`` does
that when ``RECSUITE_BENCH_KAGGLE`` names the path),
then times ``--rounds`` interleaved pairs, each side in its own fresh process with the file in
the page cache:

- ``bare``: ``pyarrow.csv``'s streaming reader over the file at pyarrow's default 1 MB
  block (all cores, bounded memory), the floor. That is the fastest bare parse measured
  here: 16 MB blocks halve its rate (313k against 636-734k rows/s on 10M rows), and a
  whole-file ``read_csv`` is no faster and needs ~5x the file in RAM;
- ``prepare``: ``criteo-kaggle`` (protocol ``dlrm``) from raw text to published arrays:
  parse, vocabulary, ids, split, writing and fingerprint.

Prints both as rows/s of work, the ratio, with 95% CIs over the pairs, each process's CPU
seconds and peak RSS, and whether the targets hold (>= 400k rows/s, <= 3x the bare parse,
<= 8 GB), and writes them as JSON. ``--profile`` runs the prepare process once more under
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
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_criteo import FULL_ROWS, NAMES, generate  # noqa: E402

from suite.decisions import interval_verdict  # noqa: E402
from suite.stats import Interval, mean_ci  # noqa: E402

BARE_BLOCK_BYTES = 1 << 20
"""pyarrow's default block: its fastest here (larger blocks parse with less parallelism)."""


def run_bare(path: Path) -> dict[str, object]:
    """``pyarrow.csv``'s streaming reader over the whole file, batch by batch."""
    read = pacsv.ReadOptions(column_names=NAMES, block_size=BARE_BLOCK_BYTES)
    parse = pacsv.ParseOptions(delimiter="\t")
    # categorical values stay strings (an all-digit hex value must not make a column int)
    convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in NAMES if n[0] == "C"})
    cpu, start = _cpu_seconds(), time.perf_counter()
    rows = sum(len(b) for b in pacsv.open_csv(str(path), read, parse, convert))
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "rows": rows,
        "mode": "open_csv",
        "peak_rss_mb": _peak_rss_mb(),
        "cpu_s": _cpu_seconds() - cpu,
    }


def run_prepare(path: Path, out: Path) -> dict[str, object]:
    from suite.datasets.criteo import CriteoKaggle, CriteoOptions

    cpu, start = _cpu_seconds(), time.perf_counter()
    data = CriteoKaggle().build(CriteoOptions(), "dlrm", path, out, progress=False)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "rows": data.manifest["rows"],
        "fingerprint": data.fingerprint,
        "ids": int(sum(data.schema.cardinalities)),
        "peak_rss_mb": _peak_rss_mb(),
        "cpu_s": _cpu_seconds() - cpu,
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


def _cpu_seconds() -> float:
    """CPU seconds this process spent so far, user and system (kernel) mode together."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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


TARGET_ROWS_PER_S = 400_000
TARGET_RATIO = 3.0
TARGET_RSS_MB = 8 * 1024


def summarize(
    raw: Path, bares: list[dict[str, object]], prepares: list[dict[str, object]]
) -> dict[str, object]:
    """Print and return the rounds' figures: means with 95% CIs over the pairs."""
    import pyarrow

    rows = int(bares[0]["rows"])
    size_mb = raw.stat().st_size / 1e6
    bare_s = [float(b["seconds"]) for b in bares]
    prepare_s = [float(p["seconds"]) for p in prepares]
    ratios = [p / b for p, b in zip(prepare_s, bare_s, strict=True)]
    bare_rate, prepare_rate = (
        mean_ci([rows / s for s in bare_s]),
        mean_ci([rows / s for s in prepare_s]),
    )
    ratio = mean_ci(ratios)
    rss = max(float(p["peak_rss_mb"]) for p in prepares)
    bare_rss = max(float(b["peak_rss_mb"]) for b in bares)
    cpu = [float(p["cpu_s"]) for p in prepares]
    bare_cpu = [float(b["cpu_s"]) for b in bares]

    def interval(ci: Interval) -> list[float]:
        return [round(ci.low, 3), round(ci.high, 3)]

    print(
        f"bare pyarrow.csv.open_csv: {np.mean(bare_s):.2f}s, {bare_rate.mean:,.0f} rows/s "
        f"[{bare_rate.low:,.0f}, {bare_rate.high:,.0f}], {size_mb / np.mean(bare_s):.0f} MB/s, "
        f"{np.mean(bare_cpu):.1f} CPU-s, peak RSS {bare_rss} MB"
    )
    print(
        f"prepare criteo-kaggle:     {np.mean(prepare_s):.2f}s, {prepare_rate.mean:,.0f} rows/s "
        f"[{prepare_rate.low:,.0f}, {prepare_rate.high:,.0f}], {size_mb / np.mean(prepare_s):.0f} "
        f"MB/s, {np.mean(cpu):.1f} CPU-s, peak RSS {rss} MB"
    )
    checks = {
        "rows_per_s": judge(prepare_rate, "greater", TARGET_ROWS_PER_S),
        "ratio": judge(ratio, "less", TARGET_RATIO),
        "peak_rss": "holds" if rss <= TARGET_RSS_MB else "does not hold",
    }
    print(
        f"prepare / bare: {ratio.mean:.2f} [{ratio.low:.2f}, {ratio.high:.2f}] over "
        f"{len(ratios)} pairs (target <= {TARGET_RATIO:g}: {checks['ratio']}); "
        f">= {TARGET_ROWS_PER_S:,} rows/s: {checks['rows_per_s']}; peak RSS <= 8 GB: "
        f"{checks['peak_rss']}"
    )
    last = prepares[-1]
    return {
        "benchmark": "prepare",
        "rows": rows,
        "rounds": len(ratios),
        "file_bytes": raw.stat().st_size,
        "bare_parse_s": [round(s, 3) for s in bare_s],
        "prepare_s": [round(s, 3) for s in prepare_s],
        "bare_rows_per_s": round(bare_rate.mean),
        "bare_rows_per_s_ci": interval(bare_rate),
        "prepare_rows_per_s": round(prepare_rate.mean),
        "prepare_rows_per_s_ci": interval(prepare_rate),
        "ratio": round(ratio.mean, 3),
        "ratio_ci": interval(ratio),
        "bare_cpu_s": [round(c, 2) for c in bare_cpu],
        "prepare_cpu_s": [round(c, 2) for c in cpu],
        "bare_mode": "open_csv",
        "bare_peak_rss_mb": bare_rss,
        "prepare_peak_rss_mb": rss,
        "targets": {
            "rows_per_s": TARGET_ROWS_PER_S,
            "ratio": TARGET_RATIO,
            "peak_rss_mb": TARGET_RSS_MB,
        },
        "holds": checks,
        "prepared_rows": last["rows"],
        "prepared_ids": last["ids"],
        "fingerprint": last["fingerprint"],
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


def judge(ci: Interval, direction: Literal["greater", "less"], target: float) -> str:
    """``suite.decisions.interval_verdict`` of ``mean > target`` (or ``<``) on the pairs'
    95% CI; with one round there is no CI and the single value decides, said so."""
    if ci.n == 1:
        above = ci.mean > target
        return f"{'holds' if above == (direction == 'greater') else 'does not hold'} (one round)"
    return interval_verdict(ci, direction, target=target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rows", type=int, help="rows of the generated file (1,000,000; with --kaggle 45,840,617)"
    )
    parser.add_argument(
        "--out",
        help="JSON result (results/bench/prepare.json; with --kaggle prepare-kaggle-45m.json)",
    )
    parser.add_argument(
        "--workdir", help="where to write the file and prepared arrays (default: a temp dir)"
    )
    parser.add_argument("--raw", help="an existing Criteo-format file to use (not generated)")
    parser.add_argument(
        "--kaggle",
        metavar="PATH",
        help="the Kaggle-size file: generated at PATH once (~11 GB, local disk), then reused",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved bare/prepare pairs (default 3)"
    )
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

    if args.raw and args.kaggle:
        parser.error("give --raw or --kaggle, not both")
    bench = ROOT / "results" / "bench"
    rows = args.rows or (FULL_ROWS if args.kaggle else 1_000_000)
    out = Path(args.out or bench / ("prepare-kaggle-45m.json" if args.kaggle else "prepare.json"))
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-prepare-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        raw = Path(args.raw or args.kaggle or work / "train.txt")
        if args.kaggle:
            raw.parent.mkdir(parents=True, exist_ok=True)
        if not args.raw and not (args.kaggle and raw.exists()):
            start = time.perf_counter()
            _child("generate", raw, Path(str(rows)))  # in a child: the parent stays small
            print(
                f"generated {rows:,} rows, {raw.stat().st_size / 1e6:.0f} MB in "
                f"{time.perf_counter() - start:.1f}s"
            )
        with raw.open("rb") as handle:  # into the page cache, for both contenders
            while handle.read(64 << 20):
                pass
        bares, prepares = [], []
        for round_ in range(args.rounds):  # interleaved: drift hits both sides alike
            bares.append(_child("bare", raw, work / "prepared"))
            shutil.rmtree(work / "prepared", ignore_errors=True)
            prepares.append(_child("prepare", raw, work / "prepared"))
            print(
                f"round {round_ + 1}/{args.rounds}: bare {bares[-1]['seconds']:.2f}s, "
                f"prepare {prepares[-1]['seconds']:.2f}s"
            )
        report = summarize(raw, bares, prepares)
        if args.profile:
            shutil.rmtree(work / "prepared", ignore_errors=True)
            profile = _child("profile", raw, work / "prepared")["profile"]
            print("\nprepare, by cumulative time:\n" + profile["cumulative"])
            print("prepare, by own time:\n" + profile["tottime"])
            report["profile"] = profile
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {out}")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
