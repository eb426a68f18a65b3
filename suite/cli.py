"""The ``suite`` command. Subcommands live in ``suite.commands`` and are found there."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import sys

import suite.commands
from suite import __version__
from suite.errors import SuiteError


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="suite",
        description="recsuite: benchmark DLRM-family models and embedding compression.",
    )
    parser.add_argument("--version", action="version", version=f"recsuite {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(suite.commands.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"suite.commands.{info.name}")
        if hasattr(module, "register"):
            module.register(subparsers)
    return parser


EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
"""Exit status when the reader of stdout went away (``suite list | head``): what the shell
reports for any Unix tool the kernel's SIGPIPE ends (``yes | head``: 141)."""


def main(argv: list[str] | None = None) -> int:
    """Run one ``suite`` command; its exit status. A closed stdout pipe ends it quietly
    with :data:`EXIT_BROKEN_PIPE`, an interruption with ``128 + signal`` and a resume hint."""
    try:
        try:
            return _dispatch(argv)
        finally:
            sys.stdout.flush()  # a closed pipe shows here, not as a traceback at exit
    except BrokenPipeError:
        # Python's recipe: point stdout at devnull so the exit-time flush has nowhere to fail
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


QUIET_MLFLOW = {
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",  # its "View run ..." lines at a run's end
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",  # its "Downloading artifacts" bars
}
"""MLflow's own switches for what it writes to the console, set (unless the user set
them) so that a command's stdout holds its results only; the suite names each run's id
and store in its own result lines."""


def _dispatch(argv: list[str] | None) -> int:
    for name, value in QUIET_MLFLOW.items():
        os.environ.setdefault(name, value)
    parser = make_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except SuiteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk under a writer that does not name its own
        from suite.fileio import disk_full_error, is_disk_full

        if not is_disk_full(exc):
            raise
        print(f"error: {disk_full_error(exc.filename or os.getcwd())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP during a run
        from suite.runs.signals import interrupted_message
        from suite.tracking import resolve_tracking_uri

        signum = getattr(exc, "signum", signal.SIGINT)
        print(interrupted_message(exc, resolve_tracking_uri(None)), file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
