"""``python -m suite.gpu_check [--dry-run] [--out DIR] [--only STEP ...]``: see
:mod:`suite.gpu_check`. Exits 1 when a step failed."""

from __future__ import annotations

import argparse
import sys

from suite.gpu_check import STEPS, run_check, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m suite.gpu_check",
        description="The GPU check: CUDA steps on a CUDA machine, a CPU dry run elsewhere.",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="skip the CUDA steps even where CUDA is available"
    )
    parser.add_argument("--out", default="results/bench", help="folder for gpu-<device>.json")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=[s.name for s in STEPS],
        help="run only these steps (default: all)",
    )
    args = parser.parse_args(argv)
    report, path = run_check(args.out, dry_run=args.dry_run, only=args.only)
    title = report["device"]["name"] or "no CUDA: dry run on CPU"
    print(f"GPU check: {title} (torch {report['versions']['torch']}, "
          f"fbgemm {report['versions']['fbgemm']})")  # fmt: skip
    print(table(report))
    print(f"wrote {path}")
    return 1 if report["counts"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
