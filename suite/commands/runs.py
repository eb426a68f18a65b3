"""``suite runs clean``: mark KILLED the MLflow runs whose process died."""

from __future__ import annotations

import argparse

from suite.tracking import URI_HELP


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "runs",
        help="housekeeping of the tracked runs",
        description="Housekeeping of the runs in the MLflow tracking store.",
    )
    actions = parser.add_subparsers(dest="runs_action", metavar="ACTION", required=True)
    clean = actions.add_parser(
        "clean",
        help="mark KILLED the RUNNING runs whose process is gone or heartbeat stopped",
        description="Find the runs left RUNNING by a process that died (SIGKILL, power loss, a "
        "lost node) and end them KILLED, tagged suite.killed_by: on this host, a run whose "
        "process is gone; on another host, a run whose heartbeat (rewritten every minute by "
        "its process) is older than --stale-after. Runs of live processes are left alone, "
        "and so are other hosts' runs from before the heartbeat.",
    )
    clean.add_argument(
        "--tracking-uri",
        help=URI_HELP,
    )
    clean.add_argument(
        "--stale-after",
        type=float,
        metavar="SECONDS",
        help="another host's run is dead once its heartbeat is this old (default: "
        "$RECSUITE_STALE_AFTER_S, else 900)",
    )
    clean.set_defaults(handler=handle_clean)


def handle_clean(args: argparse.Namespace) -> int:
    from suite.errors import ConfigError, SuiteError
    from suite.tracking import (
        KILLED_BY_TAG,
        clean_dead_runs,
        open_client,
        resolve_tracking_uri,
        sqlite_path,
    )

    if args.stale_after is not None and not args.stale_after > 0:
        raise ConfigError(f"--stale-after: expected seconds > 0, got {args.stale_after:g}")
    store = sqlite_path(resolve_tracking_uri(args.tracking_uri))
    if store is not None and not store.exists():
        raise SuiteError(f"no MLflow tracking store at {store}")
    client, uri = open_client(args.tracking_uri)
    dead = clean_dead_runs(client, uri, stale_after=args.stale_after)
    for run in dead:
        reason = client.get_run(run.info.run_id).data.tags.get(KILLED_BY_TAG, "")
        print(f"killed {run.info.run_id} ({run.info.run_name}): {reason}")
    print(f"{len(dead)} dead run(s) marked KILLED in {uri}")
    return 0
