"""``suite submit``: turn a config's seed runs into a leaderboard submission file."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from suite.leaderboard import LEADERBOARD_DIR
from suite.tracking import URI_HELP


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "submit",
        help="build a leaderboard submission from seed runs",
        description="Summarize one config's runs over at least three seeds (mean, sample std "
        "and each seed's value) into leaderboard/submissions/<slug>-<content hash>.json. "
        "The runs come from a multi-seed MLflow parent run, a list of MLflow run ids, or "
        "result JSON files. An existing different file is never replaced.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--parent",
        "--parent-run",
        dest="parent",
        metavar="RUN_ID",
        help="multi-seed MLflow parent run id (`suite run --seeds 1,2,3` prints it)",
    )
    source.add_argument("--runs", nargs="+", metavar="RUN_ID", help="MLflow run ids, one per seed")
    source.add_argument(
        "--results",
        nargs="+",
        metavar="FILE",
        help="result JSON files, one per seed, or a multi-seed aggregate JSON",
    )
    parser.add_argument("--submitter", required=True, help="your name or team (shown publicly)")
    parser.add_argument("--paper", help="http(s) link to a paper or write-up")
    parser.add_argument("--notes", help="short notes shown with the entry (1000 characters)")
    parser.add_argument(
        "--tracking-uri",
        help=URI_HELP,
    )
    parser.add_argument(
        "--leaderboard-dir",
        default=str(LEADERBOARD_DIR),
        help="leaderboard folder (default: ./leaderboard)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the submission instead of writing it"
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.leaderboard.fingerprints import FingerprintRegistry
    from suite.leaderboard.render import board_of_submission
    from suite.leaderboard.submit import (
        build_submission,
        load_result_files,
        results_from_parent,
        results_from_runs,
        write_submission,
    )
    from suite.leaderboard.validate import UNREGISTERED, check_duplicates, check_submission

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    parent = None
    if args.parent:
        results, parent = results_from_parent(args.parent, args.tracking_uri), args.parent
    elif args.runs:
        results, parent = results_from_runs(args.runs, args.tracking_uri)
    else:
        results, parent = load_result_files(Path(p) for p in args.results)
    submission = build_submission(results, args.submitter, args.paper, args.notes, parent)
    board = Path(args.leaderboard_dir)
    registry = FingerprintRegistry.load(board / "fingerprints.yaml")
    name = f"submissions/{submission.filename()}"
    problems, warnings = check_submission(name, submission, registry, check_name=False)
    held = [(n, s) for n, s in _held(board) if n != name]
    problems += [p for p in check_duplicates([*held, (name, submission)]) if p.file == name]
    for problem in [*warnings, *(p for p in problems if p.code == UNREGISTERED)]:
        print(f"warning: {problem}", file=sys.stderr)
    errors = [p for p in problems if p.code != UNREGISTERED]
    for problem in errors:
        print(f"error: {problem}", file=sys.stderr)
    if errors:
        print(f"not submitted: {len(errors)} problem(s)", file=sys.stderr)
        return 1
    if args.dry_run:
        print(submission.to_file_text(), end="")
        return 0
    path, written = write_submission(submission, board)
    print(f"{'wrote' if written else 'already present:'} {path}")
    print(
        f"  {submission.model}/{submission.embedding} on {submission.dataset} "
        f"({len(submission.seeds)} seeds, config {submission.config_hash})"
    )
    print(f"  board: {board_of_submission(submission)}")
    return 0


def _held(board: Path) -> list:
    from suite.leaderboard.validate import load_submission, submission_files

    files, _ = submission_files(board)
    out = []
    for path in files:
        sub, _ = load_submission(path)
        if sub is not None:
            out.append((f"submissions/{path.name}", sub))
    return out
