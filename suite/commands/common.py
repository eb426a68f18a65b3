"""Argument helpers shared by subcommands."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from suite.tracking import URI_HELP

if TYPE_CHECKING:  # the config (pydantic) loads when a command runs, not for --help
    from suite.config import RunConfig


class ConfigDefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default; a flag tied to a config field shows that field's
    default, read from the config classes only when help is printed."""

    def _get_help_string(self, action: argparse.Action) -> str:
        key = getattr(action, "config_key", None)
        text = action.help or ""
        if key and "default" not in text:
            return f"{text} (default: {config_default(key)})"
        if action.default in (None, False, []) or "default" in text:
            return text
        return super()._get_help_string(action) or ""


def config_default(key: str) -> object:
    """The default of dotted config field ``key`` (``train.epochs`` -> 1, ``model`` ->
    ``dlrm``), from the pydantic classes without resolving any registry."""
    from suite.config import ComponentSpec, RunConfig

    node: object = RunConfig
    for part in key.split("."):
        info = node.model_fields[part]  # type: ignore[attr-defined]
        node = info.annotation
        default = info.get_default(call_default_factory=False)
    if isinstance(node, type) and issubclass(node, ComponentSpec):
        return node.default_name
    return default


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that resolve a ``RunConfig``; ``parser`` should use
    :class:`ConfigDefaultsFormatter` so their defaults show in ``--help``."""
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE|PRESET",
        help="YAML run config or a preset name such as wukong-s (repeatable; later ones win)",
    )
    flags = [
        ("--model", "model", str, "backbone name (see `suite list models`)"),
        ("--embedding", "embedding", str, "embedding method name"),
        ("--dataset", "dataset", str, "dataset name"),
        ("--protocol", None, str, "dataset split protocol (default: the dataset's own)"),
        ("--task", "task", str, "task name"),
        ("--seed", "seed", int, "run seed"),
        ("--epochs", "train.epochs", int, "training epochs"),
        ("--batch-size", "train.batch_size", int, "training batch size"),
    ]
    for flag, key, kind, text in flags:
        action = parser.add_argument(flag, type=kind, help=text)
        action.config_key = key  # type: ignore[attr-defined]
    device = parser.add_argument("--device", choices=["cpu", "cuda"], help="where to train")
    device.config_key = "device"  # type: ignore[attr-defined]
    parser.add_argument(
        "--tracking-uri",
        help=URI_HELP,
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
    """The ``RunConfig`` the run flags describe."""
    from suite.config import build_config

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
