"""What checking a prepared dataset on every load costs, beside a default run.

    python benchmarks/bench_load_check.py [--cache-dir DIR] [--rounds 5] [--run-seconds 48]

Prepares the default ``criteo-synth`` (400k train rows, 50k val, 50k test) in a temporary
cache (or uses the one under ``--cache-dir``, read only), then times ``load_prepared``,
which reads and sha256-hashes every array file on every load, ``--rounds`` times with the
files in the page cache (warm: a run right after prepare or after another run) and with
their pages dropped first (cold: ``posix_fadvise(DONTNEED)``, no root needed). Prints
bytes, median seconds, MB/s and the share of a default ``suite run`` (``--run-seconds``,
48 s measured on the 2-core development machine; target <= 5%), then the standard
library's hashes over the same bytes, warm, to show why sha256 is kept.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import print_table

from suite.config import build_config
from suite.data.prepared import load_prepared
from suite.data.source import get_prepared, prepared_dir

TARGET_PERCENT = 5.0


def drop_cached_pages(files: list[Path]) -> None:
    """Ask the kernel to forget the files' clean pages, so the next read goes to disk."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def median_seconds(work: Callable[[], object], rounds: int, before: Callable[[], None]) -> float:
    """Median wall seconds of ``work`` over ``rounds``, ``before`` run untimed each time."""
    times = []
    for _ in range(rounds):
        before()
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def hash_all(files: list[Path], update: Callable[[bytes], object]) -> None:
    """Feed every file's bytes, in 16 MiB blocks, to ``update``."""
    for path in files:
        with open(path, "rb") as handle:
            while block := handle.read(1 << 24):
                update(block)


def crc32_all(files: list[Path]) -> None:
    for path in files:
        crc = 0
        with open(path, "rb") as handle:
            while block := handle.read(1 << 24):
                crc = zlib.crc32(block, crc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", help="prepared-data root holding criteo-synth already")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--run-seconds", type=float, default=48.0, help="a default run's wall")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-load-check-") as tmp:
        cache = args.cache_dir or tmp
        spec = build_config(
            components={"dataset": "criteo-synth"}, values={"dataset.cache_dir": cache}
        ).dataset
        started = time.perf_counter()
        data = get_prepared(spec, progress=False)
        prepare_s = time.perf_counter() - started
        path = prepared_dir(spec)
        files = [path / name for name in sorted(data.manifest["files"])]
        total = sum(f.stat().st_size for f in files)
        train = sum(f.stat().st_size for f in files if f.name.startswith("train."))
        print(
            f"criteo-synth at {path}: {data.manifest['rows']} rows, {len(files)} files, "
            f"{total / 1e6:.1f} MB ({train / 1e6:.1f} MB train); ready in {prepare_s:.1f} s"
        )

        rows = []
        for label, before in [("warm", lambda: None), ("cold", lambda: drop_cached_pages(files))]:
            seconds = median_seconds(lambda: load_prepared(path), args.rounds, before)
            rows.append(
                {
                    "load_prepared": label,
                    "bytes": total,
                    "seconds": seconds,
                    "MB/s": total / seconds / 1e6,
                    "% of run": 100 * seconds / args.run_seconds,
                }
            )
        print_table(rows, ["load_prepared", "bytes", "seconds", "MB/s", "% of run"])
        worst = max(r["% of run"] for r in rows)
        verdict = "holds" if worst <= TARGET_PERCENT else "MISSED"
        print(
            f"target: <= {TARGET_PERCENT:.0f}% of a {args.run_seconds:.0f} s default run: "
            f"{verdict} ({worst:.2f}%)\n"
        )

        hashes: dict[str, Callable[[], object]] = {
            "sha256 (kept)": lambda: hash_all(files, hashlib.sha256().update),
            "blake2b": lambda: hash_all(files, hashlib.blake2b().update),
            "crc32": lambda: crc32_all(files),
        }
        table = []
        for name, work in hashes.items():
            seconds = median_seconds(work, args.rounds, lambda: None)
            table.append({"hash, warm": name, "seconds": seconds, "MB/s": total / seconds / 1e6})
        print_table(table, ["hash, warm", "seconds", "MB/s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
