"""``suite reproduce``: re-check the papers' claims and write the report."""

from __future__ import annotations

import argparse

from suite.commands.common import ConfigDefaultsFormatter, add_set_argument


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        formatter_class=ConfigDefaultsFormatter,
        help="re-derive the papers' claims and write results/<profile>/REPORT.md",
        description="Run the reproduction specs of a profile (quick: built-in data on CPU; full: real "
        "data on GPU), check every claim, and write the report and plots.",
    )
    parser.add_argument("--profile", default="quick", help="quick (default) or full")
    parser.add_argument("--paper", action="append", help="only this paper (repeatable; see --list)")
    parser.add_argument("--claim", action="append", help="only this claim id (repeatable)")
    parser.add_argument("--out", help="report directory (default results/<profile>)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI")
    parser.add_argument("--mlflow-ui", default=None, help="base URL of the MLflow UI for links")
    add_set_argument(parser, "override a field of every run, e.g. --set device=cuda")
    parser.add_argument("--list", action="store_true", help="list papers, profiles and claims")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from suite.config import parse_override, set_dotted
    from suite.fileio import write_text_atomic
    from suite.reproduce.plots import draw_plots
    from suite.reproduce.report import DEFAULT_UI, render_report
    from suite.reproduce.runner import default_report_dir, reproduce
    from suite.reproduce.spec import list_specs, load_spec

    if args.list:
        for name in list_specs():
            spec = load_spec(name)
            print(f"{name}: {spec.title} (profiles: {', '.join(spec.profiles)})")
            for claim in spec.claims:
                print(f"  {claim.id}: {claim.text}")
        return 0
    overrides: dict = {}
    for text in args.overrides:
        key, value = parse_override(text)
        set_dotted(overrides, key, value)
    if args.tracking_uri:
        set_dotted(overrides, "tracking.uri", args.tracking_uri)
    if args.quiet:
        set_dotted(overrides, "train.progress", False)
    set_dotted(overrides, "tracking.experiment", f"reproduce-{args.profile}")
    outcomes = reproduce(args.profile, args.paper, args.claim, overrides, progress=not args.quiet)
    out_dir = Path(args.out) if args.out else default_report_dir(args.profile)
    plots = draw_plots(outcomes, out_dir)
    report = render_report(args.profile, outcomes, plots, args.mlflow_ui or DEFAULT_UI)
    write_text_atomic(out_dir / "REPORT.md", report)
    for outcome in outcomes:
        for claim in outcome.claims:
            print(f"{outcome.spec.paper:<10} {claim.verdict:<14} {claim.claim.id}")
    print(f"report: {out_dir / 'REPORT.md'}")
    return 0
