"""``suite resume RUN_ID``: continue a killed run from its last checkpoint, in its MLflow run."""

from __future__ import annotations

import argparse
import os
import tempfile

from suite.errors import SuiteError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "resume",
        help="continue a killed run from its last checkpoint",
        description="Read the run's config from MLflow and continue it from its last checkpoint "
        "(train.checkpoint_every), in the same MLflow run; the same as `suite run ... --resume`. "
        "A distributed run resumes on as many local ranks as it had (torchrun).",
    )
    parser.add_argument("run_id", metavar="RUN_ID", help="the MLflow run id of the killed run")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI of the run")
    parser.add_argument("--out", metavar="RESULT.json", help="also write the result JSON here")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.commands.run import print_result
    from suite.config import load_yaml, validate_config
    from suite.engine.parallel import launched_by_torchrun
    from suite.runs.single import execute
    from suite.tracking import RunStore, resolve_tracking_uri

    uri = resolve_tracking_uri(args.tracking_uri)
    store = RunStore(uri)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = store.download(args.run_id, "config.yaml", tmp)
            world = int(store.run(args.run_id).data.tags.get("suite.world_size", "1"))
        except Exception as exc:  # unknown run, unreachable store, no config artifact
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise SuiteError(
                f"cannot read run {args.run_id}'s config.yaml from {uri}: {message}"
            ) from None
        data = load_yaml(path)
    data.setdefault("tracking", {})["uri"] = uri
    config = validate_config(data, f"run {args.run_id}'s config.yaml")
    if world > 1 and not launched_by_torchrun():  # its ranks again, each from its own part
        from suite.runs.launch import relaunch

        return relaunch([*args.argv, "--tracking-uri", uri], world)
    result = execute(config, out=args.out, resume=True)
    if os.environ.get("RANK", "0") == "0":  # one printout per distributed run
        print_result(result)
    return 0
