"""The ``suite`` command. Subcommands live in ``suite.commands`` and are found there."""

from __future__ import annotations

import argparse
import importlib
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


def main(argv: list[str] | None = None) -> int:
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
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP during a run
        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"interrupted by {signal.Signals(signum).name}", file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
