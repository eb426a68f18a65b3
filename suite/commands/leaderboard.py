"""``suite leaderboard``: validate, verify and render submissions; keep the fingerprint registry."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from suite.commands.common import add_set_argument
from suite.errors import ConfigError
from suite.leaderboard import BOARD_OPTION, FINGERPRINTS, LEADERBOARD_DIR


def _board_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--leaderboard-dir",
        default=str(LEADERBOARD_DIR),
        help="leaderboard folder (default: ./leaderboard)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "leaderboard",
        help="validate, verify and render leaderboard submissions",
        description="Work with leaderboard/: validate submission files, re-run a recorded "
        "seed, render README.md and index.html, and keep fingerprints.yaml.",
    )
    parser.set_defaults(handler=lambda args: _help(parser))
    sub = parser.add_subparsers(dest="leaderboard_command", metavar="SUBCOMMAND")
    for add in (_add_validate, _add_verify, _add_render, _add_fingerprints, _add_import):
        add(sub)


def _add_validate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check submission files",
        description="Check submission files (default: all under leaderboard/submissions): "
        "schema, config hash, metrics, seeds, registered data fingerprint, duplicates. "
        "Prints one line per problem (file: field: message); exits 1 if any.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="submission files to check")
    _board_arg(p)
    p.set_defaults(handler=handle_validate)


def _add_verify(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="re-run a recorded seed and compare its metrics",
        description="Re-run one recorded seed of a submission from its recorded config on the "
        "recorded data (checked by fingerprint first) through the ordinary run path, and "
        "compare the metrics: sizes exactly, quality figures (AUC, log loss) within "
        "--tolerance (default 3e-3 absolute: rounding differs between x86 CPUs' vector "
        "kernels and on GPU), timings not at all. --record notes an agreeing re-run in "
        "verifications.yaml, which marks the entry verified on the board.",
    )
    p.add_argument("file", metavar="FILE", help="submission file")
    p.add_argument("--seed", type=int, help="recorded seed to re-run (default: the first)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI for the re-run")
    p.add_argument("--no-tracking", action="store_true", help="do not log the re-run to MLflow")
    p.add_argument("--device", choices=["cpu", "cuda"], help="re-run here (default: as recorded)")
    p.add_argument("--tolerance", type=float, help="absolute tolerance instead of the default")
    p.add_argument("--cache-dir", help="root of prepared datasets")
    p.add_argument("--raw", help="raw data for datasets that need it")
    p.add_argument("--out", metavar="RESULT.json", help="also write the re-run's result here")
    p.add_argument("--progress", action="store_true", help="show progress bars")
    p.add_argument(
        "--record",
        action="store_true",
        help="if it agrees, append the re-run to <leaderboard>/verifications.yaml",
    )
    p.set_defaults(handler=handle_verify)


def _add_render(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "render",
        help="write leaderboard/README.md and index.html from the submissions",
        description="Validate every submission, then render the Markdown tables and the "
        "static HTML page (sortable, filterable, quality-vs-memory chart).",
    )
    _board_arg(p)
    p.add_argument("--out", metavar="DIR", help="write here instead of the leaderboard folder")
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if the rendered files differ from the ones there",
    )
    p.set_defaults(handler=handle_render)


def _add_fingerprints(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fingerprints",
        help="show or update leaderboard/fingerprints.yaml",
        description="The fingerprints the leaderboard accepts per dataset, protocol and "
        "options hash. --update regenerates every synthetic dataset (default options and "
        "every option set a submission uses, one per seed where its seeds each drew their "
        "own data) in a temporary folder; with --dataset it "
        "prepares (or reads from the cache) that dataset and records it.",
    )
    _board_arg(p)
    p.add_argument("--update", action="store_true", help="regenerate and write the registry")
    p.add_argument(
        "--check", action="store_true", help="regenerate the synthetic entries; exit 1 if stale"
    )
    p.add_argument(
        "--only-used",
        action="store_true",
        help="regenerate only the option sets submissions use (skip the defaults)",
    )
    p.add_argument("--dataset", help="register this dataset (e.g. a real one, after prepare)")
    p.add_argument("--protocol", help="its split protocol")
    p.add_argument("--raw", help="its raw files")
    p.add_argument("--cache-dir", help="root of prepared datasets")
    add_set_argument(p, "dataset option (repeatable)")
    p.set_defaults(handler=handle_fingerprints)


def _add_import(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import-reproduction",
        help="enter a reproduction's committed runs on the board, verified by regeneration",
        description="Build one submission per run folder of each RESULTS_DIR "
        "(results/<profile>, runs under runs/<config hash>/seed-<n>.json) with at least "
        "three seeds, submitted by 'recsuite reproduction <profile>', and record in "
        "verifications.yaml that it regenerates from those committed runs (the record binds "
        "its content hash and each run file's figures digest, which validate checks). "
        "Entries of the profile the runs no longer build are removed; a config already on "
        "the board from an earlier-named reproduction is not entered twice. Paths are "
        "recorded relative to the leaderboard's parent folder (the repository root).",
    )
    p.add_argument("results", nargs="+", metavar="RESULTS_DIR", help="e.g. results/curve")
    p.add_argument(
        "--task",
        action="append",
        help="task whose runs to enter (repeatable; default: accuracy)",
    )
    _board_arg(p)
    p.set_defaults(handler=handle_import)


def handle_import(args: argparse.Namespace) -> int:
    from suite.leaderboard.reproduction import DEFAULT_TASKS, import_reproduction
    from suite.leaderboard.validate import validate

    board = _board(args)
    root = board.resolve().parent
    for results in args.results:
        out = import_reproduction(Path(results), board, root, tasks=args.task or DEFAULT_TASKS)
        for line in out.skipped:
            print(f"skipped {line}", file=sys.stderr)
    report = validate(board)
    for problem in report.problems:
        print(problem)
    if report.problems:
        print(f"{len(report.problems)} problem(s): fix them before rendering", file=sys.stderr)
        return 1
    print(f"{len(report.submissions)} submission(s) valid; run `suite leaderboard render`")
    return 0


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _print_report(report) -> None:
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for problem in report.problems:
        print(problem)


def _board(args: argparse.Namespace) -> Path:
    """``--leaderboard-dir``, refused in one line unless it is an existing directory."""
    board = Path(args.leaderboard_dir)
    if not board.is_dir():
        what = "is not a directory" if board.exists() else "does not exist"
        raise ConfigError(f"--leaderboard-dir: {board} {what}; expected a leaderboard folder")
    return board


def handle_validate(args: argparse.Namespace) -> int:
    from suite.leaderboard.validate import validate

    files = [Path(f) for f in args.files] or None
    report = validate(_board(args), files)
    _print_report(report)
    if report.problems:
        files_with = len({p.file for p in report.problems})
        print(f"{len(report.problems)} problem(s) in {files_with} file(s)", file=sys.stderr)
        return 1
    print(f"{len(report.submissions)} submission(s) valid")
    return 0


def handle_verify(args: argparse.Namespace) -> int:
    from suite.leaderboard.verify import VerifyOptions, verify

    if args.tolerance is not None and not (0.0 <= args.tolerance < 1.0):
        print(f"--tolerance must be in [0, 1), got {args.tolerance}", file=sys.stderr)
        return 2
    options = VerifyOptions(
        seed=args.seed,
        tracking_uri=args.tracking_uri,
        tracking=not args.no_tracking,
        device=args.device,
        tolerance=args.tolerance,
        cache_dir=args.cache_dir,
        raw=args.raw,
        out=Path(args.out) if args.out else None,
        progress=args.progress,
        record=args.record,
    )
    outcome = verify(Path(args.file), options)
    for note in outcome.notes:
        print(f"note: {note}")
    for comparison in outcome.comparisons:
        print(f"  {comparison.describe()}")
    if outcome.result is not None and outcome.result.mlflow_run_id:
        print(f"re-run logged as MLflow run {outcome.result.mlflow_run_id}")
    rule = "bit-identical" if outcome.identical else outcome.rule
    if outcome.ok:
        print(f"verified: seed {outcome.seed} reproduces the recorded metrics ({rule})")
        return 0
    if not outcome.compared:
        print(f"NOT verified: seed {outcome.seed} has only timings, which are not compared")
        return 1
    bad = [c.metric for c in outcome.comparisons if not c.ok]
    print(f"NOT verified: seed {outcome.seed} differs in {', '.join(bad)} ({rule})")
    return 1


def load_valid(board: Path):
    """The leaderboard's submissions as render items, after full validation."""
    from suite.leaderboard.render import Item
    from suite.leaderboard.validate import validate

    report = validate(board)
    _print_report(report)
    verified, stale = report.verifications, report.stale()
    items = [
        Item(
            path.name,
            sub,
            verified.is_verified(path.name),
            stale.get(path.name),
            tuple(verified.of(path.name)),
        )
        for path, sub in report.submissions
    ]
    return report, items


