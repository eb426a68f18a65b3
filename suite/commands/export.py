"""``suite export``: runs, a study or the leaderboard as CSV and LaTeX tables."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.commands.common import ConfigDefaultsFormatter


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        formatter_class=ConfigDefaultsFormatter,
        help="write runs, a study or the leaderboard as CSV and LaTeX tables",
        description="SOURCE is `runs` (result JSONs under --results, e.g. a reproduction's "
        "runs, grouped over seeds as mean ± std), `study NAME|DIR` (its trials, Pareto-optimal "
        "first) or `leaderboard` (its submissions). Writes <stem>.csv (numbers) and <stem>.tex "
        "(a LaTeX table in human units).",
    )
    parser.add_argument("source", choices=["runs", "study", "leaderboard"])
    parser.add_argument("name", nargs="?", help="the study's name or directory (for `study`)")
    parser.add_argument("--out", default="results/tables", metavar="DIR", help="output directory")
    parser.add_argument(
        "--results", default="results/runs", metavar="DIR", help="run results (for `runs`)"
    )
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="COLUMN=VALUE",
        help="keep runs whose column has this value (repeatable), e.g. --where task=accuracy",
    )
    parser.add_argument(
        "--metric", action="append", dest="metrics", metavar="NAME", help="only this metric"
    )
    parser.add_argument(
        "--submissions",
        default="leaderboard/submissions",
        metavar="DIR",
        help="submission files (for `leaderboard`)",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite import export
    from suite.errors import ConfigError
    from suite.runs.checks import check_output_path

    check_output_path(args.out, "--out", kind="dir")  # where it writes, before any work
    if args.source == "runs":
        from suite.api import load_results

        filters = {}
        for text in args.where:
            key, sep, value = text.partition("=")
            if not sep:
                raise ConfigError(f"--where expects COLUMN=VALUE, got {text!r}")
            filters[key] = int(value) if value.lstrip("-").isdigit() else value
        numeric, display = export.runs_tables(load_results(args.results, **filters), args.metrics)
        stem, caption = "runs", "Runs: mean ± sample std over seeds."
    elif args.source == "study":
        if not args.name:
            raise ConfigError("suite export study needs the study's name or directory")
        directory = Path(args.name)
        if not directory.is_dir():
            directory = Path("results/studies") / args.name
        numeric, display = export.study_tables(directory)
        stem, caption = f"study-{directory.name}", f"Study {directory.name}: complete trials."
    else:
        numeric, display = export.leaderboard_tables(args.submissions, args.metrics)
        stem, caption = "leaderboard", "Leaderboard: mean ± sample std over each entry's seeds."
    print(export.table_text(display))
    for path in export.write_tables(numeric, display, args.out, stem, caption):
        print(f"wrote {path}")
    return 0
