"""``suite study``: an Optuna study of compression hyperparameters, tracked in MLflow."""

from __future__ import annotations

import argparse

from suite.commands.common import ConfigDefaultsFormatter, add_set_argument
from suite.executors import EXECUTORS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "study",
        formatter_class=ConfigDefaultsFormatter,
        help="run or resume an Optuna study declared in a YAML file",
        description="Run (or resume) a hyperparameter study: every trial is an ordinary run of the "
        "base config with sampled overrides, logged as a child of the study's MLflow parent run. "
        "Outputs (trials.csv, pareto.png, best-<k>.yaml) go to results/studies/<name>/.",
    )
    parser.add_argument("file", metavar="FILE", help="study YAML (see studies/ at the repo root)")
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes on this machine (default 1)"
    )
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="where the trials run: worker processes here, or tasks on a Ray cluster, "
        "the storage and the sampler staying here (pip install -e '.[ray]')",
    )
    parser.add_argument(
        "--address",
        metavar="HOST:PORT",
        help="--executor ray: the cluster's address (default: RAY_ADDRESS, else a cluster "
        "Ray starts on this machine)",
    )
    parser.add_argument(
        "--storage",
        metavar="URL",
        help="Optuna storage: sqlite:///FILE, journal:FILE or postgresql+psycopg2://... "
        "(default: results/studies/<name>/optuna.db for one worker, optuna.journal "
        "for several)",
    )
    parser.add_argument(
        "--trials",
        type=int,
        metavar="N",
        help="finished trials to reach (overrides budget.n_trials)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="stop starting trials after this long (overrides budget.timeout)",
    )
    parser.add_argument("--tracking-uri", help="MLflow tracking URI for the parent and trial runs")
    parser.add_argument(
        "--out", metavar="DIR", help="output directory (default results/studies/<name>)"
    )
    add_set_argument(parser, "override a field of the base run config (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no per-trial lines")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.config import parse_override
    from suite.studies import load_study_spec, run_study
    from suite.units import format_metric

    if args.out:  # where it writes, checked before any work
        from suite.runs.checks import check_output_path

        check_output_path(args.out, "--out", kind="dir")
    spec = load_study_spec(args.file)
    base_overrides = dict(parse_override(text) for text in args.overrides)
    if args.tracking_uri:
        base_overrides["tracking.uri"] = args.tracking_uri
    spec = spec.with_changes(
        n_trials=args.trials, timeout=args.timeout, base_overrides=base_overrides
    )
    outcome = run_study(
        spec,
        workers=args.workers,
        storage=args.storage,
        out_dir=args.out,
        quiet=args.quiet,
        executor=args.executor,
        address=args.address,
    )
    summary = outcome.summary
    counts = ", ".join(f"{v} {k}" for k, v in summary.counts.items() if v)
    status = "done" if outcome.complete else "not done yet (re-run to continue)"
    print(f"study {summary.name}: {counts or 'no trials'}; {status}")
    if summary.best:
        label = "Pareto-optimal" if spec.multi_objective else "best"
        print(f"  {label} trials: {', '.join(str(n) for n in summary.best)}")
        for name, value in summary.metrics.items():
            if name.startswith("best_"):
                print(f"  {name:<24} {format_metric(name.removeprefix('best_'), value)}")
    for path in [*summary.files, *summary.best_configs]:
        print(f"  wrote {path}")
    if outcome.parent_run_id:
        print(f"  mlflow parent run {outcome.parent_run_id}")
    return 0
