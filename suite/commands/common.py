"""Argument helpers shared by subcommands."""

from __future__ import annotations

import argparse

from suite.config import RunConfig, build_config


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that resolve a ``RunConfig``."""
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML run config (repeatable; later files win)",
    )
    parser.add_argument("--model", help="backbone name (see `suite list`)")
    parser.add_argument("--embedding", help="embedding method name")
    parser.add_argument("--dataset", help="dataset name")
    parser.add_argument("--protocol", help="dataset split protocol")
    parser.add_argument("--task", help="task name")
    parser.add_argument("--seed", type=int, help="run seed")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="where to train")
    parser.add_argument("--epochs", type=int, help="training epochs")
    parser.add_argument("--batch-size", type=int, help="training batch size")
    parser.add_argument(
        "--tracking-uri",
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite:///./mlruns/mlflow.db)",
    )
    parser.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    add_set_argument(
        parser, "override any config field, e.g. --set train.dense_lr=0.01 (repeatable)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_set_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--set KEY=VALUE`` (repeatable), collected in ``args.overrides``."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help_text
    )


def config_from_args(args: argparse.Namespace) -> RunConfig:
    values = {
        "seed": args.seed,
        "device": args.device,
        "dataset.protocol": args.protocol,
        "train.epochs": args.epochs,
        "train.batch_size": args.batch_size,
        "tracking.uri": args.tracking_uri,
    }
    if args.no_tracking:
        values["tracking.enabled"] = False
    if args.quiet:
        values["train.progress"] = False
    components = {
        "model": args.model,
        "embedding": args.embedding,
        "dataset": args.dataset,
        "task": args.task,
    }
    return build_config(args.config, components, values, args.overrides)
