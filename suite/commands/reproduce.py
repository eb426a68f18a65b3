"""``suite reproduce``: re-check the papers' claims and write the report."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING

from suite.commands.common import ConfigDefaultsFormatter, add_set_argument
from suite.executors import EXECUTORS

if TYPE_CHECKING:
    from suite.reproduce.costs import PlanCosts
    from suite.reproduce.plan import ReproductionPlan
    from suite.reproduce.regime_runs import RegimeSetup


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        formatter_class=ConfigDefaultsFormatter,
        help="re-derive the papers' claims and write results/reproduce/<profile>/REPORT.md",
        description="Run the reproduction specs of a profile (quick: built-in data on CPU; full: "
        "real data on GPU) under every seed of the profile, judge every claim on confidence "
        "intervals, and write the report and plots. The checked-in reference report is "
        "refreshed only on purpose: --out results/quick.",
    )
    parser.add_argument(
        "--profile",
        default="quick",
        help="quick (default), standard, ground, full, or regime (the standard profile's "
        "empirical claims in every regime of suite/reproductions/regimes.yaml; a profile with "
        "regimes: FILE, as ground-regime, does the same for the profile it is like)",
    )
    parser.add_argument("--paper", action="append", help="only this paper (repeatable; see --list)")
    parser.add_argument("--claim", action="append", help="only this claim id (repeatable)")
    parser.add_argument(
        "--out",
        help="report directory (default results/reproduce/<profile>, ignored by git; "
        "results/<profile> refreshes the checked-in reference)",
    )
    parser.add_argument("--tracking-uri", help="MLflow tracking URI")
    add_set_argument(parser, "override a field of every run, e.g. --set device=cuda")
    parser.add_argument("--list", action="store_true", help="list papers, profiles and claims")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--workers",
        type=int,
        help="worker processes training the (run, seed) jobs, one torch thread each "
        "(default: one per core, or one per visible GPU for CUDA jobs, each worker then "
        "seeing its own GPU; at most one per job; 1: in this process, in order)",
    )
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="where the jobs run: local worker processes, or tasks on a Ray cluster "
        "(pip install -e '.[ray]'; see README, 'Many machines')",
    )
    parser.add_argument(
        "--address",
        metavar="HOST:PORT",
        help="--executor ray: the cluster's address (default: RAY_ADDRESS, else a cluster "
        "Ray starts on this machine)",
    )
    parser.add_argument(
        "--from-results",
        nargs="?",
        const="",
        metavar="DIR",
        help="train nothing: rebuild the report and plots from the run results stored under "
        "DIR/runs (default: the report directory)",
    )
    parser.add_argument(
        "--finished-seeds",
        action="store_true",
        help="--from-results: an interim report of a reproduction still under way, judged on "
        "the seeds whose every job is stored (at least 2); the header names the others",
    )
    parser.add_argument(
        "--rerun",
        metavar="PAPER/RUN",
        help="train this one stored job again (with --seed) and compare it bit for bit with "
        "its stored result under --out; exit 1 if they differ",
    )
    parser.add_argument("--seed", type=int, help="the seed of --rerun")
    parser.add_argument(
        "--tune",
        action="store_true",
        help="run one Optuna study per tuned run of the profile's tuning block (same budget "
        "for each) and write suite/reproductions/tuned/<paper>.<profile>.yaml; --workers 1 "
        "(the default here) reproduces the values",
    )
    parser.add_argument(
        "--retune",
        action="store_true",
        help="--tune: tune every run again (without it, runs whose tuned values the tuning "
        "block still asks for keep them, and only the others are tuned)",
    )
    parser.add_argument("--storage", help="--tune: Optuna storage URL (default: one per study)")
    parser.add_argument(
        "--plan",
        action="store_true",
        help="train nothing, prepare no data: print each run's memory (parameters, optimizer "
        "state, activations) against its device's, its expected time from the training rates "
        "of the stored runs, and the device-hours and wall time for --workers. A real run "
        "checks the same memory first and stops (exit 2) before training a job that cannot "
        "fit. RECSUITE_DEVICE_MEMORY=64GiB stands in for every device's memory",
    )
    parser.set_defaults(handler=handle)


def command_line(args: argparse.Namespace) -> str:
    """The command as given (options in a canonical order), for the report's header."""
    words = ["suite", "reproduce", "--profile", args.profile]
    for paper in args.paper or []:
        words += ["--paper", paper]
    for claim in args.claim or []:
        words += ["--claim", claim]
    words += [f"--set={text}" for text in args.overrides]
    if args.out:
        words += ["--out", args.out]
    if args.tracking_uri:
        words += ["--tracking-uri", args.tracking_uri]
    if args.quiet:
        words.append("--quiet")
    if args.from_results is not None:
        words += ["--from-results", args.from_results] if args.from_results else ["--from-results"]
    if args.finished_seeds:
        words.append("--finished-seeds")
    return shlex.join(words)


