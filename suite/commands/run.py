"""``suite run``: resolve a config and run its task down the one run path."""

from __future__ import annotations

import argparse
import os

from suite.commands.common import ConfigDefaultsFormatter, add_run_arguments, config_from_args
from suite.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        formatter_class=ConfigDefaultsFormatter,
        help="run a task on a model, embedding method and dataset",
        description="Resolve the run config (YAML, flags, --set) and run its task; the run is logged "
        "to MLflow and its result written as JSON.",
    )
    add_run_arguments(parser)
    parser.add_argument("--out", metavar="RESULT.json", help="also write the result JSON here")
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config and exit"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue a killed run of this config from its last checkpoint "
        "(train.checkpoint_every), in the same MLflow run",
    )
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        metavar="N",
        help="train on N processes of this machine under torchrun (TorchRec DMP: tables "
        "sharded per the config's sharding section, dense part data-parallel)",
    )
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument(
        "--seeds",
        metavar="S1,S2,...",
        help="run once per seed under one parent MLflow run; report mean and std",
    )
    seeds.add_argument(
        "--repeats",
        type=int,
        metavar="N",
        help="like --seeds with seeds SEED..SEED+N-1 (SEED: --seed or the config's)",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    from suite.engine.parallel import launched_by_torchrun

    distributed = args.nproc_per_node is not None or launched_by_torchrun()
    if distributed and not args.print_config:
        if args.seeds is not None or args.repeats is not None:
            raise ConfigError("a distributed run trains one seed: drop --seeds / --repeats")
        if not launched_by_torchrun():
            if args.nproc_per_node < 1:
                raise ConfigError(
                    f"--nproc-per-node: expected 1 or more, got {args.nproc_per_node}"
                )
            from suite.engine.distributed import check_distributed
            from suite.engine.parallel import Parallel
            from suite.runs.launch import relaunch

            check_distributed(config, Parallel(0, args.nproc_per_node))
            return relaunch(args.argv, args.nproc_per_node)
    if args.print_config:
        print(config.to_yaml(), end="")
        print(f"# config hash: {config.config_hash()}")
        return 0
    if args.seeds is not None or args.repeats is not None:
        if args.resume:
            raise ConfigError("--resume continues one run: drop --seeds / --repeats")
        from suite.runs.multiseed import execute_seeds, parse_seeds, seeds_from

        explicit = parse_seeds(args.seeds) if args.seeds is not None else None
        seeds = seeds_from(explicit, args.repeats, offset=config.seed)
        print_multiseed(execute_seeds(config, seeds, out=args.out))
        return 0
    from suite.runs.single import execute

    result = execute(config, out=args.out, resume=args.resume)
    if os.environ.get("RANK", "0") == "0":  # one printout per distributed run
        print_result(result)
    return 0


def print_multiseed(agg) -> None:
    """A mean ± std table (sample std, ddof=1) with each seed's figure, each metric's
    figures to the decimal place of its std's second significant digit."""
    from suite.units import decimals_for, format_metric, format_spread

    print(
        f"{agg.task} {agg.model}/{agg.embedding} on {agg.dataset} over seeds "
        f"{', '.join(map(str, agg.seeds))} (config {agg.config_hash}, data {agg.data_fingerprint[:12]})"
    )
    seeds = "  ".join(f"{'seed ' + str(s):>12}" for s in agg.seeds)
    width = max([28, *(len(name) for name in agg.mean)])
    print(f"  {'metric':<{width}} {'mean':>12}   {'± std':<12} {seeds}")
    for name, mean in agg.mean.items():
        std = agg.std.get(name)
        places = decimals_for(std)
        spread = format_spread(name, std, places)
        values = "  ".join(
            f"{format_metric(name, r.metrics[name], places):>12}" for r in agg.per_seed
        )
        print(f"  {name:<{width}} {format_metric(name, mean, places):>12}   {spread:<12} {values}")
    rule = agg.checkpoint["rule"]
    steps = ", ".join(
        f"{c['seed']}:{c['step']}" for c in agg.checkpoint["per_seed"] if c["step"] is not None
    )
    print(f"  checkpoint: {rule}" + (f" (seed:step {steps})" if steps else ""))
    print(f"  std: sample standard deviation (ddof={agg.std_ddof})")
    for result in agg.per_seed:
        print_plots(result, f" (seed {result.seed})")
    if agg.mlflow_run_id:
        print(f"  mlflow parent run {agg.mlflow_run_id} in {agg.mlflow_tracking_uri}")


def print_result(result) -> None:
    from suite.units import format_metric

    print(
        f"{result.task} {result.model}/{result.embedding} on {result.dataset} "
        f"(seed {result.seed}, config {result.config_hash}, data {result.data_fingerprint[:12]})"
    )
    width = max([24, *(len(name) for name in result.metrics)])
    for name, value in result.metrics.items():
        print(f"  {name:<{width}} {format_metric(name, value)}")
    if "checkpoint" in result.details:
        print(
            f"  checkpoint: {result.details['checkpoint']} (step {result.details['checkpoint_step']})"
        )
    print_plots(result)
    if result.mlflow_run_id:
        print(f"  mlflow run {result.mlflow_run_id} in {result.mlflow_tracking_uri}")


def print_plots(result, label: str = "") -> None:
    """One line naming the figures the run drew (with tracking on, also in its MLflow run
    under plots/)."""
    from suite.runs.record import plot_paths

    paths = plot_paths(result.details)
    if paths:
        print(f"  plots{label}: {', '.join(str(p) for p in paths)}")
