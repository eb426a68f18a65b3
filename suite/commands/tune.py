"""``suite reproduce --tune``: the handler that runs the tuning studies of a profile
(:mod:`suite.reproduce.tuning`); ``suite.commands.reproduce`` registers the flags."""

from __future__ import annotations

import argparse
from typing import Any


def handle_tune(args: argparse.Namespace) -> int:
    """``suite reproduce --profile P --tune [--retune] [--paper X] [--workers N] [--storage URL]``."""
    from suite.config import parse_override, set_dotted
    from suite.reproduce.tuning import TuneRequest, tune

    overrides: dict[str, Any] = {}
    for text in args.overrides:
        set_dotted(overrides, *parse_override(text))
    if args.tracking_uri:
        set_dotted(overrides, "tracking.uri", args.tracking_uri)
    set_dotted(overrides, "tracking.experiment", f"reproduce-{args.profile}-tuning")
    request = TuneRequest(
        profile=args.profile,
        papers=args.paper,
        overrides=overrides,
        sets=list(args.overrides),
        workers=1 if args.workers is None else args.workers,
        storage=args.storage,
        progress=not args.quiet,
        retune=args.retune,
    )
    for path in tune(request):
        print(f"tuned values: {path}")
    return 0