def not_for_tuning(args: argparse.Namespace) -> list[str]:
    """The flags given that ``--tune`` does not honour (it runs the studies and writes the
    tuned values: no jobs, report, plan or stored results)."""
    given = {
        "--claim": bool(args.claim),
        "--out": args.out is not None,
        "--list": args.list,
        "--executor": args.executor != "local",
        "--address": args.address is not None,
        "--from-results": args.from_results is not None,
        "--finished-seeds": args.finished_seeds,
        "--rerun": args.rerun is not None,
        "--seed": args.seed is not None,
        "--plan": args.plan,
    }
    return [flag for flag, present in given.items() if present]


def handle(args: argparse.Namespace) -> int:
    from suite.errors import ConfigError

    if args.retune and not args.tune:
        raise ConfigError("--retune: only with --tune (it says which runs --tune tunes again)")
    if args.storage and not args.tune:
        raise ConfigError("--storage: only with --tune (it is where the studies are kept)")
    ignored = not_for_tuning(args) if args.tune else []
    if ignored:
        raise ConfigError(
            f"{', '.join(ignored)}: not with --tune, which runs the profile's tuning studies "
            "and writes their tuned values (run the command without --tune for the "
            "reproduction itself)"
        )
    if args.tune:
        from suite.commands.tune import handle_tune

        return handle_tune(args)
    from pathlib import Path

    from suite.config import parse_override, set_dotted
    from suite.environment import git_commit
    from suite.errors import ConfigError
    from suite.fileio import write_text_atomic
    from suite.reproduce.costs import check_fit, plan_costs
    from suite.reproduce.plan import build_plan
    from suite.reproduce.plots import draw_plots
    from suite.reproduce.report import (
        regime_rows_of,
        render_report,
        summary_counts,
        summary_line,
    )
    from suite.reproduce.runner import (
        default_report_dir,
        finish_tracking,
        regenerate,
        reproduce,
    )
    from suite.reproduce.spec import list_specs, load_spec
    from suite.reproduce.store import stored_cardinalities

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
    out_dir = Path(args.out or default_report_dir(args.profile))
    if args.rerun:
        return rerun_job(args, out_dir, overrides)
    from suite.reproduce.regime_runs import regime_setup

    regime = regime_setup(args.profile, args.paper)
    if args.finished_seeds and (args.from_results is None or regime is not None):
        raise ConfigError(
            "--finished-seeds: only with --from-results, and not for the regime profile "
            "(an interim report judges the stored seeds of one profile)"
        )
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers: expected a number of processes >= 1, got {args.workers}")
    command = command_line(args)
    git_commit()  # read (and cached) before this command rewrites its report's plots
    from_results = None if args.from_results is None else (args.from_results or out_dir)
    run = {
        "progress": not args.quiet,
        "command": command,
        "workers": args.workers,
        "report_dir": out_dir,
        "from_results": from_results,
    }
    if args.plan:
        return print_plan(args, overrides, regime)
    if regime is not None:
        from suite.commands.regime import handle_regime

        return handle_regime(regime, args.paper, args.claim, overrides, **run)
    if from_results is None:
        plan = build_plan(args.profile, args.paper, args.claim, overrides)
        check_fit(plan_costs(plan, args.workers, rates=False))  # before any training
        reproduction = reproduce(
            plan,
            out_dir,
            workers=args.workers,
            executor=args.executor,
            address=args.address,
            progress=not args.quiet,
            command=command,
        )
    else:  # never opens the data cache: a curve's cardinalities come from the stored runs
        directories = [Path(from_results)]
        cards = stored_cardinalities(directories)
        plan = build_plan(args.profile, args.paper, args.claim, overrides, cards)
        reproduction = regenerate(plan, directories, finished_seeds=args.finished_seeds)
    plots = draw_plots(reproduction, out_dir)
    regime = regime_rows_of(reproduction, out_dir)
    report = render_report(reproduction, plots, command, regime=regime)
    path = write_text_atomic(out_dir / "REPORT.md", report, "--out")
    counts = summary_counts(reproduction)
    files = [str(path)] + [
        str(p) for p in sorted(out_dir.glob("*")) if p.suffix in (".png", ".pdf")
    ]
    finish_tracking(
        reproduction, files, {f"claims_{k.replace(' ', '_')}": v for k, v in counts.items()}
    )
    for outcome in reproduction.papers:
        for claim in outcome.claims:
            print(f"{outcome.spec.paper:<10} {claim.label:<30} {claim.claim.id}")
    print(summary_line(reproduction).replace("**", ""))
    print(f"report: {path}")
    return 0


def rerun_job(args: argparse.Namespace, out_dir: object, overrides: dict) -> int:
    """``--rerun PAPER/RUN --seed N``: train that job again, compare with its stored result."""
    from suite.errors import ConfigError
    from suite.reproduce.runner import rerun

    if args.seed is None:
        raise ConfigError("--rerun: give the job's seed with --seed N")
    found = rerun(args.profile, args.rerun, args.seed, str(out_dir), overrides)
    what = f"{args.rerun} seed {args.seed}"
    if not found:
        print(f"{what}: identical (metrics and test logits digest) to {out_dir}/runs")
        return 0
    print(f"{what}: differs from {out_dir}/runs:")
    for line in found:
        print(f"  {line}")
    return 1


