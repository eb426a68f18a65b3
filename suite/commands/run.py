"""``suite run``: resolve a config and run its task down the one run path."""

from __future__ import annotations

import argparse

from suite.commands.common import add_run_arguments, config_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run", help="run a task on a model, embedding method and dataset",
        description="Resolve the run config (YAML, flags, --set) and run its task; the run is logged "
        "to MLflow and its result written as JSON.",
    )
    add_run_arguments(parser)
    parser.add_argument("--out", metavar="RESULT.json", help="also write the result JSON here")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if args.print_config:
        print(config.to_yaml(), end="")
        print(f"# config hash: {config.config_hash()}")
        return 0
    from suite.engine.runner import execute

    result = execute(config, out=args.out)
    print_result(result)
    return 0


def print_result(result) -> None:  # noqa: ANN001
    print(f"{result.task} {result.model}/{result.embedding} on {result.dataset} "
          f"(seed {result.seed}, config {result.config_hash}, data {result.data_fingerprint[:12]})")
    for name, value in result.metrics.items():
        print(f"  {name:<24} {value:.6g}")
    if "checkpoint" in result.details:
        print(f"  checkpoint: {result.details['checkpoint']} (step {result.details['checkpoint_step']})")
    if result.mlflow_run_id:
        print(f"  mlflow run {result.mlflow_run_id} in {result.mlflow_tracking_uri}")
