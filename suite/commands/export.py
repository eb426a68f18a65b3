"""``suite export``: runs, a study or the leaderboard as CSV and LaTeX tables."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from suite.commands.common import ConfigDefaultsFormatter


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        formatter_class=ConfigDefaultsFormatter,
        help="write runs, a study or the leaderboard as CSV and LaTeX tables",
        description="SOURCE is `runs` (result JSONs under --results, e.g. a reproduction's "
        "runs, grouped over seeds as mean ± std), `study NAME|DIR` (its trials, Pareto-optimal "
        "first) or `leaderboard` (its submissions). Writes <stem>.csv (numbers) and <stem>.tex "
        "(a booktabs LaTeX table for a page: the metrics labelled as a paper would, units in "
        "the header, each figure mean ± the half-width of its 90% t interval over seeds).",
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
        "--metric",
        action="append",
        dest="metrics",
        metavar="NAME[,NAME...]",
        help="only these metrics, in this order (repeatable or comma-separated, e.g. "
        "--metric test_auc,test_logloss); the LaTeX table's default: test AUC, test log loss "
        "and embedding size where the runs have them",
    )
    parser.add_argument(
        "--by",
        default=None,
        metavar="COLUMNS",
        help="group runs by these comma-separated columns (default: task, dataset, model, "
        "embedding, group, data_fingerprint: one row per config and data); a grouping that "
        "pools different configs or data is refused unless --pool",
    )
    parser.add_argument(
        "--pool",
        action="store_true",
        help="allow --by to average runs of different configs or data in one row",
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
    if args.metrics:
        args.metrics = [m.strip() for text in args.metrics for m in text.split(",") if m.strip()]
    paper = None
    if args.source == "runs":
        from suite.api import load_results

        filters = {}
        for text in args.where:
            key, sep, value = text.partition("=")
            if not sep:
                raise ConfigError(f"--where expects COLUMN=VALUE, got {text!r}")
            filters[key] = _value(key, value)
        by = [c.strip() for c in args.by.split(",") if c.strip()] if args.by else export.GROUP_BY
        frame = load_results(args.results, **filters)
        numeric, display = export.runs_tables(frame, args.metrics, by, pool=args.pool)
        paper = _paper(numeric, args.metrics)
        stem, caption = "runs", _caption(numeric)
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
        paper = _paper(numeric, args.metrics)
        stem, caption = "leaderboard", "Leaderboard. " + _caption(numeric)
    print(export.table_text(display))
    for path in export.write_tables(numeric, display, args.out, stem, caption, paper):
        print(f"wrote {path}")
    return 0


def _paper(numeric: Any, metrics: list[str] | None) -> Any:
    """The table for a page of a numeric frame: :func:`suite.export.paper_table` on the
    chosen metrics (default :data:`suite.export.PAPER_METRICS` where present)."""
    from suite import export

    names = [c.removesuffix("_mean") for c in numeric.columns if c.endswith("_mean")]
    return export.paper_table(numeric, export.paper_metrics(names, metrics))


def _caption(numeric: Any) -> str:
    """The LaTeX caption: what the figures and their ``±`` are, at the one level."""
    from suite.decisions import INTERVAL_LEVEL

    seeds = sorted({int(n) for n in numeric["seeds"]}) if "seeds" in numeric else []
    over = "each row's seeds"
    if len(seeds) == 1:
        over = f"{seeds[0]} seed{'s' if seeds[0] != 1 else ''}"
    single = " (no $\\pm$: one seed)" if 1 in seeds and len(seeds) > 1 else ""
    level = f"{INTERVAL_LEVEL:.0%}".replace("%", "\\%")
    return f"Mean $\\pm$ half-width of the {level} Student-t interval over {over}{single}."


def _value(key: str, text: str) -> int | float | bool | str:
    """A ``--where`` value: an integer, a float or a boolean where it reads as one (for
    config columns such as ``config.train.sparse_lr``); hashes stay text."""
    if key in ("config_hash", "group", "data_fingerprint", "mlflow_run_id"):
        return text
    if text.lstrip("-").isdigit():
        return int(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return float(text)
    except ValueError:
        return text