def print_plan(args: argparse.Namespace, overrides: dict, regime: RegimeSetup | None = None) -> int:
    """``--plan``: each profile's (each regime's, ``regime`` a regime profile) costs,
    trained and prepared nothing."""
    from suite.reproduce.costs import plan_costs, shape_cardinalities
    from suite.reproduce.plan import build_plan

    if args.from_results is not None or args.rerun:
        from suite.errors import ConfigError

        raise ConfigError("--plan: not with --from-results or --rerun (it trains nothing)")
    from suite.reproduce.regime_runs import load_regimes, regime_plans

    if regime is not None:
        regimes = load_regimes(regime.regimes_file)
        plans = regime_plans(
            args.paper, args.claim, overrides, regimes, shape_cardinalities, regime.profile
        )
    else:
        plans = {
            "": build_plan(args.profile, args.paper, args.claim, overrides, shape_cardinalities)
        }
    for name, plan in plans.items():
        title = f"{args.profile} (regime {name})" if name else args.profile
        for line in plan_lines(title, plan, plan_costs(plan, args.workers)):
            print(line)
    return 0


def plan_lines(title: str, plan: ReproductionPlan, costs: PlanCosts) -> list[str]:
    """The plan as text: the data's sizes, each device's memory, a row per run (its seeds'
    jobs alike) and the totals."""
    from tabulate import tabulate

    from suite.reproduce.costs import rate_advice, shared_memory_jobs
    from suite.units import human_bytes, human_count, human_duration

    runs = costs.runs
    jobs = sum(r.seeds for r in runs)
    lines = [
        f"plan: profile {title}, {len(runs)} runs x {len(plan.seeds)} seeds = {jobs} jobs, "
        f"{costs.workers} workers; nothing trained, no data prepared"
    ]
    for name, shape in costs.shapes.items():
        lines.append(
            f"data {name}: {sum(shape.cardinalities):,} embedding rows over "
            f"{len(shape.cardinalities)} features, {shape.train_rows:,} train rows "
            f"({shape.source})"
        )
    for device in {r.device.kind: r.device for r in runs}.values():
        have = "unknown" if device.available is None else human_bytes(device.available)
        lines.append(f"device {device.kind}: memory {have} ({device.source})")
    for paper, run_id in plan.unreachable:
        lines.append(f"unreachable {paper}/{run_id}: {plan.unreachable[(paper, run_id)]}")
    rows = []
    for r in runs:
        m = r.memory
        have = r.device.available
        share = "" if have is None else f"{m.total / have:.1%}"
        rows.append(
            [
                r.label,
                r.seeds,
                human_bytes(m.total),
                human_bytes(m.embedding),
                human_bytes(m.dense + m.gradients + m.dense_optimizer),
                human_bytes(m.activations),
                share if r.fits else f"{share} DOES NOT FIT",
                human_count(r.steps),
                "-" if r.seconds is None else human_duration(r.seconds),
                "-" if r.rate is None else f"{r.rate.samples_per_s:,.0f}",
            ]
        )
    headers = [
        "run",
        "seeds",
        "memory",
        "embedding",
        "dense+grad+opt",
        "activations",
        "of device",
        "steps",
        "time/job",
        "samples/s",
    ]
    lines += tabulate(rows, headers=headers, disable_numparse=True).splitlines()
    peak = max((r.memory.total for r in runs), default=0)
    lines.append(
        f"memory: largest job {human_bytes(peak)}; embedding = the method's parameters, "
        "auxiliary and sparse optimizer state; activations x3 for backward, or one "
        "evaluation batch"
    )
    shared = shared_memory_jobs(costs)
    if shared is not None:
        fitting = shared.fitting
        verdict = "fit" if fitting >= len(shared.jobs) else f"DO NOT FIT: use --workers {fitting}"
        lines.append(
            f"memory on the cpu's {costs.workers} workers: the {len(shared.jobs)} largest "
            f"jobs together {human_bytes(shared.together)} of "
            f"{human_bytes(shared.available)}: {verdict}"
        )
    device_h = costs.device_seconds / 3600
    lines.append(
        "time: training steps x batch / the samples/s of stored runs of the same device "
        "kind and method (steps at most: early stopping may end a run sooner; "
        "evaluation not counted)"
    )
    sources = sorted({r.rate.source for r in runs if r.rate is not None})
    for source in sources[:6]:
        lines.append(f"  rate from {source}")
    if len(sources) > 6:
        lines.append(f"  ... and {len(sources) - 6} more sources")
    unrated = {r.config.device for r in runs if r.rate is None}
    for device in sorted(unrated):
        count = sum(r.seeds for r in runs if r.rate is None and r.config.device == device)
        lines.append(f"  {count} {device} jobs: {rate_advice(device)}")
    partial = f" (+ {costs.unrated_jobs} jobs without a rate)" if costs.unrated_jobs else ""
    lines.append(
        f"device-hours: {device_h:.2f}{partial}, one device (a core or a GPU) per job; "
        f"wall time on {costs.workers} workers: {human_duration(costs.wall_seconds)}{partial}"
    )
    return lines