def handle_render(args: argparse.Namespace) -> int:
    from suite.leaderboard.render import INDEX, README, render_html, render_markdown

    board = _board(args)
    field = "--out" if args.out else BOARD_OPTION
    if not args.check:  # where it writes, checked before any work
        from suite.runs.checks import check_output_path

        check_output_path(args.out or board, field, kind="dir")
    report, items = load_valid(board)
    if report.problems:
        print("not rendering: fix the problems above first", file=sys.stderr)
        return 1
    texts = {README: render_markdown(items), INDEX: render_html(items)}
    out = Path(args.out) if args.out else board
    if args.check:
        stale = [name for name, text in texts.items() if _read(out / name) != text]
        for name in stale:
            print(f"{out / name} is not what `suite leaderboard render` writes", file=sys.stderr)
        return 1 if stale else 0
    from suite.leaderboard.fingerprints import write_atomic

    for name, text in texts.items():
        write_atomic(out / name, text, field)
        print(f"wrote {out / name}")
    print(f"{len(items)} submission(s)")
    return 0


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def handle_fingerprints(args: argparse.Namespace) -> int:
    from suite.leaderboard.fingerprints import (
        FingerprintRegistry,
        options_hash,
        prepare_entry,
        submission_options,
        update_synthetic,
    )
    from suite.leaderboard.validate import load_submission, submission_files

    board = Path(args.leaderboard_dir)
    path = board / FINGERPRINTS
    registry = FingerprintRegistry.load(path)
    if args.dataset:
        from suite.config import build_config

        overrides = [f"dataset.options.{text}" for text in args.overrides]
        values = {
            "dataset.raw": args.raw,
            "dataset.protocol": args.protocol,
            "dataset.cache_dir": args.cache_dir,
        }
        config = build_config(
            components={"dataset": args.dataset}, values=values, overrides=overrides
        )
        entry = prepare_entry(config.dataset, rebuild=False, progress=True)
        spec = config.dataset
        print(
            f"{spec.name}/{spec.protocol} options {options_hash(entry.options)}: {entry.fingerprint}"
        )
        changed = registry.set(spec.name, str(spec.protocol), entry)
        if changed:
            print(f"warning: replaced fingerprint {changed}", file=sys.stderr)
        if args.update:
            registry.save(path)
            print(f"wrote {path}")
        return 0
    if not (args.update or args.check):
        print(registry.to_yaml(), end="")
        return 0
    extra = []
    for file in submission_files(board)[0]:
        sub, _ = load_submission(file)
        if sub is not None:
            extra += submission_options(sub)
    before = registry.to_yaml()
    changes = update_synthetic(registry, extra, defaults=not args.only_used)
    for change in changes:
        print(f"warning: {change}", file=sys.stderr)
    if args.check:
        stale = registry.to_yaml() != before
        if stale:
            print(
                f"{path} is stale: run `suite leaderboard fingerprints --update`", file=sys.stderr
            )
        return 1 if stale else 0
    registry.save(path)
    print(f"wrote {path}")
    return 0
