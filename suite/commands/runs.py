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
        help="mark KILLED the RUNNING runs of this host whose process is gone",
        description="Find the runs left RUNNING by a process of this host that died (SIGKILL, "
        "power loss) and end them KILLED, tagged suite.killed_by. Runs of live processes and "
        "of other hosts are left alone.",
    )
    clean.add_argument(
        "--tracking-uri",
        help=URI_HELP,
    )
    clean.set_defaults(handler=handle_clean)


def handle_clean(args: argparse.Namespace) -> int:
    from suite.errors import SuiteError
    from suite.tracking import clean_dead_runs, open_client, resolve_tracking_uri, sqlite_path

    store = sqlite_path(resolve_tracking_uri(args.tracking_uri))
    if store is not None and not store.exists():
        raise SuiteError(f"no MLflow tracking store at {store}")
    client, uri = open_client(args.tracking_uri)
    dead = clean_dead_runs(client, uri)
    for run in dead:
        tags = run.data.tags
        print(
            f"killed {run.info.run_id} ({run.info.run_name}): process {tags.get('suite.pid')} "
            f"on {tags.get('suite.host')} is gone"
        )
    print(f"{len(dead)} dead run(s) marked KILLED in {uri}")
    return 0
