"""``suite compare A B``: two configs' runs paired by seed, with paired 90% intervals
(``suite.decisions.INTERVAL_LEVEL``: the two one-sided 5% tests' interval)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from suite.commands.common import ConfigDefaultsFormatter


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare",
        formatter_class=ConfigDefaultsFormatter,
        help="compare two runs or multi-seed groups metric by metric, with paired CIs",
        description="A and B are each a result JSON (single or multi-seed), an MLflow run id "
        "(a run or a multi-seed parent), a config hash or a group hash (the config without "
        "its seed, shared by its seeds). Runs are paired by seed; each metric gets the mean "
        "difference A - B with its 90% interval (the two one-sided 5% tests'), the deciding "
        "p-value and a verdict. With one seed a side, test AUC gets DeLong's paired test and "
        "test log loss a paired test of the per-row losses, on the kept test predictions "
        "(the test set's noise alone); other metrics need --seeds.",
    )
    parser.add_argument("a", metavar="A", help="the first runs")
    parser.add_argument("b", metavar="B", help="the second runs")
    parser.add_argument(
        "--metric", action="append", dest="metrics", metavar="NAME", help="only this metric"
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=0.0,
        help="differences within ±margin count as the same (e.g. 0.001 for AUC)",
    )
    parser.add_argument(
        "--results", default="results/runs", metavar="DIR", help="where run results are"
    )
    parser.add_argument("--json", action="store_true", help="print JSON rows")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.api import compare
    from suite.decisions import INTERVAL_LEVEL

    table = compare(args.a, args.b, args.metrics, margin=args.margin, results_dir=args.results)
    if args.json:
        rows = table.to_dict(orient="records")
        print(json.dumps(rows, indent=2, default=lambda v: None))
        return 0
    print(f"A: {args.a}\nB: {args.b}\npaired seeds: {int(table['n'].iloc[0]) if len(table) else 0}")
    width = max([12, *(len(m) for m in table["metric"])])
    level = f"{INTERVAL_LEVEL:.0%} CI"
    print(f"  {'metric':<{width}} {'A':>11} {'B':>11} {'A - B':>11}  {level:<25} {'p':>7}  verdict")
    for row in table.itertuples():
        a, b, difference, ci = comparison_cells(row.metric, row)
        p = "n/a" if math.isnan(row.p_value) else f"{row.p_value:.3g}"
        print(
            f"  {row.metric:<{width}} {a:>11} {b:>11} {difference:>11}  {ci:<25} {p:>7}  {row.verdict}"
        )
    notes = [n for n in dict.fromkeys(table.get("note", [])) if n]
    for note in notes:  # one line each: how one-seed rows were tested, or what they need
        named = ", ".join(table["metric"][table["note"] == note])
        print(f"  {named}: {note}")
    return 0


def comparison_cells(name: str, row: Any) -> tuple[str, str, str, str]:
    """A row's A, B, A - B and CI cells in the suite's one number format
    (:mod:`suite.units`): bytes in binary units; other figures to the decimal place of the
    CI half-width's second significant digit."""
    from suite.units import decimals_for, format_metric

    places = None if math.isnan(row.low) else decimals_for((row.high - row.low) / 2)
    ci = (
        "n/a"
        if math.isnan(row.low)
        else f"[{format_metric(name, row.low, places, plus=True)}, "
        f"{format_metric(name, row.high, places, plus=True)}]"
    )
    return (
        format_metric(name, row.a_mean, places),
        format_metric(name, row.b_mean, places),
        format_metric(name, row.difference, places, plus=True),
        ci,
    )
